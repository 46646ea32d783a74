"""An operator's re-crop: one finished item rendered again with a focus box (ADR 0018).

The box becomes the item's focus hint (its payload's `focus_box`) and the item goes back to
`queued` with a fresh attempt budget through the lease engine's redo (K), whose event carries the
reason `recrop`; a row of `batchcrop_recrops` with the same correlation id, written in the same
transaction, keeps the box for the timeline. A worker then renders the item like any other: the
box is part of the variant, so the new derivatives have keys of their own (nothing stored is
overwritten or deleted), and its fenced success replaces the item's manifest rows in one
transaction (docs/design.md §6, re-crop). Until then the item keeps its earlier derivatives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from batchcrop.batches.actions import require_batch_row
from batchcrop.batches.errors import NoSuchBatch
from batchcrop.batches.items import focus_box, payload_focus
from batchcrop.batches.reads import RECROP_REASON
from batchcrop.batches.service import BatchService
from batchcrop.db import queries
from batchcrop.errors import BatchcropError
from leases import GroupCancelled, NoSuchGroup, NoSuchItem, NotRedoable

RECROP_OPEN_SECONDS = 3600.0
"""A re-crop gives a batch whose deadline is nearer than this (or past) a deadline this far from
now, so that the item is rendered, not abandoned."""


class RecropConflict(BatchcropError):
    """The item is not `succeeded` or `failed` (usually: another re-crop of it is pending).

    `state` is the item's state; `focus_box` its current box (the pending re-crop's), or None.
    """

    def __init__(self, message: str, *, state: str, focus_box: list[int] | None) -> None:
        super().__init__(message)
        self.state = state
        self.focus_box = focus_box


class FocusOutside(BatchcropError):
    """The focus box lies wholly outside the item's upright source, whose size its stored
    preview records: rendering it could only fail the item (`invalid_focus`)."""


class BatchCancelled(BatchcropError):
    """The batch was cancelled: nothing in it is rendered again until it is requeued."""


def recrop(
    batches: BatchService, batch_id: str, item_id: str, box: Sequence[object]
) -> dict[str, Any]:
    """Re-crop one `succeeded` or `failed` item with the focus box `box` (upright source pixels,
    checked as at submission: `FocusError`); returns its item document, now `queued`.

    Of two re-crops of one item, the first to commit wins; the other raises `RecropConflict`
    naming the pending box. Raises `NoSuchBatch` (no such batch or item), `BatchCancelled`, and
    `FocusOutside` for a box that misses the picture (known from the item's stored preview; an
    item without one, never rendered, fails `invalid_focus` when the worker reads the source).
    """
    checked = focus_box(box)
    batches.batch(batch_id)
    leases = batches.leases
    item = leases.item(item_id)
    if item is None or item.group_id != batch_id:
        raise NoSuchBatch(f"no item {item_id} in batch {batch_id}")
    _check_meets_the_picture(checked, batches.item(batch_id, item_id)["preview"])
    payload = {**item.payload, "focus_box": list(checked)}
    try:
        with leases.transaction() as conn:
            correlation_id = leases.redo(
                batch_id,
                item_id,
                payload=payload,
                reason=RECROP_REASON,
                open_seconds=RECROP_OPEN_SECONDS,
                conn=conn,
            )
            require_batch_row(conn, batch_id)
            conn.execute(
                queries.insert_recrop(
                    correlation_id=correlation_id,
                    batch_id=batch_id,
                    item_id=item_id,
                    focus_box=checked,
                )
            )
    except NotRedoable as exc:
        pending = payload_focus(exc.payload)
        box_text = "" if pending is None else f" with focus box {list(pending)}"
        raise RecropConflict(
            f"item {item_id} is {exc.state}{box_text}: only a succeeded or failed item can be "
            "re-cropped",
            state=exc.state,
            focus_box=None if pending is None else list(pending),
        ) from exc
    except GroupCancelled as exc:
        raise BatchCancelled(
            f"batch {batch_id} was cancelled: requeue it before re-cropping its items"
        ) from exc
    except (NoSuchGroup, NoSuchItem) as exc:
        raise NoSuchBatch(f"no item {item_id} in batch {batch_id}") from exc
    return batches.item(batch_id, item_id)


def _check_meets_the_picture(box: Sequence[int], preview: Mapping[str, Any] | None) -> None:
    """`FocusOutside` when `box` lies wholly outside the upright source `preview` records (the
    crop engine's own test, `clipped_focus`)."""
    if preview is None:
        return
    width, height = int(preview["source_width"]), int(preview["source_height"])
    left, top, right, bottom = box
    if min(width, right) <= max(0, left) or min(height, bottom) <= max(0, top):
        raise FocusOutside(f"focus box {list(box)} lies outside the {width}x{height} picture")

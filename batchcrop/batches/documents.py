"""The public JSON documents (docs/design.md §7): status, item, event. Field names are contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from batchcrop.batches.allowance import failures_allowed
from batchcrop.crop import RenderSpec
from leases import UNFINISHED, EventRow, GroupSummary, ItemRow, State
from storage import object_url


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC with millisecond precision and a `Z`, or None."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """The aware UTC moment of a document's time (`iso`'s text)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Batch:
    """The batch row: its id, the render request every item of the batch gets, and the store
    its derivatives go to (None for batches submitted before stores were recorded).
    `allow_failures` is how many failed items it tolerates, as given (`5`, `2.5%`), or None."""

    id: str
    spec: RenderSpec
    store: str | None = None
    label: str | None = None
    callback_url: str | None = None
    allow_failures: str | None = None


def batch_of_row(row: Any) -> Batch:
    """The `Batch` of a `batchcrop_batches` row."""
    return Batch(
        id=str(row["id"]),
        spec=RenderSpec.from_record(row["spec"]),
        store=row["store"],
        label=row["label"],
        callback_url=row["notify_url"],
        allow_failures=row["allow_failures"],
    )


def batch_state(summary: GroupSummary, allowed: int = 0) -> State:
    """docs/design.md §4: computed from the item counts, never from a client counter. `allowed`
    is how many failed items the batch tolerates (`failures_allowed`): a batch whose items all
    ended, none abandoned and at most that many failed, is `succeeded`."""
    counts = summary.counts
    if any(counts[s] for s in UNFINISHED):
        if counts[State.QUEUED] == summary.total:
            return State.QUEUED
        return State.IN_PROGRESS
    if counts[State.SUCCEEDED] == summary.total:
        return State.SUCCEEDED
    if not counts[State.ABANDONED] and counts[State.FAILED] <= allowed:
        return State.SUCCEEDED
    if counts[State.ABANDONED]:
        return State.ABANDONED
    return State.FAILED


def terminal_reason(state: State, summary: GroupSummary, allowed: int = 0) -> str | None:
    """One sentence saying why a terminal batch ended as it did (`allowed`: its
    `failures_allowed`); None while unfinished."""
    if state in UNFINISHED:
        return None
    total = summary.total
    failed = summary.counts[State.FAILED]
    by_category = ", ".join(f"{cat}: {n}" for cat, n in sorted(summary.failures.items()))
    if state is State.SUCCEEDED and failed:
        return f"{failed} of {total} items failed ({by_category}), within the {allowed} allowed."
    if state is State.SUCCEEDED:
        return f"All {total} items succeeded."
    abandoned = summary.counts[State.ABANDONED]
    parts = []
    if failed:
        parts.append(f"{failed} of {total} items failed")
    if abandoned:
        parts.append(f"{abandoned} of {total} items were abandoned")
    return f"{' and '.join(parts)} ({by_category})."


def status_document(
    batch: Batch,
    summary: GroupSummary,
    *,
    poll_margin_seconds: float,
    deliveries: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The status document; `poll_margin_seconds` is lease + one reaper interval.

    The render request's public fields (`RenderSpec.to_record`) appear at the top level;
    `deliveries` are the batch's callback deliveries (`delivery_document`), oldest first.
    """
    allowed = failures_allowed(batch.allow_failures, summary.total)
    state = batch_state(summary, allowed)
    return {
        "id": batch.id,
        "state": state.value,
        "cancel_requested": summary.cancel_requested,
        "paused": summary.paused,
        "priority": summary.priority,
        **batch.spec.to_record(),
        "total": summary.total,
        "counts": {s.value: summary.counts[s] for s in State},
        "failures": dict(sorted(summary.failures.items())),
        "created_at": iso(summary.created_at),
        "updated_at": iso(summary.updated_at),
        "deadline_at": iso(summary.deadline_at),
        "oldest_updated_at": iso(summary.oldest_updated_at),
        "terminal_reason": terminal_reason(state, summary, allowed),
        "poll_until": iso(summary.deadline_at + timedelta(seconds=poll_margin_seconds)),
        "store": batch.store,
        "label": batch.label,
        "callback_url": batch.callback_url,
        # The deprecated former name, kept for readers of status documents (ADR 0030).
        "notify_url": batch.callback_url,
        "deliveries": [dict(d) for d in deliveries],
        "allow_failures": batch.allow_failures,
        "failures_allowed": allowed,
    }


def delivery_document(item: ItemRow, notification_id: str) -> dict[str, Any]:
    """One callback delivery (docs/design.md §7, callbacks): its lease item's state (`queued`,
    `in_progress`, `retryable`, then `succeeded` = delivered, `failed` or `abandoned`), attempts
    made, why the last one failed (`http_503`, `timeout`, ...), and the callback it sends
    (`notification_id`: the `Idempotency-Key` sent)."""
    return {
        "id": item.id,
        "notification_id": notification_id,
        "state": item.state.value,
        "attempts": item.attempt,
        "reason": item.error_category,
        "updated_at": iso(item.updated_at),
    }


@dataclass(frozen=True)
class Derivative:
    """One stored derivative of an item: a manifest row, and an entry of the item document's
    `derivatives` (the API documents it from this class). `crop_box` is (left, top, right,
    bottom) in source pixels after EXIF orientation."""

    ratio: str
    key: str
    width: int
    height: int
    bytes: int
    sha256: str
    crop_box: tuple[int, int, int, int]
    format: str = "jpeg"
    """The output format (`jpeg`, `webp`, `avif`): one derivative per (ratio, format, size)."""
    fit: str = "crop"
    """The fit used: `crop`, or `pad` (the whole picture, with `padding` around it)."""
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Output pixels of padding (left, top, right, bottom) around the picture."""
    trim_box: tuple[int, int, int, int] | None = None
    """The source box left after trimming near-uniform borders; None: no trim asked."""
    requested_width: int | None = None
    """The width asked for (`widths`); None: the single size of `max_side`. A `width` below it
    means the source held no more: outputs are never upscaled."""


@dataclass(frozen=True)
class DerivativeDocument:
    """A derivative as documents show it: the manifest row with, beside its key, its full
    `location` in the batch's store (`s3://bucket/prefix/key` or `file:///folder/key`; null for
    batches submitted before stores were recorded)."""

    ratio: str
    format: str
    key: str
    location: str | None
    width: int
    height: int
    bytes: int
    sha256: str
    crop_box: tuple[int, int, int, int]
    fit: str
    padding: tuple[int, int, int, int]
    trim_box: tuple[int, int, int, int] | None
    requested_width: int | None
    capped: bool
    """Whether the source held less than `requested_width`: the output is as wide as it could
    be without upscaling."""


def derivative_document(row: Mapping[str, Any], store: str | None = None) -> dict[str, Any]:
    """One manifest row (crop box stored as `l,t,r,b` text) as the item document shows it, in
    the field order of `DerivativeDocument`, with its location in `store` (the batch's store)."""
    location = None if store is None else object_url(store, str(row["key"]))
    requested = int(row.get("requested_width") or 0) or None
    computed = {
        "location": location,
        "crop_box": _box(row["crop_box"]),
        "fit": row.get("fit") or "crop",
        "padding": _box(row.get("padding") or "0,0,0,0"),
        "trim_box": None if row.get("trim_box") is None else _box(row["trim_box"]),
        "requested_width": requested,
        "capped": requested is not None and int(row["width"]) < requested,
    }
    return {
        f.name: computed[f.name] if f.name in computed else row[f.name]
        for f in fields(DerivativeDocument)
    }


def _box(text: object) -> list[int]:
    """A box stored as `l,t,r,b` text, as a list of four whole numbers."""
    return [int(v) for v in str(text).split(",")]


@dataclass(frozen=True)
class Preview:
    """The stored preview of an item's source (docs/design.md §5, previews): a small JPEG of the
    upright, sRGB source, written once by the worker that rendered the item. `width`/`height`
    are the preview's, `source_width`/`source_height` the upright source's, in pixels."""

    key: str
    width: int
    height: int
    bytes: int
    sha256: str
    source_width: int
    source_height: int


@dataclass(frozen=True)
class PreviewDocument:
    """The preview as the item document shows it: the record with its `location` in the
    batch's store beside its key (null for batches submitted before stores were recorded)."""

    key: str
    location: str | None
    width: int
    height: int
    bytes: int
    sha256: str
    source_width: int
    source_height: int


def preview_document(row: Mapping[str, Any], store: str | None = None) -> dict[str, Any]:
    """A preview row as the item document shows it, in the field order of `PreviewDocument`."""
    location = None if store is None else object_url(store, str(row["key"]))
    return {
        f.name: location if f.name == "location" else row[f.name] for f in fields(PreviewDocument)
    }


def item_document(
    item: ItemRow,
    derivatives: Sequence[Mapping[str, Any]],
    store: str | None = None,
    preview: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The item document: its state, its attempt, its manifest and its source's preview.

    `focus_box` is the submitted [left, top, right, bottom], or null (also for items written
    before focus boxes existed, whose payload has no such key). `store` is the batch's store
    URL, which gives each derivative and the preview its `location`. `preview` is the item's
    preview row, or None (not rendered yet, failed, or rendered before previews existed).
    `error_message` says why the last attempt failed (with `error_category`), or null (ADR
    0017).
    """
    return {
        "id": item.id,
        "batch_id": item.group_id,
        "ref": item.payload.get("ref"),
        "source": item.payload.get("source"),
        "focus_box": item.payload.get("focus_box"),
        "state": item.state.value,
        "attempt": item.attempt,
        "error_category": item.error_category,
        "updated_at": iso(item.updated_at),
        "derivatives": [derivative_document(d, store) for d in derivatives],
        "preview": None if preview is None else preview_document(preview, store),
        "error_message": item.error_message,
    }


def event_document(
    event: EventRow, *, batch_id: str | None = None, focus_box: list[int] | None = None
) -> dict[str, Any]:
    """One transition of the timeline: of an item (`kind` "item"), or of one of the batch's
    callback deliveries (`kind` "delivery", `item_id` the delivery's id) when its lease group
    is not the batch's own. `focus_box` is an operator re-crop's box (reason `recrop`), else
    null."""
    batch = event.group_id if batch_id is None else batch_id
    return {
        "id": event.id,
        "item_id": event.item_id,
        "batch_id": batch,
        "attempt": event.attempt,
        "from_state": event.from_state.value if event.from_state else None,
        "to_state": event.to_state.value,
        "at": iso(event.at),
        "worker_id": event.worker_id,
        "lease_token": event.lease_token,
        "reason": event.reason,
        "correlation_id": event.correlation_id,
        "kind": "item" if event.group_id == batch else "delivery",
        "focus_box": focus_box,
        "message": event.message,
    }

"""Why a callback is sent: its body's `cause` and `changed_items` (docs/design.md §7,
callbacks; docs/api.md, completion callbacks).

A batch calls back each time it ends: the first time (`ended`), again after a requeue
(`requeued`), or again after operator re-crops (`recropped`), when `changed_items` names each
item re-cropped since the previous callback, with its ref and focus box, so a receiver fetches
those items' derivatives instead of the whole batch's. A delivery's payload keeps
`RECROP_SEQ_FIELD`, the last re-crop its callback covers: the next callback names those after.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from batchcrop.db import queries
from leases import ItemRow, LeaseManager

ENDED = "ended"
REQUEUED = "requeued"
RECROPPED = "recropped"
CAUSE_FIELD = "cause"
CHANGED_ITEMS_FIELD = "changed_items"
RECROP_SEQ_FIELD = "recrop_seq"
"""In a delivery's payload (never sent): the highest `batchcrop_recrops.seq` its callback
covers."""


def callback_cause(
    conn: Any, leases: LeaseManager, batch_id: str, earlier: Iterable[ItemRow]
) -> tuple[dict[str, Any], int]:
    """(the body's `cause` and `changed_items`, the re-crop seq this callback covers), read in
    the finish hook's transaction `conn`; `earlier`: the lease items of the batch's earlier
    deliveries. Re-crops written before any callback are part of the first one (`ended`)."""
    earlier = list(earlier)
    covered = max((_covered(item.payload) for item in earlier), default=0)
    rows = list(conn.execute(queries.recrops_after(batch_id, covered)).mappings())
    last = max((int(row["seq"]) for row in rows), default=covered)
    if not earlier:
        return {CAUSE_FIELD: ENDED, CHANGED_ITEMS_FIELD: []}, last
    if not rows:
        return {CAUSE_FIELD: REQUEUED, CHANGED_ITEMS_FIELD: []}, last
    boxes: dict[str, list[int]] = {}
    for row in rows:  # oldest first: an item re-cropped twice keeps its latest box
        boxes[str(row["item_id"])] = list(row["focus_box"])
    changed = []
    for item_id, box in boxes.items():
        item = leases.item(item_id, conn=conn)
        ref = None if item is None else item.payload.get("ref")
        changed.append({"id": item_id, "ref": ref, "focus_box": box})
    return {CAUSE_FIELD: RECROPPED, CHANGED_ITEMS_FIELD: changed}, last


def _covered(payload: Mapping[str, Any]) -> int:
    """The re-crop seq a delivery's callback covered; 0 for one written before deliveries
    recorded it (or a redelivery's copy: the latest earlier delivery has it)."""
    value = payload.get(RECROP_SEQ_FIELD)
    return value if isinstance(value, int) else 0

"""Every statement on the application's own tables, one small function each."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnElement

from batchcrop.db.tables import batches, deliveries, derivatives, previews, pruned, recrops
from leases import UNFINISHED, State
from leases.group_queries import paused_group
from leases.schema import counters as lease_counters
from leases.schema import items as lease_items

ITEM_SEARCH_KEYS = ("ref", "source")
"""The item payload fields a batch search matches exactly, each behind its own expression index
(app migration 0009: `batchcrop_items_ref`, `batchcrop_items_source`)."""


class PayloadText(ColumnElement[str]):
    """The text of one top-level field of a lease item's payload, written exactly as the
    expression indexes of migration 0009 are (`payload ->> 'ref'` on PostgreSQL,
    `json_extract(payload, '$.ref')` on SQLite): a database uses such an index only for that
    very expression, and a bound parameter in place of the key would not match it."""

    inherit_cache = True
    type = sa.String()

    def __init__(self, field: str) -> None:
        if field not in ITEM_SEARCH_KEYS:
            raise ValueError(f"no index for the payload field {field!r}")
        # Not `key`: a column element's `key` names it in result rows.
        self.field = field

    def _gen_cache_key(self, anon_map: Any, bindparams: Any) -> tuple[Any, ...]:
        return (PayloadText, self.field)


@compiles(PayloadText)
def _payload_text_sqlite(element: PayloadText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_extract(lease_items.payload, '$.{element.field}')"


@compiles(PayloadText, "postgresql")
def _payload_text_postgresql(element: PayloadText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(lease_items.payload ->> '{element.field}')"


IN_LIST_IDS_MAX = 500
"""The most ids one statement lists (`IN (...)`): callers with more split them, so a statement
stays small however many batches or deliveries there are."""


def chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    """`ids` in slices of at most `IN_LIST_IDS_MAX`, in order."""
    return [ids[start : start + IN_LIST_IDS_MAX] for start in range(0, len(ids), IN_LIST_IDS_MAX)]


def insert_batch(
    *,
    batch_id: str,
    spec: dict[str, Any],
    idempotency_key: str | None,
    request_hash: str,
    store: str | None,
    label: str | None = None,
    notify_url: str | None = None,
    allow_failures: str | None = None,
) -> sa.Insert:
    """Insert one batch row; a duplicate idempotency key fails on its unique index."""
    return batches.insert().values(
        id=batch_id,
        spec=spec,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        store=store,
        label=label,
        notify_url=notify_url,
        allow_failures=allow_failures,
    )


def batch_by_id(batch_id: str) -> sa.Select[Any]:
    """The batch row with this id."""
    return sa.select(batches).where(batches.c.id == batch_id)


def batch_by_idempotency_key(key: str) -> sa.Select[Any]:
    """The batch row created with this idempotency key."""
    return sa.select(batches).where(batches.c.idempotency_key == key)


def batch_ids_with_prefix(prefix: str) -> sa.Select[Any]:
    """Up to two batch ids starting with `prefix` (hex digits and hyphens only: no wildcard)."""
    return (
        sa.select(batches.c.id)
        .where(batches.c.id.like(prefix + "%"))
        .order_by(batches.c.id)
        .limit(2)
    )


def batch_stores(batch_ids: Collection[str]) -> sa.Select[Any]:
    """(id, store) of these batches."""
    return sa.select(batches.c.id, batches.c.store).where(batches.c.id.in_(list(batch_ids)))


def queue_by_store() -> sa.Select[Any]:
    """(store, state, n): the unfinished items of every batch by its store, from the lease
    counters (a group still being created has no batch row yet, and a callback delivery's group
    is no batch: neither is counted); a paused batch's items count 0 (nobody may claim them
    until it resumes, so an autoscaler must not add workers for them; its store stays listed)."""
    unfinished = [s.value for s in State if s in UNFINISHED]
    return (
        sa.select(
            batches.c.store,
            lease_counters.c.state,
            sa.func.sum(
                sa.case((paused_group(lease_counters.c.group_id), 0), else_=lease_counters.c.n)
            ).label("n"),
        )
        .join(batches, batches.c.id == lease_counters.c.group_id)
        .where(lease_counters.c.state.in_(unfinished))
        .group_by(batches.c.store, lease_counters.c.state)
    )


def delivery_counts() -> sa.Select[Any]:
    """(state, n): the items of every callback delivery's lease group by state, from the
    counters."""
    return (
        sa.select(lease_counters.c.state, sa.func.sum(lease_counters.c.n).label("n"))
        .join(deliveries, deliveries.c.id == lease_counters.c.group_id)
        .group_by(lease_counters.c.state)
    )


def batch_page(
    *,
    before_seq: int | None,
    limit: int,
    label: str | None = None,
    search: str | None = None,
    floor_seq: int | None = None,
) -> sa.Select[Any]:
    """Batches newest first, strictly older than `before_seq` and not older than `floor_seq`
    when given, only those labelled `label` and those `search` finds (`batch_search`) when
    given."""
    query = sa.select(batches).order_by(batches.c.seq.desc()).limit(limit)
    if label is not None:
        query = query.where(batches.c.label == label)
    if search is not None:
        query = query.where(batch_search(search))
    if before_seq is not None:
        query = query.where(batches.c.seq < before_seq)
    if floor_seq is not None:
        query = query.where(batches.c.seq >= floor_seq)
    return query


def batch_search(text: str) -> ColumnElement[bool]:
    """A batch whose id starts with `text` (any case), whose label contains it (any case), or
    that has an item whose ref or source is exactly `text`. The item part is read through the
    payload expression indexes; the rest is a filter on the batch rows, so callers bound the
    rows it is applied to (`batch_window_floor`)."""
    ids = sa.select(lease_items.c.group_id).where(
        sa.or_(*(PayloadText(key) == text for key in ITEM_SEARCH_KEYS))
    )
    return sa.or_(
        batches.c.id.startswith(text.lower(), autoescape=True),
        batches.c.label.icontains(text, autoescape=True),
        batches.c.id.in_(ids.scalar_subquery()),
    )


def batch_window_floor(*, before_seq: int | None, window: int) -> sa.Select[Any]:
    """The `seq` of the `window`-th newest batch strictly older than `before_seq` (none when
    fewer are left): a filtered listing reads no batch below it in one request. An index-only
    walk of `window` primary-key entries."""
    query = sa.select(batches.c.seq).order_by(batches.c.seq.desc()).offset(window - 1).limit(1)
    if before_seq is not None:
        query = query.where(batches.c.seq < before_seq)
    return query


def first_item_with_ref(
    group_id: str, ref: str, states: Collection[State] | None
) -> sa.Select[Any]:
    """The `seq` of the group's first item (in submission order, among `states` when given)
    whose ref is exactly `ref`: one probe of the ref index, which goes on with the group and
    `seq`."""
    query = (
        sa.select(lease_items.c.seq)
        .where(lease_items.c.group_id == group_id, PayloadText("ref") == ref)
        .order_by(lease_items.c.seq)
        .limit(1)
    )
    if states is not None:
        query = query.where(lease_items.c.state.in_([s.value for s in State if s in states]))
    return query


def insert_derivatives(
    rows: Sequence[dict[str, Any]],
) -> tuple[sa.Insert, Sequence[dict[str, Any]]]:
    """Manifest rows of one item, written in the transaction that makes it `succeeded`."""
    return derivatives.insert(), rows


def delete_item_derivatives(item_id: str) -> sa.Delete:
    """Delete one item's manifest rows: its success replaces those of an earlier one (after a
    re-crop or a requeue), in the same fenced transaction."""
    return sa.delete(derivatives).where(derivatives.c.item_id == item_id)


def derivatives_of(item_ids: Collection[str]) -> sa.Select[Any]:
    """The manifest rows of these items, in a stable order."""
    return (
        sa.select(derivatives)
        .where(derivatives.c.item_id.in_(list(item_ids)))
        .order_by(derivatives.c.item_id, derivatives.c.ratio)
    )


def delete_item_preview(item_id: str) -> sa.Delete:
    """Delete one item's preview row: its success writes the row anew (after a re-crop or a
    requeue), in the same fenced transaction."""
    return sa.delete(previews).where(previews.c.item_id == item_id)


def insert_preview(row: dict[str, Any]) -> sa.Insert:
    """The preview row of one item, written with its manifest (docs/design.md §5, previews)."""
    return previews.insert().values(**row)


def previews_of(item_ids: Collection[str]) -> sa.Select[Any]:
    """The preview rows of these items (at most one each)."""
    return sa.select(previews).where(previews.c.item_id.in_(list(item_ids)))


def delete_previews(batch_id: str, limit: int) -> sa.Delete:
    """Delete the preview rows of at most `limit` of the batch's items (retention, in small
    transactions)."""
    picked = sa.select(previews.c.item_id).where(previews.c.batch_id == batch_id).limit(limit)
    return sa.delete(previews).where(previews.c.item_id.in_(picked.scalar_subquery()))


def delete_batch(batch_id: str) -> sa.Delete:
    """Delete the batch row (retention: its group is finished and about to be purged)."""
    return sa.delete(batches).where(batches.c.id == batch_id)


def insert_pruned(batch_id: str) -> sa.Insert:
    """Record that `prune` deleted this batch (in the transaction that deletes its row)."""
    return pruned.insert().values(id=batch_id)


def pruned_at(batch_id: str) -> sa.Select[Any]:
    """When `prune` deleted this batch, or no row."""
    return sa.select(pruned.c.pruned_at).where(pruned.c.id == batch_id)


def delete_deliveries(batch_id: str, delivery_ids: Collection[str]) -> sa.Delete:
    """Delete these outbox rows of the batch (retention: their lease groups are purged with
    it), and no other: a delivery written since they were listed stays."""
    return sa.delete(deliveries).where(
        deliveries.c.batch_id == batch_id, deliveries.c.id.in_(list(delivery_ids))
    )


def delete_derivatives(batch_id: str, limit: int) -> sa.Delete:
    """Delete the manifest rows of at most `limit` rows' items of the batch (retention, in
    small transactions: each item has a few rows, one per ratio and format)."""
    picked = sa.select(derivatives.c.item_id).where(derivatives.c.batch_id == batch_id).limit(limit)
    return sa.delete(derivatives).where(derivatives.c.item_id.in_(picked.scalar_subquery()))


def derivatives_of_batch(batch_id: str) -> sa.Select[Any]:
    """Every manifest row of a batch."""
    return sa.select(derivatives).where(derivatives.c.batch_id == batch_id)


def insert_delivery(*, delivery_id: str, batch_id: str, notification_id: str) -> sa.Insert:
    """One outbox row (its lease group is written beside it, in the same transaction)."""
    return deliveries.insert().values(
        id=delivery_id, batch_id=batch_id, notification_id=notification_id
    )


def deliveries_of(batch_id: str) -> sa.Select[Any]:
    """A batch's deliveries, oldest first."""
    return sa.select(deliveries).where(deliveries.c.batch_id == batch_id).order_by(deliveries.c.seq)


def deliveries_among(delivery_ids: Collection[str]) -> sa.Select[Any]:
    """The deliveries among these lease group ids (at most `IN_LIST_IDS_MAX`: see `chunks`)."""
    return sa.select(deliveries.c.id).where(deliveries.c.id.in_(list(delivery_ids)))


def fresh_deliveries_among(delivery_ids: Collection[str]) -> sa.Select[Any]:
    """Which of these deliveries (at most `IN_LIST_IDS_MAX`) were never attempted: their lease
    item is `queued` (a delivery's only item), not `retryable`."""
    return sa.select(lease_items.c.group_id).where(
        lease_items.c.group_id.in_(list(delivery_ids)),
        lease_items.c.state == State.QUEUED.value,
    )


def insert_recrop(
    *, correlation_id: str, batch_id: str, item_id: str, focus_box: Sequence[int]
) -> sa.Insert:
    """One operator re-crop, written beside its `recrop` event (same correlation id)."""
    return recrops.insert().values(
        correlation_id=correlation_id,
        batch_id=batch_id,
        item_id=item_id,
        focus_box=list(focus_box),
    )


def recrop_boxes(correlation_ids: Collection[str]) -> sa.Select[Any]:
    """(correlation_id, focus_box) of the re-crops with these correlation ids."""
    return sa.select(recrops.c.correlation_id, recrops.c.focus_box).where(
        recrops.c.correlation_id.in_(list(correlation_ids))
    )


def recrops_after(batch_id: str, seq: int) -> sa.Select[Any]:
    """(seq, item_id, focus_box) of the batch's re-crops after `seq`, oldest first."""
    return (
        sa.select(recrops.c.seq, recrops.c.item_id, recrops.c.focus_box)
        .where(recrops.c.batch_id == batch_id, recrops.c.seq > seq)
        .order_by(recrops.c.seq)
    )


def delete_recrops(batch_id: str) -> sa.Delete:
    """Delete the batch's re-crop rows (retention, with its manifest)."""
    return sa.delete(recrops).where(recrops.c.batch_id == batch_id)

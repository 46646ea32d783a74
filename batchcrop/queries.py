"""Every statement on the application's own tables, one small function each."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa

from batchcrop.tables import batches, deliveries, derivatives

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


def batch_page(*, before_seq: int | None, limit: int, label: str | None = None) -> sa.Select[Any]:
    """Batches newest first, strictly older than `before_seq` when given, only those labelled
    `label` when given."""
    query = sa.select(batches).order_by(batches.c.seq.desc()).limit(limit)
    if label is not None:
        query = query.where(batches.c.label == label)
    if before_seq is not None:
        query = query.where(batches.c.seq < before_seq)
    return query


def insert_derivatives(
    rows: Sequence[dict[str, Any]],
) -> tuple[sa.Insert, Sequence[dict[str, Any]]]:
    """Manifest rows of one item, written in the transaction that makes it `succeeded`."""
    return derivatives.insert(), rows


def derivatives_of(item_ids: Collection[str]) -> sa.Select[Any]:
    """The manifest rows of these items, in a stable order."""
    return (
        sa.select(derivatives)
        .where(derivatives.c.item_id.in_(list(item_ids)))
        .order_by(derivatives.c.item_id, derivatives.c.ratio)
    )


def delete_batch(batch_id: str) -> sa.Delete:
    """Delete the batch row (retention: its group is finished and about to be purged)."""
    return sa.delete(batches).where(batches.c.id == batch_id)


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

"""Every statement on the application's own tables, one small function each."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa

from batchcrop.tables import batches, derivatives


def insert_batch(
    *,
    batch_id: str,
    spec: dict[str, Any],
    idempotency_key: str | None,
    request_hash: str,
    store: str | None,
) -> sa.Insert:
    """Insert one batch row; a duplicate idempotency key fails on its unique index."""
    return batches.insert().values(
        id=batch_id,
        spec=spec,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        store=store,
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


def batch_page(*, before_seq: int | None, limit: int) -> sa.Select[Any]:
    """Batches newest first, strictly older than `before_seq` when given."""
    query = sa.select(batches).order_by(batches.c.seq.desc()).limit(limit)
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


def derivatives_of_batch(batch_id: str) -> sa.Select[Any]:
    """Every manifest row of a batch."""
    return sa.select(derivatives).where(derivatives.c.batch_id == batch_id)

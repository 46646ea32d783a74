"""Statements about groups, creation, the event log, the counters and reads.

Companion of `leases.queries` (the statements that move items); same conventions: built here,
executed only by `leases.executor`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert, Update

from leases.models import CATEGORISED, UNFINISHED, State
from leases.queries import state_in
from leases.schema import counters, events, groups, items
from leases.sqlfuncs import db_now_ms

# --- groups -------------------------------------------------------------------------------


def group_row(group_id: str, *, lock: bool = False) -> sa.Select[Any]:
    """One group with the database time; `lock` takes its row lock (PostgreSQL) for the txn."""
    stmt = sa.select(groups, db_now_ms().label("now")).where(groups.c.id == group_id)
    return stmt.with_for_update() if lock else stmt


def insert_group() -> Insert:
    """Insert one group (parameters: every column)."""
    return sa.insert(groups)


def request_cancel(group_id: str) -> Update:
    """Set the cancel flag; idempotent. Row count 0 means no such group."""
    return sa.update(groups).where(groups.c.id == group_id).values(cancel_requested=True)


def reopen_group(group_id: str, deadline_ms: int | None) -> Update:
    """Clear the cancel flag and, when given, set the deadline to now + `deadline_ms`."""
    values: dict[str, Any] = {"cancel_requested": False}
    if deadline_ms is not None:
        values["deadline_at"] = db_now_ms() + deadline_ms
    return sa.update(groups).where(groups.c.id == group_id).values(**values)


def counter_totals(group_id: str) -> sa.Select[Any]:
    """A group's counters summed over shards: (state, category, n, updated_at)."""
    return (
        sa.select(
            counters.c.state,
            counters.c.category,
            sa.func.sum(counters.c.n).label("n"),
            sa.func.max(counters.c.updated_at).label("updated_at"),
        )
        .where(counters.c.group_id == group_id)
        .group_by(counters.c.state, counters.c.category)
    )


def oldest_unfinished(group_id: str) -> sa.Select[tuple[int]]:
    """The oldest `updated_at` among the group's unfinished items (one partial-index probe)."""
    return (
        sa.select(items.c.updated_at)
        .where(items.c.group_id == group_id, state_in(UNFINISHED))
        .order_by(items.c.updated_at)
        .limit(1)
    )


def recount(group_id: str) -> sa.Select[Any]:
    """The truth the counters must equal: items grouped by (state, counted category)."""
    category = sa.case(
        (state_in(CATEGORISED), sa.func.coalesce(items.c.error_category, "")), else_=""
    )
    return (
        sa.select(items.c.state, category.label("category"), sa.func.count().label("n"))
        .where(items.c.group_id == group_id)
        .group_by(items.c.state, category)
    )


# --- creation -------------------------------------------------------------------------------


def insert_creation_events(group_id: str, correlation_id: str) -> Insert:
    """Log `None -> queued` for every item of a freshly created group, in one statement."""
    source = sa.select(
        items.c.id,
        items.c.group_id,
        items.c.attempt,
        sa.null(),
        items.c.state,
        items.c.created_at,
        sa.literal(correlation_id),
    ).where(items.c.group_id == group_id)
    columns = ["item_id", "group_id", "attempt", "from_state", "to_state", "at", "correlation_id"]
    return sa.insert(events).from_select(columns, source)


# --- event log and counters -----------------------------------------------------------------


def insert_events() -> Insert:
    """Append events, meant for executemany."""
    return sa.insert(events)


def add_to_counters(dialect_name: str, rows: Sequence[dict[str, Any]]) -> Insert:
    """Add each row's `n` to its counter (group_id, state, category, shard), creating it.

    Concurrency: the caller passes rows sorted by key, so that transactions touching the same
    counters lock them in the same order and cannot deadlock.
    """
    dialect_insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    stmt = dialect_insert(counters).values(list(rows))
    return stmt.on_conflict_do_update(
        index_elements=[
            counters.c.group_id,
            counters.c.state,
            counters.c.category,
            counters.c.shard,
        ],
        set_={"n": counters.c.n + stmt.excluded.n, "updated_at": stmt.excluded.updated_at},
    )


# --- reads ------------------------------------------------------------------------------------


def item_row(item_id: str) -> sa.Select[Any]:
    """One item."""
    return sa.select(items).where(items.c.id == item_id)


def item_rows(
    group_id: str, states: Collection[State] | None, after_seq: int | None, limit: int
) -> sa.Select[Any]:
    """A page of a group's items in `seq` order."""
    stmt = sa.select(items).where(items.c.group_id == group_id)
    if states is not None:
        stmt = stmt.where(state_in(states))
    if after_seq is not None:
        stmt = stmt.where(items.c.seq > after_seq)
    return stmt.order_by(items.c.seq).limit(limit)


def event_rows(
    group_id: str, item_id: str | None, after_id: int | None, limit: int
) -> sa.Select[Any]:
    """A page of a group's (or one item's) events in id order."""
    stmt = sa.select(events)
    if item_id is not None:
        stmt = stmt.where(events.c.item_id == item_id)
    stmt = stmt.where(events.c.group_id == group_id)
    if after_id is not None:
        stmt = stmt.where(events.c.id > after_id)
    return stmt.order_by(events.c.id).limit(limit)

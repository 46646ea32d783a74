"""Statements about groups, creation, the event log, the counters and reads.

Companion of `leases.queries` (the statements that move items); same conventions: built here,
executed only by `leases.executor`; a builder run on every poll is cached like theirs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Delete, Insert, Update

from leases.models import CATEGORISED, UNFINISHED, State
from leases.queries import state_in
from leases.schema import counters, events, groups, items
from leases.sqlfuncs import db_now_ms

# --- groups -------------------------------------------------------------------------------


def group_row(group_id: str, *, lock: bool = False, sealed_only: bool = True) -> sa.Select[Any]:
    """One group with the database time; `lock` takes its row lock (PostgreSQL) for the txn.

    A group still being created (not sealed) is not found unless `sealed_only` is False.
    """
    stmt = sa.select(groups, db_now_ms().label("now")).where(groups.c.id == group_id)
    if sealed_only:
        stmt = stmt.where(groups.c.sealed)
    return stmt.with_for_update() if lock else stmt


def notify_finish_of(group_id: str) -> sa.Select[tuple[bool]]:
    """The group's `notify_finish` flag (no row: the group does not exist)."""
    return sa.select(groups.c.notify_finish).where(groups.c.id == group_id)


def insert_group() -> Insert:
    """Insert one group (parameters: every column)."""
    return sa.insert(groups)


def request_cancel(group_id: str) -> Update:
    """Set the cancel flag of a group with an item left to end; idempotent. Row count 0: no such
    group, or every item of it had ended before (`sealed_exists` tells which): a flag set then
    would only stand in the way of a requeue."""
    unfinished = sa.exists().where(items.c.group_id == groups.c.id, state_in(UNFINISHED))
    return (
        sa.update(groups)
        .where(groups.c.id == group_id, groups.c.sealed, groups.c.cancel_requested | unfinished)
        .values(cancel_requested=True)
    )


def sealed_exists(group_id: str) -> sa.Select[tuple[bool]]:
    """Whether `group_id` names a (sealed) group."""
    return sa.select(sa.exists().where(groups.c.id == group_id, groups.c.sealed))


def seal(group_id: str, deadline_ms: int) -> Update:
    """Seal a group being created: it exists from now on, its deadline counted from now.

    Row count 0: the group is gone (discarded as stale) or already sealed.
    """
    return (
        sa.update(groups)
        .where(groups.c.id == group_id, sa.not_(groups.c.sealed))
        .values(sealed=True, deadline_at=db_now_ms() + deadline_ms)
    )


def stale_unsealed(expiry_ms: int) -> sa.Select[tuple[str]]:
    """Unsealed groups whose creation began `expiry_ms` ago or more (a crashed submitter)."""
    return sa.select(groups.c.id).where(
        sa.not_(groups.c.sealed), groups.c.created_at <= db_now_ms() - expiry_ms
    )


def delete_group_rows(table: sa.Table, group_id: str, limit: int | None = None) -> Delete:
    """Delete the group's rows in `table` (items or events), at most `limit` of them."""
    if limit is None:
        return sa.delete(table).where(table.c.group_id == group_id)
    picked = sa.select(table.c.id).where(table.c.group_id == group_id).limit(limit)
    return sa.delete(table).where(table.c.id.in_(picked.scalar_subquery()))


def delete_counters(group_id: str) -> Delete:
    """Delete the group's counter rows (a few per state and shard)."""
    return sa.delete(counters).where(counters.c.group_id == group_id)


def delete_group(group_id: str) -> Delete:
    """Delete the group's own row."""
    return sa.delete(groups).where(groups.c.id == group_id)


def finished_before(before_ms: int, group_id: str | None = None) -> sa.Select[tuple[str]]:
    """Sealed groups every item of which is terminal, whose last transition (their newest
    counter change, or their creation) is older than `before_ms` ago: what a purge may delete
    (with `group_id`: that group, if it is one). One probe of the unfinished-items index per
    group, and its few counter rows."""
    unfinished = sa.exists().where(items.c.group_id == groups.c.id, state_in(UNFINISHED))
    last_change = (
        sa.select(sa.func.max(counters.c.updated_at))
        .where(counters.c.group_id == groups.c.id)
        .scalar_subquery()
    )
    cutoff = db_now_ms() - before_ms
    stmt = sa.select(groups.c.id).where(
        groups.c.sealed,
        sa.not_(unfinished),
        groups.c.created_at <= cutoff,
        sa.func.coalesce(last_change, groups.c.created_at) <= cutoff,
    )
    if group_id is not None:
        stmt = stmt.where(groups.c.id == group_id)
    return stmt.order_by(groups.c.created_at)


def has_unfinished(group_id: str) -> sa.Select[tuple[str]]:
    """One unfinished item of the group, if any (a probe of the unfinished-items index)."""
    return sa.select(items.c.id).where(items.c.group_id == group_id, state_in(UNFINISHED)).limit(1)


def reopen_group(group_id: str, deadline_ms: int | None) -> Update:
    """Clear the cancel flag and, when given, set the deadline to now + `deadline_ms`."""
    values: dict[str, Any] = {"cancel_requested": False}
    if deadline_ms is not None:
        values["deadline_at"] = db_now_ms() + deadline_ms
    return sa.update(groups).where(groups.c.id == group_id).values(**values)


def set_sharing(group_id: str, priority: int | None, paused: bool | None) -> Update:
    """Set the group's priority and/or pause flag (None: left as it is): a compare-and-set
    whose row count is 0 when nothing changes (or no such group)."""
    values: dict[str, Any] = {}
    changes = []
    if priority is not None:
        values["priority"] = priority
        changes.append(groups.c.priority != priority)
    if paused is not None:
        values["paused"] = paused
        changes.append(groups.c.paused != paused)
    if not values:
        raise ValueError("nothing to set")
    return (
        sa.update(groups)
        .where(groups.c.id == group_id, groups.c.sealed, sa.or_(*changes))
        .values(**values)
    )


def set_deadline(group_id: str, deadline_at_ms: int) -> Update:
    """Set the group's deadline to `deadline_at_ms` (epoch milliseconds, database time)."""
    return sa.update(groups).where(groups.c.id == group_id).values(deadline_at=deadline_at_ms)


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


@cache
def versions() -> sa.Select[Any]:
    """Each sealed group among the expanding parameter `p_group_ids` with what its summary is
    made of beside its counters: (id, cancel_requested, deadline_at, priority, paused, version,
    changed_at), the
    version being the sum of its counter rows' versions, which every transition of its items
    raises, and `changed_at` their newest `updated_at` (which moves with the transitions of
    processes older than versions too, unless within the same millisecond). One range of the
    counters' primary key per group. Cached: it runs on every poll."""
    return (
        sa.select(
            groups.c.id,
            groups.c.cancel_requested,
            groups.c.deadline_at,
            groups.c.priority,
            groups.c.paused,
            sa.func.coalesce(sa.func.sum(counters.c.version), 0).label("version"),
            sa.func.max(counters.c.updated_at).label("changed_at"),
        )
        .select_from(groups.outerjoin(counters, counters.c.group_id == groups.c.id))
        .where(groups.c.id.in_(sa.bindparam("p_group_ids", expanding=True)), groups.c.sealed)
        .group_by(
            groups.c.id,
            groups.c.cancel_requested,
            groups.c.deadline_at,
            groups.c.priority,
            groups.c.paused,
        )
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


def insert_items() -> Insert:
    """Insert items, meant for executemany (a PostgreSQL driver without COPY)."""
    return sa.insert(items)


NEW_ITEM_COLUMNS = (
    "id",
    "seq",
    "payload",
    "group_id",
    "state",
    "attempt",
    "attempt_base",
    "next_attempt_at",
    "created_at",
    "updated_at",
)
"""The columns a chunk of new items is written with, in order, by SQLite's JSON insert and
PostgreSQL's COPY lines alike: the item's own values first, then those every item of the chunk
shares. The rest are null."""


@cache
def insert_items_from_json() -> Insert:
    """SQLite: insert one chunk of a new group's items, queued, from one JSON array of
    `[id, payload]` pairs (parameter `p_rows`), `seq` from `p_first_seq` in array order, due and
    dated `p_now`: SQLite's own JSON parser walks the chunk, with no per-row statement or
    parameter binding. Each payload arrives as a JSON string and is parsed on its own (`json()`:
    malformed JSON fails the chunk) and stored as SQLite renders that JSON value."""
    pairs = sa.func.json_each(sa.bindparam("p_rows", type_=sa.String)).table_valued("key", "value")
    now = sa.bindparam("p_now", type_=sa.BigInteger)
    source = sa.select(  # in `NEW_ITEM_COLUMNS` order
        sa.func.json_extract(pairs.c.value, "$[0]"),
        sa.bindparam("p_first_seq", type_=sa.Integer) + pairs.c.key,
        sa.func.json(sa.func.json_extract(pairs.c.value, "$[1]")),
        sa.bindparam("p_group_id", type_=sa.String),
        sa.literal(State.QUEUED.value),
        sa.literal(0),
        sa.literal(0),
        now,
        now,
        now,
    )
    return sa.insert(items).from_select(list(NEW_ITEM_COLUMNS), source)


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
        set_={
            "n": counters.c.n + stmt.excluded.n,
            "updated_at": stmt.excluded.updated_at,
            "version": counters.c.version + 1,
        },
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
    group_ids: Sequence[str], item_id: str | None, after_id: int | None, limit: int
) -> sa.Select[Any]:
    """A page of these groups' (or one item's) events in id order."""
    stmt = sa.select(events)
    if item_id is not None:
        stmt = stmt.where(events.c.item_id == item_id)
    if len(group_ids) == 1:
        stmt = stmt.where(events.c.group_id == group_ids[0])
    else:
        stmt = stmt.where(events.c.group_id.in_(list(group_ids)))
    if after_id is not None:
        stmt = stmt.where(events.c.id > after_id)
    return stmt.order_by(events.c.id).limit(limit)


def _being_created(group_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """Whether `group_id` names a group still being created (not sealed): its items are no work
    yet, and a crashed submitter's stay so until the reaper discards them. Few such groups
    exist at any time, so the probe is one index lookup per candidate row."""
    return sa.exists().where(groups.c.id == group_id, sa.not_(groups.c.sealed))


def paused_group(group_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """Whether `group_id` names a paused group: its items are work nobody may claim until it
    resumes, so the queue an autoscaler reads leaves them out (one probe of the groups' primary
    key per row)."""
    return sa.exists().where(groups.c.id == group_id, groups.c.paused)


def queue_depth() -> sa.Select[Any]:
    """Unfinished items by state over every sealed group not paused, from the counters:
    (state, n)."""
    return (
        sa.select(counters.c.state, sa.func.sum(counters.c.n).label("n"))
        .where(
            state_in_column(counters.c.state, UNFINISHED),
            sa.not_(_being_created(counters.c.group_id)),
            sa.not_(paused_group(counters.c.group_id)),
        )
        .group_by(counters.c.state)
    )


def state_in_column(column: sa.ColumnElement[str], states: Collection[State]) -> Any:
    """`column IN (states)`, in `State` order (one cached statement)."""
    return column.in_([s.value for s in State if s in states])


def head_queued_age_ms() -> sa.Select[Any]:
    """Milliseconds since the next queued item to be claimed (lowest `seq`) became queued: one
    probe of the queued-seq partial index. Items of a group still being created are not left
    out here (unlike `queue_depth`): `seq` restarts in every group, so skipping them could walk
    a crashed submission's whole chunk on every read; the reaper discards those within
    `UNSEALED_EXPIRY_SECONDS`. Nor are a paused group's, which a probe of the groups' primary key
    per row skips: a paused batch's queued items at the head of the line are walked past, which
    costs one probe each (pausing is for the few batches an operator holds)."""
    return (
        sa.select(db_now_ms() - items.c.updated_at)
        .where(items.c.state == State.QUEUED.value, sa.not_(paused_group(items.c.group_id)))
        .order_by(items.c.seq)
        .limit(1)
    )


def item_ids_with_prefix(prefix: str, group_id: str | None) -> sa.Select[tuple[str]]:
    """Up to two item ids starting with `prefix` (which holds no LIKE wildcard: the caller
    allows only hex digits and hyphens)."""
    query = sa.select(items.c.id).where(items.c.id.like(prefix + "%")).order_by(items.c.id).limit(2)
    if group_id is not None:
        query = query.where(items.c.group_id == group_id)
    return query

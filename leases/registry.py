"""Statements of the worker registry (docs/design.md §3, worker registry; ADR 0011).

A worker process writes its row (`lease_workers`) when it starts and refreshes `last_seen_at`
every few seconds, in database time like every lease time; a clean shutdown deletes it. The
reaper releases the leases held by workers not seen for `worker_timeout` (G', reason
`worker_lost`), so a killed worker's items come back within seconds instead of when their
leases (minutes) run out. Holders without a row (a process that never registered) keep the
per-item lease rule alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Delete, Insert, Update

from leases.models import State
from leases.queries import MOVED, _exhausted, backoff_ms, literal_limit, state_is
from leases.schema import items, workers
from leases.sqlfuncs import db_now_ms, in_picked

WORKER_LOST = "worker_lost"
"""The category (and event reason) of an item released because its worker stopped being seen."""
NOT_IN_FLIGHT = "not_in_flight"
"""The event reason of a lease its live worker released because no slot worked on it (G'')."""
RELEASED = "released"
"""The event reason of a lease an operator released (`release_not_in_flight`)."""
IN_FLIGHT_SLACK_MS = 1000
"""A lease counts as not in flight only if claimed at least this long before the refresh that
left it out: a slot registers its claim a moment after the claim commits."""


@cache
def seen(dialect_name: str) -> Insert:
    """Insert or refresh worker `p_worker_id`'s row: seen now, with `p_info`.

    A row the reaper forgot (a worker partitioned for long) is simply written again.
    """
    dialect_insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    now = db_now_ms()
    stmt = dialect_insert(workers).values(
        id=sa.bindparam("p_worker_id", type_=sa.String),
        started_at=now,
        last_seen_at=now,
        info=sa.bindparam("p_info", type_=sa.JSON),
    )
    return stmt.on_conflict_do_update(
        index_elements=[workers.c.id],
        set_={"last_seen_at": stmt.excluded.last_seen_at, "info": stmt.excluded.info},
    )


def mark_absent(worker_ids: Sequence[str], timeout_ms: int) -> Update:
    """Set these workers' `last_seen_at` to just past the timeout ago: absent from now on, but
    listed and named like any absent worker until forgotten (a row refreshed by its worker
    afterwards is simply seen again)."""
    cutoff = db_now_ms() - timeout_ms - 1
    return (
        sa.update(workers)
        .where(workers.c.id.in_(list(worker_ids)), workers.c.last_seen_at > cutoff)
        .values(last_seen_at=cutoff)
    )


def forget(worker_id: str) -> Delete:
    """Delete one worker's row (its clean shutdown)."""
    return sa.delete(workers).where(workers.c.id == worker_id)


def forget_absent(forget_ms: int) -> Delete:
    """Delete the rows of workers not seen for `forget_ms` (long dead; their leases released)."""
    return sa.delete(workers).where(workers.c.last_seen_at <= db_now_ms() - forget_ms)


def _absent(timeout_ms: int) -> sa.Exists:
    """The item's holder has a registry row not refreshed for `timeout_ms` or more."""
    return sa.exists().where(
        workers.c.id == items.c.worker_id,
        workers.c.last_seen_at <= db_now_ms() - timeout_ms,
    )


@cache
def release_absent(limit: int, *, timeout_ms: int, base_ms: int, max_ms: int) -> Update:
    """Leases held by absent workers: to retryable (`worker_lost`, with backoff) or failed at
    the cap, like an expired lease (G). The token stays on the row and in the event, and the
    next claim draws a fresh one, so the worker, if it was only cut off, has its writes refused.

    Rows picked with SKIP LOCKED and re-checked by the UPDATE, so reapers never move an item
    twice; a worker that is seen again in between keeps its items.
    """
    now = db_now_ms()
    picked = (
        sa.select(items.c.id)
        .where(state_is(State.IN_PROGRESS), _absent(timeout_ms))
        .limit(literal_limit(limit))
        .with_for_update(skip_locked=True, of=items)
        .cte("picked")
        .prefix_with("MATERIALIZED")
    )
    exhausted = _exhausted()
    return (
        sa.update(items)
        .where(in_picked(items.c.id, picked), state_is(State.IN_PROGRESS), _absent(timeout_ms))
        .values(
            state=sa.case((exhausted, State.FAILED.value), else_=State.RETRYABLE.value),
            error_category=sa.case((exhausted, "attempts_exhausted"), else_=WORKER_LOST),
            error_message=None,
            next_attempt_at=sa.case(
                (exhausted, items.c.next_attempt_at), else_=now + backoff_ms(base_ms, max_ms)
            ),
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(*MOVED)
    )


def registered() -> sa.Select[Any]:
    """Every registered worker with the database clock's `now`."""
    return sa.select(workers, db_now_ms().label("now")).order_by(workers.c.started_at, workers.c.id)


def holders(group_id: str | None) -> sa.Select[Any]:
    """Per holder (worker id): leases held and the oldest attempt's start, optionally in one
    group. Reads the in-progress items only (a partial index: at most the leases held)."""
    query = (
        sa.select(
            items.c.worker_id,
            sa.func.count().label("held"),
            sa.func.min(items.c.attempt_started_at).label("oldest"),
        )
        .where(state_is(State.IN_PROGRESS))
        .group_by(items.c.worker_id)
    )
    if group_id is not None:
        query = query.where(items.c.group_id == group_id)
    return query


def now() -> sa.Select[tuple[int]]:
    """The database clock."""
    return sa.select(db_now_ms())


IN_FLIGHT_KEY = "in_flight"
"""The key of a registry row's `info` under which a worker lists the items its slots are working
on now (sorted ids), written with every refresh; absent for a worker that does not say."""


def held(*, group_id: str | None = None, worker_id: str | None = None) -> sa.Select[Any]:
    """The in-progress items (optionally of one group or one holder): id, group, holder, lease
    token and the attempt's start. Reads the in-progress items only (a partial index)."""
    query = sa.select(
        items.c.id,
        items.c.group_id,
        items.c.worker_id,
        items.c.lease_token,
        items.c.attempt_started_at,
    ).where(state_is(State.IN_PROGRESS))
    if group_id is not None:
        query = query.where(items.c.group_id == group_id)
    if worker_id is not None:
        query = query.where(items.c.worker_id == worker_id)
    return query.order_by(items.c.id)


def not_in_flight(
    registered: Sequence[Any], held_rows: Iterable[Any], *, timeout_ms: int
) -> list[Any]:
    """Of `held_rows` (rows of `held`), those whose holder is a live registered worker (rows of
    `registered`) whose last refresh listed its in-flight items without them, although they were
    claimed `IN_FLIGHT_SLACK_MS` or more before it: no slot of a live worker works on them."""
    listed: dict[str, tuple[int, frozenset[str]]] = {}
    for row in registered:
        in_flight = row.info.get(IN_FLIGHT_KEY)
        if isinstance(in_flight, list) and row.last_seen_at > row.now - timeout_ms:
            listed[row.id] = (row.last_seen_at, frozenset(str(i) for i in in_flight))
    orphans = []
    for row in held_rows:
        seen = listed.get(row.worker_id)
        if seen is None or row.id in seen[1]:
            continue
        if row.attempt_started_at <= seen[0] - IN_FLIGHT_SLACK_MS:
            orphans.append(row)
    return orphans

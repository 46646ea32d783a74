"""Turning moved rows into event-log rows and counter deltas, written in the mover's transaction.

Counters are keyed (group, state, category, shard): the category is kept only for `failed` and
`abandoned` (what a status reports as failures) and is '' otherwise; the shard is a stable hash
of the item's seq, so an item is counted in, and later taken out of, the same row (docs/adr/0001).
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from leases import group_queries
from leases.executor import Executor
from leases.models import CATEGORISED, State
from leases.pgqueries import LogSpec

CORRELATION_ID_BYTES = 6


def new_correlation_id() -> str:
    """A short random id for one operator action or reaper pass."""
    return secrets.token_hex(CORRELATION_ID_BYTES)


def shard_of(seq: int, shards: int) -> int:
    """The counter shard of an item: its position modulo the shard count.

    Neighbouring items (claimed together) land on different shards; PostgreSQL computes the
    same rule in SQL (`leases.pgqueries`).
    """
    return seq % shards


def shard_counts(first_seq: int, n: int, shards: int) -> dict[int, int]:
    """How many of the `n` items from `first_seq` on fall in each shard (`shard_of`), by
    arithmetic rather than one item at a time; shards with none are left out."""
    counts = {}
    for shard in range(shards):
        # Items first_seq <= seq < first_seq + n with seq % shards == shard.
        count = (first_seq + n - 1 - shard) // shards - (first_seq - 1 - shard) // shards
        if count:
            counts[shard] = count
    return counts


def counted_category(state: State, category: str | None) -> str:
    """The category an item in `state` is counted under."""
    return (category or "") if state in CATEGORISED else ""


@dataclass(frozen=True)
class Source:
    """Where the moved rows came from, and how their events are attributed.

    `state` None: each row carries its own `from_state` (a claim of queued and retryable items).
    `correlation_id` None: use each row's attempt correlation id (worker acts); otherwise the
    reaper's or operator's own. `attempt_fields` False: the item had no live attempt, so the
    event carries no worker id or lease token. `attempt_offset` corrects the logged attempt
    (give-back logs the attempt it took back). `reason` None: the row's new error category.
    `message` None: the row's new error message (a success's note is the event's alone).
    """

    state: State | None
    category: str | None = None
    correlation_id: str | None = None
    attempt_fields: bool = True
    attempt_offset: int = 0
    reason: str | None = None
    # False: the move never ends in a terminal state (give-back), so it never finishes a group.
    to_terminal: bool = True
    message: str | None = None


Moves = Sequence[tuple[Sequence[sa.Row[Any]], Source]]


def record(db: Executor, conn: sa.Connection, moves: Moves, shards: int) -> None:
    """Append one event per moved row and apply the counter deltas, in `conn`'s transaction.

    All moves of one transaction must be recorded in one call: the counter rows are then
    locked once, in key order, which is what keeps concurrent transactions deadlock-free.
    """
    events = [_event(row, source) for rows, source in moves for row in rows]
    if not events:
        return
    db.execute_many(conn, group_queries.insert_events(), events)
    deltas: Counter[tuple[str, str, str, int]] = Counter()
    at = 0
    for rows, source in moves:
        for row in rows:
            from_state = _from_state(row, source)
            from_category = counted_category(from_state, source.category)
            shard = shard_of(row.seq, shards)
            deltas[(row.group_id, from_state.value, from_category, shard)] -= 1
            to_state = State(row.state)
            to_category = counted_category(to_state, row.error_category)
            deltas[(row.group_id, to_state.value, to_category, shard)] += 1
            at = max(at, row.updated_at)
    add(db, conn, deltas.items(), at)


def add(
    db: Executor,
    conn: sa.Connection,
    deltas: Iterable[tuple[tuple[str, str, str, int], int]],
    at: int,
) -> None:
    """Add `deltas` to the counters, in key order (a fixed lock order: no deadlocks)."""
    rows = [
        {"group_id": g, "state": s, "category": c, "shard": shard, "n": n, "updated_at": at}
        for (g, s, c, shard), n in sorted(deltas)
        if n != 0
    ]
    if rows:
        db.execute(conn, group_queries.add_to_counters(db.dialect_name, rows))


def _event(row: sa.Row[Any], source: Source) -> dict[str, Any]:
    return {
        "item_id": row.id,
        "group_id": row.group_id,
        "attempt": row.attempt + source.attempt_offset,
        "from_state": _from_state(row, source).value,
        "to_state": row.state,
        "at": row.updated_at,
        "worker_id": row.worker_id if source.attempt_fields else None,
        "lease_token": row.lease_token if source.attempt_fields else None,
        "reason": source.reason if source.reason is not None else row.error_category,
        "correlation_id": source.correlation_id or row.correlation_id,
        "message": source.message if source.message is not None else row.error_message,
    }


def _from_state(row: sa.Row[Any], source: Source) -> State:
    return State(row.from_state) if source.state is None else source.state


def log_spec(source: Source, shards: int) -> LogSpec:
    """The same logging rules, for the single-statement PostgreSQL path."""
    from_category = "" if source.state is None else counted_category(source.state, source.category)
    return LogSpec(
        from_state=source.state,
        from_category=from_category,
        own_correlation_id=source.correlation_id is not None,
        own_message=source.message is not None,
        attempt_fields=source.attempt_fields,
        attempt_offset=source.attempt_offset,
        reason=source.reason,
        shards=shards,
    )

"""PostgreSQL-only statements: each transition, its events and its counters in ONE statement.

PostgreSQL runs data-modifying CTEs, so a move (`UPDATE ... RETURNING`), the event rows and the
counter deltas become one statement and one round trip, atomic even in autocommit. SQLite runs
the same moves from `leases.queries` and `leases.transitions` writes the log beside them; both
paths produce identical rows (same shard rule: `seq % shards`), which the tests compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from leases.group_queries import NEW_ITEM_COLUMNS
from leases.models import CATEGORISED, State
from leases.queries import (
    MOVED,
    aged_priority,
    claimable_group,
    claimed_values,
    effective_priority,
    inline,
    literal_limit,
    state_in,
    state_is,
)
from leases.schema import counters, events, groups, items
from leases.sqlfuncs import db_now_ms


@dataclass(frozen=True)
class LogSpec:
    """How to log a move; see `leases.transitions.Source` (whose fields these are)."""

    from_state: State | None
    from_category: str
    own_correlation_id: bool
    own_message: bool
    attempt_fields: bool
    attempt_offset: int
    reason: str | None
    shards: int


@cache
def logged(move: Update, spec: LogSpec) -> sa.Select[tuple[object, ...]]:
    """Wrap `move` (returning MOVED, plus `from_state` when `spec.from_state` is None) so the
    same statement appends its events and applies its counter deltas; selects the moved rows.
    With `own_correlation_id`, the events take parameter `log_correlation_id`; with
    `own_message`, parameter `log_message`.

    Concurrency: the counter upsert takes its rows in key order, and it is the transaction's
    only counter write, so concurrent transitions cannot deadlock on counters.
    """
    moved = move.cte("moved")
    from_state: ColumnElement[str] = (
        moved.c.from_state if spec.from_state is None else inline(spec.from_state.value)
    )
    null = sa.null()
    log = (
        sa.insert(events)
        .from_select(
            [
                "item_id",
                "group_id",
                "attempt",
                "from_state",
                "to_state",
                "at",
                "worker_id",
                "lease_token",
                "reason",
                "correlation_id",
                "message",
            ],
            sa.select(
                moved.c.id,
                moved.c.group_id,
                moved.c.attempt + inline(spec.attempt_offset)
                if spec.attempt_offset
                else moved.c.attempt,
                from_state,
                moved.c.state,
                moved.c.updated_at,
                moved.c.worker_id if spec.attempt_fields else null,
                moved.c.lease_token if spec.attempt_fields else null,
                inline(spec.reason) if spec.reason is not None else moved.c.error_category,
                sa.bindparam("log_correlation_id", type_=sa.String)
                if spec.own_correlation_id
                else moved.c.correlation_id,
                sa.bindparam("log_message", type_=sa.String)
                if spec.own_message
                else moved.c.error_message,
            ),
        )
        .cte("logged")
    )
    shard = moved.c.seq % inline(spec.shards)
    to_category = sa.case(
        (
            state_in(CATEGORISED, moved.c.state),
            sa.func.coalesce(moved.c.error_category, inline("")),
        ),
        else_=inline(""),
    )
    out_of = sa.select(
        moved.c.group_id.label("group_id"),
        from_state.label("state"),
        inline(spec.from_category).label("category"),
        shard.label("shard"),
        inline(-1).label("n"),
        moved.c.updated_at.label("at"),
    )
    into = sa.select(
        moved.c.group_id, moved.c.state, to_category, shard, inline(1), moved.c.updated_at
    )
    d = sa.union_all(out_of, into).subquery("d")
    key = (d.c.group_id, d.c.state, d.c.category, d.c.shard)
    deltas = (
        sa.select(*key, sa.func.sum(d.c.n).label("n"), sa.func.max(d.c.at).label("updated_at"))
        .group_by(*key)
        .having(sa.func.sum(d.c.n) != inline(0))
        .order_by(*key)
    )
    upsert = postgresql.insert(counters).from_select(
        ["group_id", "state", "category", "shard", "n", "updated_at"], deltas
    )
    counted = upsert.on_conflict_do_update(
        index_elements=[
            counters.c.group_id,
            counters.c.state,
            counters.c.category,
            counters.c.shard,
        ],
        set_={
            "n": counters.c.n + upsert.excluded.n,
            "updated_at": sa.func.greatest(counters.c.updated_at, upsert.excluded.updated_at),
            "version": counters.c.version + inline(1),
        },
    ).cte("counted")
    return sa.select(moved).add_cte(log, counted)


@cache
def claim(*, limit: int, lease_ms: int, filtered: bool, aging_ms: int) -> Update:
    """Claim up to `limit` items: due retryable ones first (by due time), then queued ones by
    the effective priority of their group (`leases.queries.effective_priority`), then `seq`.

    The claimable groups are read once (CTE `g`, which also computes their aged priority).
    Queued candidates come from each group's own (group_id, state, seq) index, at most `limit`
    per group (a LATERAL subquery), picked with FOR UPDATE SKIP LOCKED: concurrent claimers
    pass over each other's rows to the next of the same group, never pick the same row, and
    never walk the whole queue. Both candidate lists are in one MATERIALIZED CTE; the LIMIT
    over their UNION ALL stops before the queued ones once enough due retryable rows were
    found. `p_lane` (or NULL) is recorded on each claimed item. Returns MOVED +
    lease_expires_at + payload + from_state.
    """
    now = db_now_ms()
    # Aliases kept short: the claim's text should stay within psycopg's parse cache.
    g = (
        sa.select(groups.c.id, groups.c.priority, aged_priority(aging_ms).label("aged"))
        .where(*claimable_group(filtered=filtered))
        .cte("g")
    )
    due = (
        sa.select(items.c.id, items.c.state)
        .join(g, g.c.id == items.c.group_id)
        .where(state_is(State.RETRYABLE), items.c.next_attempt_at <= now)
        .order_by(items.c.next_attempt_at)
        .limit(literal_limit(limit))
        .with_for_update(skip_locked=True, of=items)
        .subquery("due")
    )
    head = (
        sa.select(items.c.id, items.c.seq)
        .where(
            items.c.group_id == g.c.id,
            state_is(State.QUEUED),
            items.c.next_attempt_at <= now,
        )
        .order_by(items.c.seq)
        .limit(literal_limit(limit))
        .with_for_update(skip_locked=True)
        .lateral("h")
    )
    top = sa.func.max(g.c.priority).over().label("top")
    c = (
        sa.select(head.c.id, head.c.seq, g.c.aged, top)
        .select_from(g.join(head, sa.true()))
        .subquery("c")
    )
    fresh = (
        sa.select(c.c.id, inline(State.QUEUED.value).label("state"))
        .order_by(effective_priority(c.c.aged, c.c.top).desc(), c.c.seq)
        .limit(literal_limit(limit))
        .subquery("fresh")
    )
    picked = (
        sa.union_all(sa.select(due.c.id, due.c.state), sa.select(fresh.c.id, fresh.c.state))
        .limit(literal_limit(limit))
        .cte("picked")
        .prefix_with("MATERIALIZED")
    )
    return (
        sa.update(items)
        .where(items.c.id == picked.c.id, state_in({State.QUEUED, State.RETRYABLE}))
        .values(claimed_values(now, lease_ms))
        .returning(
            *MOVED, items.c.lease_expires_at, items.c.payload, picked.c.state.label("from_state")
        )
    )


@cache
def lock_lane() -> sa.Select[tuple[object]]:
    """Take the transaction-level advisory lock `p_key` (a lane's, `leases.sharing`): claimers
    of one lane count its in-progress items and claim one after another, each after the last
    one's commit (READ COMMITTED: the count, a later statement, sees it)."""
    return sa.select(sa.func.pg_advisory_xact_lock(sa.bindparam("p_key", type_=sa.BigInteger)))


def copy_new_items() -> str:
    """Bulk-load new items: COPY in text format into `NEW_ITEM_COLUMNS` of `lease_items` (one
    line per item, formatted by `leases.creation`)."""
    return f"COPY {items.name} ({', '.join(NEW_ITEM_COLUMNS)}) FROM STDIN"


WORK_CHANNEL = "leases_work"
"""The channel `LISTEN`ed to for wake-ups (docs/design.md §3, wake-ups): a notification's
payload is the milliseconds until the work it announces is due (`0`: now)."""


def listen_work() -> str:
    """`LISTEN` on `WORK_CHANNEL`, run by `leases.wakeups.Wakeups` on its own connection."""
    return f"LISTEN {WORK_CHANNEL}"


@cache
def notify_work_now() -> sa.Select[tuple[object]]:
    """Announce claimable work (a sealed group, a requeue, a redo, a give-back). Delivered when
    the transaction commits (at once in autocommit); a rolled-back one announces nothing."""
    return sa.select(sa.func.pg_notify(inline(WORK_CHANNEL), inline("0")))


@cache
def notify_work_due() -> sa.Select[tuple[object]]:
    """Announce retryable work: the payload is the wait until the earliest retryable item not
    yet due is due (one probe of the retryable due-time index), `0` when there is none."""
    return sa.select(sa.func.pg_notify(inline(WORK_CHANNEL), sa.cast(_due_wait_ms(), sa.Text)))


def work_due_wait() -> sa.Select[tuple[int]]:
    """What `notify_work_due` would announce now (ms; 0: no retryable item not yet due), for a
    listener that has just (re)connected and missed the announcements meanwhile."""
    return sa.select(_due_wait_ms())


def _due_wait_ms() -> sa.ColumnElement[int]:
    now = db_now_ms()
    earliest = (
        sa.select(sa.func.min(items.c.next_attempt_at))
        .where(state_is(State.RETRYABLE), items.c.next_attempt_at >= now)
        .scalar_subquery()
    )
    return sa.func.coalesce(earliest - now, 0)

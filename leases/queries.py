"""Every statement the lease engine runs, one small builder each; `leases.executor` executes them.

Builders of the statements run per item are cached (`functools.cache`: building a statement
costs more than running it); they take only structural arguments and name their runtime values
as bound parameters (`p_item_id`, `p_lease_token`, `p_category`, `p_message`, `p_worker_id`,
`p_group_id`: the `p_` keeps them apart from the column names SQLAlchemy reserves).

Conventions: times are epoch milliseconds from `db_now_ms()` (the database clock); state values
are rendered as SQL literals (not bound parameters) so that SQLite and PostgreSQL can match the
partial indexes declared in the migration. Statements that move items are compare-and-set
UPDATEs whose WHERE clause names the source state, so a row moved concurrently by someone else
simply does not match; each returns the moved rows (`MOVED` columns) for the event log and the
counters, which the caller writes in the same transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from leases.models import UNFINISHED, State, StopReason
from leases.schema import groups, items
from leases.sqlfuncs import db_now_ms, in_picked, random_short_id, random_token, random_unit

# A retry waits between (1 - fraction) and 1 times its exponential backoff ("equal jitter"),
# so that items expired together do not come back together.
RETRY_JITTER_FRACTION = 0.5
# The backoff doubles per attempt up to this many doublings before it is simply capped.
BACKOFF_MAX_DOUBLINGS = 30

MOVED = (
    items.c.id,
    items.c.group_id,
    items.c.seq,
    items.c.attempt,
    items.c.state,
    items.c.error_category,
    items.c.error_message,
    items.c.worker_id,
    items.c.lease_token,
    items.c.correlation_id,
    items.c.updated_at,
)


def state_is(state: State) -> ColumnElement[bool]:
    """`lease_items.state = '<state>'` with the value inlined (partial indexes need literals)."""
    return items.c.state == sa.literal_column(f"'{state.value}'")


def state_in(
    states: Collection[State], column: ColumnElement[str] = items.c.state
) -> ColumnElement[bool]:
    """`lease_items.state IN (...)` (or `column IN`) with literal values, in a stable order.

    Literal, not a list of bound values: SQLAlchemy renders such a list anew on every execution
    (an "expanding" parameter), which costs more than the rest of a small statement's client
    side."""
    ordered = sorted(s.value for s in states)
    return column.in_([sa.literal_column(f"'{value}'") for value in ordered])


def _fenced() -> tuple[ColumnElement[bool], ...]:
    """The fence: parameters `p_item_id` and `p_lease_token`, and the item still in progress."""
    return (
        items.c.id == sa.bindparam("p_item_id", type_=sa.String),
        state_is(State.IN_PROGRESS),
        items.c.lease_token == sa.bindparam("p_lease_token", type_=sa.String),
    )


def _max_attempts_of_item_group() -> sa.ScalarSelect[int]:
    return sa.select(groups.c.max_attempts).where(groups.c.id == items.c.group_id).scalar_subquery()


def _exhausted() -> ColumnElement[bool]:
    """The attempt just ended was the last one of the budget since the last requeue."""
    return (items.c.attempt - items.c.attempt_base) >= _max_attempts_of_item_group()


def backoff_ms(base_ms: int, max_ms: int) -> ColumnElement[int]:
    """Jittered exponential backoff for the attempt that just ended, in milliseconds.

    The table of delays (`base * 2**(n-1)`, capped at `max_ms`) is computed here and inlined as a
    CASE, which both dialects evaluate per row without a power function.
    """
    number = items.c.attempt - items.c.attempt_base
    whens: list[tuple[ColumnElement[bool], int]] = []
    for n in range(1, BACKOFF_MAX_DOUBLINGS + 1):
        delay = min(max_ms, base_ms * 2 ** (n - 1))
        whens.append((number == n, delay))
        if delay >= max_ms:
            break
    delay_expr = sa.case(*whens, else_=max_ms)
    jittered = delay_expr * (1.0 - RETRY_JITTER_FRACTION * random_unit())
    return sa.cast(jittered, sa.BigInteger)


def inline(value: str | int | None) -> ColumnElement[Any]:
    """A constant written into the statement's text rather than bound at every execution.

    For the statements run per item: each bound constant is one more parameter the driver
    adapts on every execution, and it lengthens the text (psycopg caches the parsing of a
    statement only up to 4,096 bytes). Only the engine's own constants go through here.
    """
    if value is None:
        return sa.null()
    if isinstance(value, int):
        return sa.literal_column(str(value), sa.Integer)
    quoted = value.replace("'", "''")
    return sa.literal_column(f"'{quoted}'", sa.String)


def literal_limit(limit: int) -> ColumnElement[int]:
    """A LIMIT value inlined into the SQL text."""
    # Inlined, not bound: PostgreSQL's generic plans (psycopg prepares repeated statements)
    # would otherwise assume an unknown LIMIT takes 10% of the rows and may sort instead of
    # walking the queue index in order.
    return sa.literal_column(str(int(limit)), sa.Integer)


def analyze_items() -> sa.TextClause:
    """Refresh PostgreSQL's statistics of `lease_items` (after a large bulk insert)."""
    return sa.text("ANALYZE lease_items")


def select_now() -> sa.Select[tuple[int]]:
    """The database clock in epoch milliseconds."""
    return sa.select(db_now_ms())


# --- claim and fenced writes ------------------------------------------------------------------


def claimed_values(now: ColumnElement[int], lease_ms: int) -> dict[str, Any]:
    """The columns a claim (A) sets: a new attempt under a fresh token, leased from `now`.

    `p_worker_id` and `p_lane` (None: no lane) are bound at execution; the correlation id is
    drawn per row.
    """
    return {
        "state": inline(State.IN_PROGRESS.value),
        "attempt": items.c.attempt + inline(1),
        "lease_token": random_token(),
        "lease_expires_at": now + inline(lease_ms),
        "attempt_started_at": now,
        "worker_id": sa.bindparam("p_worker_id", type_=sa.String),
        "error_category": sa.null(),
        "error_message": sa.null(),
        "correlation_id": random_short_id(),
        "lane": sa.bindparam("p_lane", type_=sa.String),
        "updated_at": now,
    }


def claimable(
    state: State,
    *,
    limit: int,
    filtered: bool,
    columns: tuple[ColumnElement[Any], ...],
) -> sa.Select[Any]:
    """Up to `limit` items in `state` that may be claimed now, locked and skipping locked rows.

    Claimable: due (`next_attempt_at <= now`), of a sealed group neither cancelled, paused nor
    past its deadline; when `filtered`, only of the groups in the expanding parameter
    `p_group_ids` (a bound list, so one cached statement serves every list). Queued items come
    in `seq` order (which interleaves groups), retryable ones by due time.
    """
    now = db_now_ms()
    order = items.c.seq if state is State.QUEUED else items.c.next_attempt_at
    query = (
        sa.select(*columns)
        .select_from(items.join(groups, groups.c.id == items.c.group_id))
        .where(state_is(state), items.c.next_attempt_at <= now, *claimable_group(filtered=False))
        .order_by(order)
        .limit(literal_limit(limit))
        .with_for_update(skip_locked=True, of=items)
    )
    if filtered:
        query = query.where(items.c.group_id.in_(sa.bindparam("p_group_ids", expanding=True)))
    return query


def claimable_group(*, filtered: bool) -> tuple[ColumnElement[bool], ...]:
    """A group a claim may take from: sealed, neither cancelled, paused nor past its deadline;
    when `filtered`, among the expanding parameter `p_group_ids`."""
    where: tuple[ColumnElement[bool], ...] = (
        groups.c.sealed,
        sa.not_(groups.c.cancel_requested),
        sa.not_(groups.c.paused),
        groups.c.deadline_at > db_now_ms(),
    )
    if filtered:
        where += (groups.c.id.in_(sa.bindparam("p_group_ids", expanding=True)),)
    return where


def aged_priority(aging_ms: int) -> ColumnElement[int]:
    """A group's priority plus one per `aging_ms` since it was created (`lease_groups` row)."""
    return groups.c.priority + (db_now_ms() - groups.c.created_at) // inline(aging_ms)


def effective_priority(aged: ColumnElement[int], top: ColumnElement[int]) -> ColumnElement[int]:
    """The priority a claim ranks a group by: its `aged_priority`, at most `top` (the highest
    priority among the groups with queued work), so that groups of one priority stay level with
    each other and a waiting group is never starved (docs/design.md §3, sharing)."""
    return sa.case((aged < top, aged), else_=top)


def queued_heads(*, limit: int, filtered: bool, aging_ms: int) -> sa.Subquery:
    """SQLite: each claimable group with its first and its `limit`-th queued seq (NULL when it
    holds fewer), its `aged_priority` and the highest priority among them (`top`). Two probes
    of the group's (group_id, state, seq) index per group; groups without queued work are left
    out."""
    now = db_now_ms()

    def nth_seq(offset: int) -> sa.ScalarSelect[int]:
        return (
            sa.select(items.c.seq)
            .where(
                items.c.group_id == groups.c.id,
                state_is(State.QUEUED),
                items.c.next_attempt_at <= now,
            )
            .order_by(items.c.seq)
            .limit(inline(1))
            .offset(inline(offset))
            .scalar_subquery()
        )

    heads = (
        sa.select(
            groups.c.id,
            groups.c.priority,
            aged_priority(aging_ms).label("aged"),
            nth_seq(0).label("first_seq"),
            nth_seq(limit - 1).label("last_seq"),
        )
        .where(*claimable_group(filtered=filtered))
        .subquery("heads")
    )
    return (
        sa.select(heads, sa.func.max(heads.c.priority).over().label("top"))
        .where(heads.c.first_seq.is_not(None))
        .subquery("ranked")
    )


def queued_by_priority(*, limit: int, filtered: bool, aging_ms: int) -> sa.Select[Any]:
    """SQLite: the ids of up to `limit` queued items to claim, by effective priority, then `seq`
    (which interleaves the groups of one rank). Each group offers at most its first `limit`
    queued items, found by a range of its own index: no walk of the whole queue, no sort of
    more than `limit` rows per group. Runs inside BEGIN IMMEDIATE (one writer at a time)."""
    ranked = queued_heads(limit=limit, filtered=filtered, aging_ms=aging_ms)
    rank = effective_priority(ranked.c.aged, ranked.c.top)
    return (
        sa.select(items.c.id)
        .select_from(ranked.join(items, items.c.group_id == ranked.c.id))
        .where(
            state_is(State.QUEUED),
            items.c.next_attempt_at <= db_now_ms(),
            items.c.seq >= ranked.c.first_seq,
            items.c.seq <= sa.func.coalesce(ranked.c.last_seq, items.c.seq),
        )
        .order_by(rank.desc(), items.c.seq)
        .limit(literal_limit(limit))
    )


@cache
def claim(
    from_state: State,
    *,
    limit: int,
    lease_ms: int,
    filtered: bool,
    aging_ms: int,
) -> Update:
    """SQLite: claim up to `limit` items now in `from_state` (queued or due retryable) of
    claimable groups, inside BEGIN IMMEDIATE (one writer at a time).

    Due retryable items are taken by due time; queued ones by the effective priority of their
    group (`effective_priority`), then in `seq` order, which interleaves the groups of one
    rank: each such group's first items come before anyone's later ones. `p_lane` (or NULL) is
    recorded on each claimed item. Returns MOVED + lease_expires_at + payload. PostgreSQL runs
    `leases.pgqueries.claim` instead.
    """
    now = db_now_ms()
    if from_state is State.QUEUED:
        chosen = queued_by_priority(limit=limit, filtered=filtered, aging_ms=aging_ms)
    else:
        chosen = claimable(from_state, limit=limit, filtered=filtered, columns=(items.c.id,))
    picked = chosen.cte("picked").prefix_with("MATERIALIZED")
    return (
        sa.update(items)
        .where(in_picked(items.c.id, picked), state_is(from_state))
        .values(claimed_values(now, lease_ms))
        .returning(*MOVED, items.c.lease_expires_at, items.c.payload)
    )


@cache
def lane_in_progress() -> sa.Select[Any]:
    """How many items are in progress under lane `p_lane`: a range of the partial index of the
    in-progress items' lanes (at most the leases held at once)."""
    return sa.select(sa.func.count()).where(
        state_is(State.IN_PROGRESS), items.c.lane == sa.bindparam("p_lane", type_=sa.String)
    )


def stop_reason(max_attempt_ms: int) -> ColumnElement[str | None]:
    """Why the attempt held in this `lease_items` row must stop now, or NULL: the one definition.

    In precedence order: its group is cancelled, its group is past its deadline, or the attempt
    started `max_attempt_ms` ago or more (`StopReason` values).
    """
    now = db_now_ms()
    group = sa.select(groups).where(groups.c.id == items.c.group_id)
    cancelled = group.with_only_columns(groups.c.cancel_requested).scalar_subquery()
    deadline_at = group.with_only_columns(groups.c.deadline_at).scalar_subquery()
    return sa.case(
        (cancelled, inline(StopReason.CANCELLED.value)),
        (deadline_at <= now, inline(StopReason.DEADLINE_EXCEEDED.value)),
        (
            items.c.attempt_started_at + inline(max_attempt_ms) <= now,
            inline(StopReason.MAX_ATTEMPT_SECONDS.value),
        ),
        else_=sa.null(),
    )


@cache
def heartbeat(*, lease_ms: int, max_attempt_ms: int) -> Update:
    """Fenced: extend the lease to now + `lease_ms` unless the attempt should stop.

    The lease is left as it is when `stop_reason` is set. Returns the (new) expiry and the stop
    reason, or no row when the lease is not held. One statement: the decision and the write see
    the same row and clock reading (the reason reads only columns the update leaves alone).
    """
    now = db_now_ms()
    reason = stop_reason(max_attempt_ms)
    return (
        sa.update(items)
        .where(*_fenced())
        .values(
            lease_expires_at=sa.case(
                (reason.is_(None), now + inline(lease_ms)), else_=items.c.lease_expires_at
            )
        )
        .returning(items.c.lease_expires_at, reason.label("stop_reason"))
    )


@cache
def finish(to_state: State) -> Update:
    """Fenced: end the attempt in `to_state` (succeeded, failed, abandoned) with parameter
    `p_category`; returns MOVED."""
    return (
        sa.update(items)
        .where(*_fenced())
        .values(
            state=inline(to_state.value),
            error_category=sa.bindparam("p_category", type_=sa.String),
            error_message=sa.bindparam("p_message", type_=sa.String),
            lease_expires_at=sa.null(),
            updated_at=db_now_ms(),
        )
        .returning(*MOVED)
    )


@cache
def retry_later(*, base_ms: int, max_ms: int) -> Update:
    """Fenced: to retryable with backoff, or failed `attempts_exhausted` at the attempt cap."""
    now = db_now_ms()
    exhausted = _exhausted()
    return (
        sa.update(items)
        .where(*_fenced())
        .values(
            state=sa.case((exhausted, State.FAILED.value), else_=State.RETRYABLE.value),
            error_category=sa.case(
                (exhausted, "attempts_exhausted"),
                else_=sa.bindparam("p_category", type_=sa.String),
            ),
            # At the cap too: the last attempt's message says why it failed.
            error_message=sa.bindparam("p_message", type_=sa.String),
            next_attempt_at=sa.case(
                (exhausted, items.c.next_attempt_at), else_=now + backoff_ms(base_ms, max_ms)
            ),
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(*MOVED)
    )


@cache
def give_back() -> Update:
    """Fenced: back to queued, due now, taking the claim's attempt number back; `p_message`
    (None for a shutdown's give-back) says who released it and why, on the item and its event."""
    now = db_now_ms()
    return (
        sa.update(items)
        .where(*_fenced())
        .values(
            state=State.QUEUED.value,
            attempt=items.c.attempt - 1,
            error_category=None,
            error_message=sa.bindparam("p_message", type_=sa.String),
            lease_expires_at=None,
            next_attempt_at=now,
            updated_at=now,
        )
        .returning(*MOVED)
    )


@cache
def put_off(*, base_ms: int, max_ms: int) -> Update:
    """Fenced: to retryable with backoff, taking the claim's attempt number back, with
    `p_category` and `p_message`: an attempt a dependency's outage ended does not count against
    the attempt cap (docs/design.md §3, E'). The batch's deadline still bounds the item."""
    now = db_now_ms()
    return (
        sa.update(items)
        .where(*_fenced())
        .values(
            state=State.RETRYABLE.value,
            attempt=items.c.attempt - 1,
            error_category=sa.bindparam("p_category", type_=sa.String),
            error_message=sa.bindparam("p_message", type_=sa.String),
            next_attempt_at=now + backoff_ms(base_ms, max_ms),
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(*MOVED)
    )


@cache
def check_lease(*, max_attempt_ms: int) -> sa.Select[Any]:
    """A row, holding the attempt's `stop_reason`, if and only if the lease is still held."""
    return sa.select(stop_reason(max_attempt_ms).label("stop_reason")).where(*_fenced())


# --- reaper, cancel, requeue ------------------------------------------------------------------


def closed_groups_with_work() -> sa.Select[Any]:
    """Groups cancelled or past their deadline that still hold unfinished items: (id, cancel).

    One probe of the unfinished-items index per closed group, so finished groups cost nothing
    to skip however many there are.
    """
    unfinished = sa.exists().where(items.c.group_id == groups.c.id, state_in(UNFINISHED))
    closed = sa.or_(groups.c.cancel_requested, groups.c.deadline_at <= db_now_ms())
    return sa.select(groups.c.id, groups.c.cancel_requested).where(
        groups.c.sealed, closed, unfinished
    )


def open_groups_with_work() -> sa.Select[tuple[str]]:
    """Sealed groups neither cancelled, paused nor past their deadline that still hold unfinished
    items: the groups a claim may take from. One probe of the unfinished-items index per open
    group."""
    unfinished = sa.exists().where(items.c.group_id == groups.c.id, state_in(UNFINISHED))
    return sa.select(groups.c.id).where(*claimable_group(filtered=False), unfinished)


def _pick(where: Sequence[ColumnElement[bool]], limit: int) -> sa.CTE:
    query = (
        sa.select(items.c.id)
        .where(*where)
        .limit(literal_limit(limit))
        .with_for_update(skip_locked=True, of=items)
    )
    return query.cte("picked").prefix_with("MATERIALIZED")


@cache
def abandon(from_state: State, reason: str, limit: int) -> Update:
    """Move up to `limit` of group `p_group_id`'s items from `from_state` to abandoned.

    For `in_progress` only expired leases are taken (a live holder is stopped by its heartbeat
    instead). Concurrency: rows are picked with SKIP LOCKED and re-checked by the UPDATE's
    state predicate, so reapers running at once never move an item twice; the statement also
    re-checks that the group is still closed for `reason` (cancelled, or past its deadline), so
    a requeue that reopened it in the meantime is never undone.
    """
    now = db_now_ms()
    closed = (
        groups.c.cancel_requested
        if reason == StopReason.CANCELLED.value
        else groups.c.deadline_at <= now
    )
    where: list[ColumnElement[bool]] = [
        state_is(from_state),
        items.c.group_id == sa.bindparam("p_group_id", type_=sa.String),
        sa.exists().where(groups.c.id == items.c.group_id, closed),
    ]
    if from_state is State.IN_PROGRESS:
        where.append(items.c.lease_expires_at <= now)
    picked = _pick(where, limit)
    return (
        sa.update(items)
        .where(in_picked(items.c.id, picked), state_is(from_state))
        .values(
            state=State.ABANDONED.value,
            error_category=reason,
            error_message=None,
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(*MOVED)
    )


@cache
def retry_or_fail_expired(limit: int, *, base_ms: int, max_ms: int) -> Update:
    """Expired leases: to retryable (`lease_expired`, with backoff) or failed at the cap.

    Same concurrency as `abandon`. An expiry counts as an attempt.
    """
    now = db_now_ms()
    picked = _pick([state_is(State.IN_PROGRESS), items.c.lease_expires_at <= now], limit)
    exhausted = _exhausted()
    return (
        sa.update(items)
        .where(
            in_picked(items.c.id, picked),
            state_is(State.IN_PROGRESS),
            items.c.lease_expires_at <= now,
        )
        .values(
            state=sa.case((exhausted, State.FAILED.value), else_=State.RETRYABLE.value),
            error_category=sa.case((exhausted, "attempts_exhausted"), else_="lease_expired"),
            error_message=None,
            next_attempt_at=sa.case(
                (exhausted, items.c.next_attempt_at), else_=now + backoff_ms(base_ms, max_ms)
            ),
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(*MOVED)
    )


def _item_filter(group_id: str, item_ids: Collection[str] | None) -> list[ColumnElement[bool]]:
    where = [items.c.group_id == group_id]
    if item_ids is not None:
        where.append(items.c.id.in_(list(item_ids)))
    return where


def redo(item_id: str, state: State, payload: dict[str, Any]) -> Update:
    """K: move one item from `state` back to queued with a fresh budget and a new payload.

    A compare-and-set on the state: zero rows means the item moved on (another redo or a
    requeue took it first); the caller holds the group's row lock, as requeue does.
    """
    return (
        sa.update(items)
        .where(items.c.id == item_id, state_is(state))
        .values(**_back_to_queued(), payload=payload)
        .returning(*MOVED)
    )


def _back_to_queued() -> dict[str, Any]:
    """The values of an item moved back to queued with a fresh attempt budget (requeue, redo):
    `attempt_base = attempt` gives the budget; the attempt number itself keeps growing."""
    now = db_now_ms()
    return {
        "state": State.QUEUED.value,
        "attempt_base": items.c.attempt,
        "error_category": None,
        "error_message": None,
        "lease_expires_at": None,
        "next_attempt_at": now,
        "updated_at": now,
    }


def requeue_sources(
    group_id: str, states: Collection[State], item_ids: Collection[str] | None
) -> sa.Select[Any]:
    """The distinct (state, error_category) pairs requeue will move."""
    return (
        sa.select(items.c.state, items.c.error_category)
        .where(*_item_filter(group_id, item_ids), state_in(states))
        .distinct()
    )


def requeue(
    group_id: str,
    state: State,
    category: str | None,
    item_ids: Collection[str] | None,
) -> Update:
    """Move the group's items in (`state`, `category`) back to queued with a fresh budget.

    The fresh budget and the cleared error are `_back_to_queued`'s.
    """
    same_category = (
        items.c.error_category.is_(None) if category is None else items.c.error_category == category
    )
    return (
        sa.update(items)
        .where(*_item_filter(group_id, item_ids), state_is(state), same_category)
        .values(**_back_to_queued())
        .returning(*MOVED)
    )

"""Several held leases at once (B, C, D, I for a set): `heartbeat_many` and `finish_many`, on
SQLite and PostgreSQL, with stale tokens mixed in: each lease is fenced by its own token, a
stale one is reported and left alone, and the others go through with their own event rows and
exact counters (docs/design.md §3)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import pytest
import sqlalchemy as sa

from leases import Claim, Ending, LeaseManager, NewItem, State, StopReason
from tests.leases.conftest import (
    ManagerFactory,
    expire_deadline,
    expire_leases,
    make_due,
    new_group,
)

THREADS = 6
RACED_ITEMS = 20


def _lease_row(engine: sa.Engine, item_id: str) -> tuple[str, str, int, str, int]:
    """(state, token, lease expiry, worker, updated_at) of one item, read directly."""
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT state, lease_token, lease_expires_at, worker_id, updated_at "
                "FROM lease_items WHERE id = :id"
            ),
            {"id": item_id},
        ).one()
    return (row[0], row[1], row[2], row[3], row[4])


def _event_rows(engine: sa.Engine, group_id: str) -> int:
    with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM lease_events WHERE group_id = :g")
        return int(conn.execute(query, {"g": group_id}).scalar_one())


def _stale(manager: LeaseManager, engine: sa.Engine, claim: Claim) -> Claim:
    """Make `claim` stale: its lease is reaped and the item claimed again by another worker;
    returns the new holder's claim."""
    expire_leases(engine, [claim.item_id])
    manager.reap()
    make_due(engine)
    (again,) = manager.claim("other", 1, group_ids=[claim.group_id])
    assert (claim.item_id, claim.attempt + 1) == (again.item_id, again.attempt)
    return again


def _transitions(manager: LeaseManager, group_id: str, since: int) -> set[tuple[object, ...]]:
    """Facts of the group's events after the first `since`: (item, attempt, from, to, reason,
    message, worker, token, correlation id)."""
    return {
        (
            e.item_id,
            e.attempt,
            None if e.from_state is None else e.from_state.value,
            e.to_state.value,
            e.reason,
            e.message,
            e.worker_id,
            e.lease_token,
            e.correlation_id,
        )
        for e in manager.events(group_id, limit=1000)[since:]
    }


def _ended(claim: Claim, to: str, reason: str | None, message: str | None) -> tuple[object, ...]:
    """The event a worker's ending of `claim` must write."""
    return (
        claim.item_id,
        claim.attempt,
        "in_progress",
        to,
        reason,
        message,
        "w",
        claim.lease_token,
        claim.correlation_id,
    )


def test_heartbeat_many_renews_every_held_lease_and_reports_the_stale_one(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """One statement renews each lease held under its token (expired but unreaped ones too);
    the stale token's reply is None and the new holder's row is left as it was; no event is
    written and the group's version does not move."""
    group_id, ids = new_group(manager, 3)
    claims = manager.claim("w", 3)
    newer = _stale(manager, engine, claims[1])
    expire_leases(engine, [ids[0], ids[2]])
    before = _lease_row(engine, ids[1])
    events, version = _event_rows(engine, group_id), manager.version([group_id])

    replies = manager.heartbeat_many(claims)

    assert [reply is not None for reply in replies] == [True, False, True]
    for claim, reply in zip(claims, replies, strict=True):
        if reply is not None:
            assert reply.stop_reason is None
            assert reply.lease_expires_at >= claim.lease_expires_at
            assert _lease_row(engine, claim.item_id)[2] > 1
    assert before == _lease_row(engine, ids[1])
    assert ("other", newer.lease_token) == (before[3], before[1])
    assert (events, version) == (_event_rows(engine, group_id), manager.version([group_id]))
    assert manager.reap().total == 0


def test_heartbeat_many_says_why_each_attempt_must_stop(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """Each lease gets its own stop reason, and only a lease without one is extended."""
    cancelled, _ = new_group(manager, 1)
    expired, _ = new_group(manager, 1)
    open_group, _ = new_group(manager, 1)
    claims = [manager.claim("w", 1, group_ids=[g])[0] for g in (cancelled, expired, open_group)]
    manager.cancel(cancelled)
    expire_deadline(engine, expired)

    replies = manager.heartbeat_many(claims)

    reasons = [None if r is None else r.stop_reason for r in replies]
    assert reasons == [StopReason.CANCELLED, StopReason.DEADLINE_EXCEEDED, None]
    for claim, reply in zip(claims[:2], replies[:2], strict=True):
        assert reply is not None
        assert claim.lease_expires_at == reply.lease_expires_at


def test_finish_many_ends_each_attempt_with_its_own_event_and_counts(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """Succeeded, failed (with its message, clipped) and abandoned in one call; the stale claim
    is returned and its item, held by someone else, is not touched; every other ending writes
    its event under its own token and correlation id, and the counters equal a recount."""
    group_id, ids = new_group(manager, 4)
    claims = manager.claim("w", 4)
    newer = _stale(manager, engine, claims[3])
    held_by_other = _lease_row(engine, ids[3])
    since = len(manager.events(group_id, limit=1000))
    endings = [
        Ending(claims[0]),
        Ending(claims[1], State.FAILED, "invalid_image", "x" * 300),
        Ending(claims[2], State.ABANDONED, StopReason.CANCELLED.value),
        Ending(claims[3]),
    ]

    lost = manager.finish_many(endings)

    assert [claims[3]] == lost
    assert held_by_other == _lease_row(engine, ids[3])
    assert newer.lease_token == held_by_other[1]
    expected = {
        _ended(claims[0], "succeeded", None, None),
        _ended(claims[1], "failed", "invalid_image", "x" * 200),
        _ended(claims[2], "abandoned", "cancelled", None),
    }
    assert expected == _transitions(manager, group_id, since)
    states = [manager.item(item_id).state for item_id in ids]  # type: ignore[union-attr]
    assert states == [State.SUCCEEDED, State.FAILED, State.ABANDONED, State.IN_PROGRESS]
    assert manager.recount(group_id) == manager.counted(group_id)
    summary = manager.group(group_id)
    assert summary.failures == {"invalid_image": 1, "cancelled": 1}
    assert (summary.counts[State.SUCCEEDED], summary.counts[State.IN_PROGRESS]) == (1, 1)


def test_finish_many_with_every_token_stale_writes_nothing(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """When no token holds, every claim comes back and no row, event or counter changes."""
    group_id, _ = new_group(manager, 2)
    claims = manager.claim("w", 2)
    expire_leases(engine)
    manager.reap()
    events, counted = _event_rows(engine, group_id), manager.counted(group_id)
    version = manager.version([group_id])

    assert claims == manager.complete_many(claims)

    assert (events, counted) == (_event_rows(engine, group_id), manager.counted(group_id))
    assert version == manager.version([group_id])


def test_finish_many_in_the_callers_transaction_rolls_back_with_it(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """With `conn`, the endings commit or roll back with the caller's own writes."""
    group_id, ids = new_group(manager, 2)
    claims = manager.claim("w", 2)
    events = _event_rows(engine, group_id)

    lost: list[Sequence[Claim]] = []

    def end_then_fail() -> None:
        with manager.transaction() as conn:
            lost.append(manager.complete_many(claims, conn=conn))
            raise RuntimeError("the caller's own write failed")

    with pytest.raises(RuntimeError):
        end_then_fail()

    assert lost == [[]]

    assert {State.IN_PROGRESS} == {manager.item(i).state for i in ids}  # type: ignore[union-attr]
    assert events == _event_rows(engine, group_id)
    with manager.transaction() as conn:
        assert manager.complete_many(claims, conn=conn) == []
    assert manager.group(group_id).counts[State.SUCCEEDED] == 2


def test_finish_many_runs_the_finish_hook_once_per_group_it_finishes(
    make_manager: ManagerFactory,
) -> None:
    """Ending the last items of two watched groups in one call runs the hook once for each,
    and not for a group that still has an unfinished item."""
    finished: list[str] = []
    manager = make_manager()
    manager.on_group_finished = lambda conn, group_id: finished.append(group_id)
    groups = [str(uuid.uuid4()) for _ in range(3)]
    for group_id in groups:
        manager.create_group(
            group_id,
            deadline_seconds=3600,
            max_attempts=3,
            items=[NewItem(str(uuid.uuid4()), {}) for _ in range(2)],
            notify_finish=True,
        )
    claims = manager.claim("w", 6)
    left_alone = next(c for c in claims if c.group_id == groups[2])

    assert manager.complete_many([c for c in claims if c is not left_alone]) == []

    assert sorted(groups[:2]) == sorted(finished)
    assert manager.complete_many([left_alone]) == []
    assert sorted(groups) == sorted(finished)


def test_complete_many_writes_what_complete_writes_one_by_one(
    manager: LeaseManager,
) -> None:
    """The same events (but for ids and times) and the same counters as `complete` per item."""
    one_by_one, _ = new_group(manager, 3)
    together, _ = new_group(manager, 3)
    for claim in manager.claim("w", 3, group_ids=[one_by_one]):
        manager.complete(claim)
    assert manager.complete_many(manager.claim("w", 3, group_ids=[together])) == []

    def shape(group_id: str) -> list[tuple[object, ...]]:
        facts = [
            (e.attempt, e.from_state, e.to_state, e.reason, e.message, e.worker_id)
            for e in manager.events(group_id, limit=1000)
        ]
        return sorted(facts, key=repr)

    assert shape(one_by_one) == shape(together)
    assert manager.counted(one_by_one) == manager.counted(together)
    assert manager.recount(together) == manager.counted(together)


def test_racing_finishers_end_each_item_once(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """Threads finishing the same claims at once: each item ends exactly once, and every
    claim is reported lost by all the others."""
    manager = make_manager()
    group_id, _ = new_group(manager, RACED_ITEMS)
    claims = manager.claim("w", RACED_ITEMS)
    lost: list[Sequence[Claim]] = []
    start = threading.Barrier(THREADS)

    def finish() -> None:
        start.wait()
        lost.append(manager.complete_many(claims))

    threads = [threading.Thread(target=finish) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(lost) == THREADS
    assert sum(len(claims) for claims in lost) == RACED_ITEMS * (THREADS - 1)
    with engine.connect() as conn:
        ended = conn.execute(
            sa.text(
                "SELECT item_id, count(*) FROM lease_events "
                "WHERE group_id = :g AND to_state = 'succeeded' GROUP BY item_id"
            ),
            {"g": group_id},
        ).all()
    assert {c.item_id for c in claims} == {row[0] for row in ended}
    assert {1} == {row[1] for row in ended}
    assert manager.recount(group_id) == manager.counted(group_id)


def test_sets_refuse_what_the_single_calls_refuse(manager: LeaseManager) -> None:
    """An ending must be one `complete`, `fail` or `abandon` could make, each claim ends once,
    and empty sets do nothing."""
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    for state, category, message in (
        (State.QUEUED, None, None),
        (State.RETRYABLE, "storage_unavailable", None),
        (State.FAILED, None, None),
        (State.SUCCEEDED, "invalid_image", None),
        (State.ABANDONED, "cancelled", "why"),
    ):
        with pytest.raises(ValueError, match=r"cannot be ended|category|message"):
            Ending(claim, state, category, message)
    with pytest.raises(ValueError, match="once"):
        manager.finish_many([Ending(claim), Ending(claim, State.FAILED, "invalid_image")])
    assert (manager.heartbeat_many([]), manager.finish_many([])) == ([], [])
    assert manager.complete_many([claim]) == []

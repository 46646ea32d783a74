"""Reaper (G, H), cancel and deadlines: expired leases, the attempt cap, concurrency."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from leases import LeaseManager, ReapResult, State, StopReason, queries
from tests.leases.conftest import (
    ManagerFactory,
    event_count,
    expire_deadline,
    expire_leases,
    make_due,
    new_group,
)

REAPERS = 4


def test_expired_lease_becomes_retryable(make_manager: ManagerFactory, engine: sa.Engine) -> None:
    """An expired lease turns retryable (`lease_expired`) with a backoff in the future."""
    manager: LeaseManager = make_manager(
        retry_backoff_seconds=600.0, retry_backoff_max_seconds=600.0
    )
    group_id, ids = new_group(manager, 2)
    live, dead = manager.claim("w", 2)
    expire_leases(engine, [dead.item_id])
    assert manager.reap() == ReapResult(retried=1, failed=0, abandoned=0)
    item = manager.item(dead.item_id)
    assert item is not None
    assert (item.state, item.error_category, item.attempt) == (State.RETRYABLE, "lease_expired", 1)
    assert manager.claim("w", 1) == []
    manager.check(live)
    assert manager.reap() == ReapResult(retried=0, failed=0, abandoned=0)
    assert sorted(ids) == sorted([live.item_id, dead.item_id])
    assert manager.recount(group_id) == manager.counted(group_id)


def test_cap_turns_expiry_into_failure(manager: LeaseManager, engine: sa.Engine) -> None:
    """An item whose every attempt expires ends failed `attempts_exhausted` after max_attempts."""
    group_id, ids = new_group(manager, 1, max_attempts=2)
    results = []
    for _ in range(2):
        make_due(engine)
        (claim,) = manager.claim("w", 1)
        expire_leases(engine)
        results.append(manager.reap())
    assert results == [ReapResult(1, 0, 0), ReapResult(0, 1, 0)]
    item = manager.item(ids[0])
    assert item is not None
    assert (item.state, item.error_category, item.attempt) == (
        State.FAILED,
        "attempts_exhausted",
        2,
    )
    assert manager.group(group_id).failures == {"attempts_exhausted": 1}
    assert claim.attempt == 2


def test_retry_later_at_cap_fails(manager: LeaseManager) -> None:
    """retry_later on the last attempt gives failed `attempts_exhausted`, not retryable."""
    _, ids = new_group(manager, 1, max_attempts=1)
    (claim,) = manager.claim("w", 1)
    assert manager.retry_later(claim, "source_unavailable") == (State.FAILED)
    item = manager.item(ids[0])
    assert item is not None
    assert item.error_category == "attempts_exhausted"


def test_deadline_abandons_waiting_and_expired(manager: LeaseManager, engine: sa.Engine) -> None:
    """Past the deadline, waiting and expired items end `abandoned` `deadline_exceeded`."""
    group_id, _ = new_group(manager, 4)
    live, expired, retry = manager.claim("w", 3)
    manager.retry_later(retry, "source_unavailable")
    expire_leases(engine, [expired.item_id])
    expire_deadline(engine, group_id)
    assert manager.reap() == ReapResult(retried=0, failed=0, abandoned=3)
    summary = manager.group(group_id)
    assert summary.counts[State.ABANDONED] == 3
    assert summary.counts[State.IN_PROGRESS] == 1
    assert summary.failures == {"deadline_exceeded": 3}
    expire_leases(engine)
    assert manager.reap().abandoned == 1
    assert manager.group(group_id).oldest_updated_at is None
    assert live.item_id not in {i.id for i in manager.items(group_id, states=[State.QUEUED])}


def test_cancel_abandons_waiting_then_reaper_the_rest(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """cancel() abandons queued items at once; the reaper abandons expired ones `cancelled`."""
    group_id, _ = new_group(manager, 5)
    (held,) = manager.claim("w", 1)
    manager.cancel(group_id)
    summary = manager.group(group_id)
    assert summary.cancel_requested
    assert (summary.counts[State.ABANDONED], summary.counts[State.IN_PROGRESS]) == (4, 1)
    assert manager.heartbeat(held).stop_reason is StopReason.CANCELLED
    expire_leases(engine)
    assert manager.reap() == ReapResult(retried=0, failed=0, abandoned=1)
    assert manager.group(group_id).failures == {"cancelled": 5}


def test_concurrent_reapers_move_each_item_once(manager: LeaseManager, engine: sa.Engine) -> None:
    """Four reapers at once over 200 expired leases move each exactly once (counted by events)."""
    group_id, _ = new_group(manager, 200)
    cancelled, _ = new_group(manager, 50)
    manager.claim("w", 250)
    expire_leases(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_groups SET cancel_requested = :t WHERE id = :g"),
            {"t": True, "g": cancelled},
        )
    results: list[ReapResult] = []
    threads = [threading.Thread(target=lambda: results.append(manager.reap())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.retried for r in results) == 200
    assert sum(r.abandoned for r in results) == 50
    assert event_count(engine, "retryable") == 200
    assert event_count(engine, "abandoned") == 50
    assert manager.reap() == ReapResult(0, 0, 0)
    assert manager.recount(group_id) == manager.counted(group_id)
    assert manager.recount(cancelled) == manager.counted(cancelled)


@pytest.mark.parametrize("reason", ["deadline_exceeded", "cancelled"])
def test_the_abandon_statement_rechecks_that_the_group_is_closed(
    manager: LeaseManager, engine: sa.Engine, reason: str
) -> None:
    """The abandon statement itself moves nothing in a group that is not (or no longer) closed
    for its reason, whatever its caller read before; once the group is closed it does."""
    group_id, _ = new_group(manager, 1)
    statement = queries.abandon(State.QUEUED, reason, 10)
    with engine.begin() as conn:
        assert conn.execute(statement, {"p_group_id": group_id}).all() == []
    if reason == "cancelled":
        with engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE lease_groups SET cancel_requested = :t WHERE id = :g"),
                {"t": True, "g": group_id},
            )
    else:
        expire_deadline(engine, group_id)
    with engine.begin() as conn:
        assert len(conn.execute(statement, {"p_group_id": group_id}).all()) == 1

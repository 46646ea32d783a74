"""The worker registry and the release of absent workers' leases (G', `worker_lost`)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from leases import WORKER_LOST, LeaseLost, LeaseManager, ReapResult, State
from tests.leases.conftest import ManagerFactory, duplicate_claims, make_due, new_group

TIMEOUT_SECONDS = 30.0


def age_worker(engine: sa.Engine, worker_id: str, seconds: float) -> None:
    """Pretend `worker_id` was last seen `seconds` earlier than it was."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_workers SET last_seen_at = last_seen_at - :ms WHERE id = :w"),
            {"ms": int(seconds * 1000), "w": worker_id},
        )


def test_registry_lists_alive_workers_and_their_leases(manager: LeaseManager) -> None:
    """A registered worker is listed alive with its info and the leases it holds; forgetting
    it removes the row, and a holder without a row is listed unregistered."""
    group_id, _ = new_group(manager, 3)
    manager.worker_seen("w1", {"host": "h", "pid": 7})
    manager.claim("w1", 2)
    manager.claim("stranger", 1)
    (w1, stranger) = manager.workers()
    assert (w1.id, w1.status, w1.info, w1.leases_held) == (
        "w1",
        "alive",
        {"host": "h", "pid": 7},
        2,
    )
    assert w1.seen_seconds_ago is not None
    assert w1.seen_seconds_ago < 5
    assert w1.oldest_lease_started_at is not None
    assert w1.started_at is not None
    assert (stranger.id, stranger.status, stranger.leases_held) == ("stranger", "unregistered", 1)
    assert stranger.last_seen_at is None
    assert [w.leases_held for w in manager.workers(group_id)] == [2, 1]
    assert [w.leases_held for w in manager.workers("no-such-group")] == [0]
    manager.worker_seen("w1", {"host": "h", "pid": 8})
    assert manager.workers()[0].info == {"host": "h", "pid": 8}
    manager.forget_worker("w1")
    assert [w.status for w in manager.workers()] == ["unregistered", "unregistered"]


def test_absent_worker_leases_are_released_and_fenced(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """Leases of a worker not seen for the timeout become retryable `worker_lost` at once (the
    lease itself is far from expired); the worker, back from a partition, can write nothing."""
    manager: LeaseManager = make_manager(lease_seconds=900.0)
    group_id, _ = new_group(manager, 3)
    manager.worker_seen("dead", {})
    manager.worker_seen("alive", {})
    held = manager.claim("dead", 2)
    (kept,) = manager.claim("alive", 1)
    age_worker(engine, "dead", TIMEOUT_SECONDS + 1)
    assert {w.id: w.status for w in manager.workers()} == {"dead": "absent", "alive": "alive"}
    assert manager.reap() == ReapResult(retried=2, failed=0, abandoned=0, released=2)
    for claim in held:
        item = manager.item(claim.item_id)
        assert item is not None
        assert (item.state, item.error_category, item.attempt) == (State.RETRYABLE, WORKER_LOST, 1)
        with pytest.raises(LeaseLost):
            manager.heartbeat(claim)
        with pytest.raises(LeaseLost):
            manager.complete(claim)
        event = manager.events(group_id, item_id=claim.item_id)[-1]
        assert (event.to_state, event.reason) == (State.RETRYABLE, WORKER_LOST)
        assert (event.worker_id, event.lease_token) == ("dead", claim.lease_token)
    manager.check(kept)
    make_due(engine)
    again = manager.claim("alive", 2)
    assert {c.item_id for c in again} == {c.item_id for c in held}
    assert {c.lease_token for c in again}.isdisjoint({c.lease_token for c in held})
    assert manager.reap().released == 0
    assert manager.recount(group_id) == manager.counted(group_id)


def test_release_counts_the_attempt(make_manager: ManagerFactory, engine: sa.Engine) -> None:
    """A release is an attempt, so an item that kills every worker ends attempts_exhausted."""
    manager: LeaseManager = make_manager()
    _, (item_id,) = new_group(manager, 1, max_attempts=1)
    manager.worker_seen("w", {})
    manager.claim("w", 1)
    age_worker(engine, "w", TIMEOUT_SECONDS + 1)
    assert manager.release_absent() == ReapResult(retried=0, failed=1, abandoned=0, released=1)
    item = manager.item(item_id)
    assert item is not None
    assert (item.state, item.error_category) == (State.FAILED, "attempts_exhausted")


def test_live_and_unregistered_holders_keep_their_leases(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """Only absent registered workers lose leases: seen recently, or never registered (the
    per-item lease alone bounds them), the holder keeps its items."""
    new_group(manager, 2)
    manager.worker_seen("w", {})
    age_worker(engine, "w", TIMEOUT_SECONDS - 5)
    mine = manager.claim("w", 1)[0]
    theirs = manager.claim("unregistered", 1)[0]
    assert manager.reap().total == 0
    manager.check(mine)
    manager.check(theirs)


def test_worker_seen_again_keeps_its_items(manager: LeaseManager, engine: sa.Engine) -> None:
    """A worker that refreshes its row before a reaper pass is alive again."""
    new_group(manager, 1)
    manager.worker_seen("w", {})
    (claim,) = manager.claim("w", 1)
    age_worker(engine, "w", TIMEOUT_SECONDS + 1)
    manager.worker_seen("w", {})
    assert manager.reap().released == 0
    manager.check(claim)


def test_absent_worker_in_a_cancelled_group_is_abandoned(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """In a closed group the same pass releases, then abandons, the absent worker's item."""
    group_id, (item_id,) = new_group(manager, 1)
    manager.worker_seen("w", {})
    manager.claim("w", 1)
    manager.cancel(group_id)
    age_worker(engine, "w", TIMEOUT_SECONDS + 1)
    result = manager.reap()
    assert (result.released, result.abandoned) == (1, 1)
    item = manager.item(item_id)
    assert item is not None
    assert (item.state, item.error_category) == (State.ABANDONED, "cancelled")
    assert manager.recount(group_id) == manager.counted(group_id)


def test_long_absent_rows_are_forgotten(manager: LeaseManager, engine: sa.Engine) -> None:
    """A worker not seen for an hour is deleted from the registry; seen again, it re-registers."""
    manager.worker_seen("gone", {})
    manager.worker_seen("recent", {})
    age_worker(engine, "gone", 3601)
    age_worker(engine, "recent", TIMEOUT_SECONDS + 1)
    manager.reap()
    assert [(w.id, w.status) for w in manager.workers()] == [("recent", "absent")]
    manager.worker_seen("gone", {"back": True})
    assert {w.id: w.status for w in manager.workers()} == {"recent": "absent", "gone": "alive"}


def test_concurrent_releases_move_each_item_once(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """Reapers in many threads at once release each absent holder's item exactly once."""
    manager: LeaseManager = make_manager()
    group_id, _ = new_group(manager, 40)
    manager.worker_seen("dead", {})
    manager.claim("dead", 40)
    age_worker(engine, "dead", TIMEOUT_SECONDS + 1)
    results: list[ReapResult] = []
    threads = [threading.Thread(target=lambda: results.append(manager.reap())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.released for r in results) == 40
    assert duplicate_claims(engine) == []
    assert manager.counted(group_id) == manager.recount(group_id)


def test_timeout_must_be_positive(engine: sa.Engine) -> None:
    """A zero timeout would release every lease at once: refused."""
    with pytest.raises(ValueError, match="worker_timeout_seconds"):
        LeaseManager(engine, worker_timeout_seconds=0)


def test_a_worker_marked_absent_is_released_at_once_and_seen_again_when_it_refreshes(
    make_manager: ManagerFactory,
) -> None:
    """`mark_absent` makes a fresh worker absent now: the next `release_absent` releases its
    leases without waiting for the timeout; others stay alive, and a worker that refreshes
    afterwards is alive again."""
    manager: LeaseManager = make_manager(lease_seconds=900.0)
    new_group(manager, 2)
    manager.worker_seen("ended", {})
    manager.worker_seen("alive", {})
    (held,) = manager.claim("ended", 1)
    manager.claim("alive", 1)
    assert set(manager.registered_workers()) == {"ended", "alive"}
    manager.mark_absent(["ended"])
    manager.mark_absent([])
    assert manager.release_absent().retried == 1
    item = manager.item(held.item_id)
    assert item is not None
    assert (item.state, item.error_category) == (State.RETRYABLE, WORKER_LOST)
    assert [w.status for w in manager.workers() if w.id == "alive"] == ["alive"]
    manager.worker_seen("ended", {})
    assert {w.id: w.status for w in manager.workers() if w.id in ("ended", "alive")} == {
        "ended": "alive",
        "alive": "alive",
    }

"""Sharded counters and summaries: always equal to a GROUP BY over the items."""

from __future__ import annotations

import random
import threading

import pytest
import sqlalchemy as sa

from leases import GroupEnded, GroupSummary, LeaseLost, LeaseManager, State
from tests.leases.conftest import expire_leases, make_due, new_group

WORKERS = 6
ROUNDS = 25


def _work(manager: LeaseManager, worker: str, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(ROUNDS):
        for claim in manager.claim(worker, 2):
            outcome = rng.choice(["complete", "fail", "retry", "give_back", "abandon", "drop"])
            try:
                if outcome == "complete":
                    manager.complete(claim)
                elif outcome == "fail":
                    manager.fail(claim, "invalid_image")
                elif outcome == "retry":
                    manager.retry_later(claim, "storage_unavailable")
                elif outcome == "give_back":
                    manager.give_back(claim)
                elif outcome == "abandon":
                    manager.abandon(claim)
            except LeaseLost:
                pass  # the reaper thread took it: exactly the race under test


def _reap(manager: LeaseManager, engine: sa.Engine, stop: threading.Event) -> None:
    while not stop.is_set():
        expire_leases(engine)
        make_due(engine)
        manager.reap()


def _assert_consistent(manager: LeaseManager, summary: GroupSummary) -> None:
    truth = manager.recount(summary.id)
    assert truth == manager.counted(summary.id)
    assert summary.total == sum(summary.counts.values()) == sum(truth.values())
    for state in State:
        assert summary.counts[state] == sum(n for (s, _), n in truth.items() if s is state)


def test_counters_equal_recount_after_concurrent_activity(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """Workers claiming and ending items while a reaper expires leases keep counters exact."""
    groups = [new_group(manager, n, max_attempts=2)[0] for n in (120, 30)]
    stop = threading.Event()
    reaper = threading.Thread(target=_reap, args=(manager, engine, stop))
    workers = [threading.Thread(target=_work, args=(manager, f"w{i}", i)) for i in range(WORKERS)]
    reaper.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    reaper.join()
    for group_id in groups:
        _assert_consistent(manager, manager.group(group_id))
    counts = manager.group(groups[1]).counts
    if any(counts[state] for state in (State.QUEUED, State.IN_PROGRESS, State.RETRYABLE)):
        manager.cancel(groups[1])
    else:
        with pytest.raises(GroupEnded):  # nothing left to cancel: refused, counters untouched
            manager.cancel(groups[1])
    expire_leases(engine)
    manager.reap()
    summary = manager.group(groups[1])
    _assert_consistent(manager, summary)
    assert summary.counts[State.QUEUED] == summary.counts[State.IN_PROGRESS] == 0


def test_summary_fields(manager: LeaseManager) -> None:
    """A summary reports all six states, failures by category and the time of the last change."""
    group_id, _ = new_group(manager, 4, max_attempts=5)
    created = manager.group(group_id)
    assert created.counts == {
        State.QUEUED: 4,
        State.IN_PROGRESS: 0,
        State.RETRYABLE: 0,
        State.SUCCEEDED: 0,
        State.FAILED: 0,
        State.ABANDONED: 0,
    }
    assert created.updated_at == created.created_at == created.oldest_updated_at
    assert created.max_attempts == 5
    a, b, c = manager.claim("w", 3)
    manager.fail(a, "invalid_image")
    manager.fail(b, "source_not_found")
    manager.abandon(c, "cancelled")
    summary = manager.group(group_id)
    assert summary.failures == {"invalid_image": 1, "source_not_found": 1, "cancelled": 1}
    assert summary.updated_at >= created.updated_at
    assert summary.oldest_updated_at == created.created_at
    assert summary.deadline_at > summary.created_at
    page = manager.items(group_id, limit=2)
    assert [i.seq for i in page] == [0, 1]
    assert [i.seq for i in manager.items(group_id, after_seq=1)] == [2, 3]
    assert [i.state for i in manager.items(group_id, states=[State.QUEUED])] == [State.QUEUED]


def test_reading_sees_committed_rows(manager: LeaseManager) -> None:
    """reading() gives a read-only connection that sees what transaction() committed."""
    group_id, ids = new_group(manager, 3)
    with manager.reading() as conn:
        found = conn.execute(
            sa.text("SELECT count(*) FROM lease_items WHERE group_id = :g"), {"g": group_id}
        ).scalar_one()
    assert found == len(ids)

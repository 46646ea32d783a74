"""The finish hook (docs/design.md §3; ADR 0013): a group created with `notify_finish` has
`on_group_finished(conn, group_id)` run inside the transaction that ends its last unfinished
item, whichever transition that is, exactly once per time the group finishes."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import pytest
import sqlalchemy as sa

from leases import Claim, LeaseManager, NewItem, State
from tests.leases.conftest import ManagerFactory, expire_deadline, expire_leases


class Calls:
    """Records the hook's calls, each with what its own transaction saw of the group."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: list[str] = []
        self.unfinished_seen: list[int] = []
        self.fail = False

    def __call__(self, conn: sa.Connection, group_id: str) -> None:
        unfinished = conn.execute(
            sa.text(
                "SELECT count(*) FROM lease_items WHERE group_id = :g "
                "AND state IN ('queued', 'in_progress', 'retryable')"
            ),
            {"g": group_id},
        ).scalar_one()
        if self.fail:
            raise RuntimeError("hook failed")
        with self.lock:
            self.groups.append(group_id)
            self.unfinished_seen.append(int(unfinished))


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def hooked(make_manager: ManagerFactory, calls: Calls) -> LeaseManager:
    manager = make_manager()
    manager.on_group_finished = calls
    return manager


def watched_group(manager: LeaseManager, n: int, *, watched: bool = True, **kw: float) -> str:
    group_id = str(uuid.uuid4())
    manager.create_group(
        group_id,
        deadline_seconds=kw.get("deadline_seconds", 3600.0),
        max_attempts=int(kw.get("max_attempts", 3)),
        items=[NewItem(str(uuid.uuid4()), {}) for _ in range(n)],
        notify_finish=watched,
    )
    return group_id


def test_the_last_success_runs_the_hook_once_in_its_transaction(
    hooked: LeaseManager, calls: Calls
) -> None:
    group = watched_group(hooked, 3)
    claims = hooked.claim("w", 3)
    for claim in claims[:2]:
        hooked.complete(claim)
    assert calls.groups == []
    with hooked.transaction() as conn:
        hooked.complete(claims[2], conn=conn)
    assert calls.groups == [group]
    assert calls.unfinished_seen == [0]


def test_a_failing_hook_rolls_the_transition_back(hooked: LeaseManager, calls: Calls) -> None:
    watched_group(hooked, 1)
    (claim,) = hooked.claim("w", 1)
    calls.fail = True
    with pytest.raises(RuntimeError):
        hooked.fail(claim, "invalid_image")
    item = hooked.item(claim.item_id)
    assert item is not None
    assert item.state == State.IN_PROGRESS


def test_unwatched_groups_never_run_the_hook(hooked: LeaseManager, calls: Calls) -> None:
    watched_group(hooked, 2, watched=False)
    for claim in hooked.claim("w", 2):
        hooked.complete(claim)
    assert calls.groups == []


def test_every_ending_runs_it_fail_retry_cap_abandon(hooked: LeaseManager, calls: Calls) -> None:
    group = watched_group(hooked, 3, max_attempts=1)
    first, second, third = hooked.claim("w", 3)
    hooked.fail(first, "invalid_image")
    assert hooked.retry_later(second, "storage_unavailable") == State.FAILED
    assert calls.groups == []
    hooked.give_back(third)  # back to queued: not an ending
    (third,) = hooked.claim("w", 1)
    hooked.abandon(third)
    assert calls.groups == [group]


def test_the_reaper_expiry_and_deadline_passes_run_it(
    hooked: LeaseManager, calls: Calls, engine: sa.Engine
) -> None:
    expiring = watched_group(hooked, 1, max_attempts=1)
    hooked.claim("w", 1)
    expire_leases(engine)
    late = watched_group(hooked, 2)
    expire_deadline(engine, late)
    hooked.reap()
    assert sorted(calls.groups) == sorted([expiring, late])


def test_cancel_runs_it_and_a_requeue_makes_it_run_again(
    hooked: LeaseManager, calls: Calls
) -> None:
    group = watched_group(hooked, 2)
    hooked.cancel(group)
    assert calls.groups == [group]
    assert hooked.requeue(group, deadline_seconds=3600) == 2
    for claim in hooked.claim("w", 2):
        hooked.complete(claim)
    assert calls.groups == [group, group]


def test_released_absent_worker_at_the_cap_runs_it(
    make_manager: ManagerFactory, calls: Calls, engine: sa.Engine
) -> None:
    manager = make_manager(worker_timeout_seconds=0.001)
    manager.on_group_finished = calls
    group = watched_group(manager, 1, max_attempts=1)
    manager.worker_seen("gone", {})
    manager.claim("gone", 1)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE lease_workers SET last_seen_at = 1"))
    manager.release_absent()
    assert calls.groups == [group]


def _end_at_once(manager: LeaseManager, claims: Sequence[Claim]) -> None:
    """End every claim succeeded, each in its own thread, released together."""
    barrier = threading.Barrier(len(claims))

    def end(claim: Claim) -> None:
        barrier.wait()
        with manager.transaction() as conn:
            manager.complete(claim, conn=conn)

    threads = [threading.Thread(target=end, args=(claim,)) for claim in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# PostgreSQL only: SQLite has one writer at a time, so no two last items ever commit at once.
@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_two_last_items_ending_at_once_run_it_exactly_once(
    hooked: LeaseManager, calls: Calls
) -> None:
    """Two threads end a group's last two items at the same moment, many times over: the hook
    runs exactly once per group (without the group lock both could miss the end)."""
    rounds = 40
    for _ in range(rounds):
        watched_group(hooked, 2)
        _end_at_once(hooked, hooked.claim("w", 2))
    assert len(calls.groups) == rounds
    assert len(set(calls.groups)) == rounds
    assert set(calls.unfinished_seen) == {0}


def test_add_group_writes_a_sealed_group_in_the_callers_transaction(
    manager: LeaseManager,
) -> None:
    group = str(uuid.uuid4())
    with manager.transaction() as conn:
        manager.add_group(
            conn, group, deadline_seconds=60, max_attempts=5, items=[NewItem("d-1", {"a": 1})]
        )
    summary = manager.group(group)
    assert (summary.total, summary.counts[State.QUEUED], summary.max_attempts) == (1, 1, 5)
    assert manager.events(group) == []  # a creation writes no events (ADR 0023)
    (claim,) = manager.claim("w", 1, group_ids=[group])
    assert claim.payload == {"a": 1}
    assert manager.recount(group) == manager.counted(group)

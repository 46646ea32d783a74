"""Give-back (F) and requeue (J): attempt numbers, budgets and deadlines."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import sqlalchemy as sa

from leases import GroupEnded, LeaseManager, NoSuchGroup, RequeueNeedsDeadline, State
from leases import manager as manager_module
from tests.leases.conftest import (
    ManagerFactory,
    expire_deadline,
    expire_leases,
    make_due,
    new_group,
)


def test_give_back_does_not_count_the_attempt(manager: LeaseManager) -> None:
    """A given-back item is queued with its attempt number taken back, logged `interrupted`."""
    group_id, ids = new_group(manager, 1, max_attempts=1)
    (claim,) = manager.claim("w", 1)
    manager.give_back(claim)
    item = manager.item(ids[0])
    assert item is not None
    assert (item.state, item.attempt, item.error_category) == (State.QUEUED, 0, None)
    last = manager.events(group_id)[-1]
    assert (last.to_state, last.attempt, last.reason) == (State.QUEUED, 1, "interrupted")
    (again,) = manager.claim("w", 1)
    assert again.attempt == 1


def test_give_back_never_fails_even_at_the_cap(manager: LeaseManager) -> None:
    """Giving back the last attempt of the budget returns the item to queued, never failed."""
    group_id, _ = new_group(manager, 1, max_attempts=1)
    for _ in range(3):
        (claim,) = manager.claim("w", 1)
        manager.give_back(claim)
    summary = manager.group(group_id)
    assert summary.counts[State.QUEUED] == 1
    assert summary.counts[State.FAILED] == 0
    (claim,) = manager.claim("w", 1)
    manager.complete(claim)
    assert manager.group(group_id).counts[State.SUCCEEDED] == 1


def test_requeue_gives_fresh_budget_and_keeps_numbering(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """A requeued exhausted item gets max_attempts more attempts numbered after the old ones."""
    group_id, ids = new_group(manager, 2, max_attempts=1)
    first, _ = manager.claim("w", 2)
    manager.fail(first, "invalid_image")
    expire_leases(engine)
    manager.reap()
    assert manager.group(group_id).counts[State.FAILED] == 2
    assert manager.requeue(group_id) == 2
    make_due(engine)
    again = manager.claim("w", 2)
    assert sorted(c.attempt for c in again) == [2, 2]
    expire_leases(engine)
    assert manager.reap().failed == 2
    summary = manager.group(group_id)
    assert summary.failures == {"attempts_exhausted": 2}
    assert manager.requeue(group_id, item_ids=[ids[0]]) == 1
    assert manager.recount(group_id) == manager.counted(group_id)
    only_first = [manager.item(i) for i in ids]
    assert [(i.state, i.attempt) for i in only_first if i is not None] == [
        (State.QUEUED, 2),
        (State.FAILED, 2),
    ]


def test_requeue_selects_states(manager: LeaseManager) -> None:
    """Only the named states move; succeeded items are never requeued."""
    group_id, _ = new_group(manager, 3)
    a, b, c = manager.claim("w", 3)
    manager.fail(a, "invalid_image")
    manager.abandon(b)
    manager.complete(c)
    assert manager.requeue(group_id, states=[State.ABANDONED]) == 1
    counts = manager.group(group_id).counts
    assert (counts[State.QUEUED], counts[State.FAILED], counts[State.SUCCEEDED]) == (1, 1, 1)
    with pytest.raises(ValueError, match="failed and abandoned"):
        manager.requeue(group_id, states=[State.SUCCEEDED])


def test_requeue_of_cancelled_or_expired_needs_deadline(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """A cancelled or expired group is reopened only with a new deadline, which clears cancel."""
    cancelled, _ = new_group(manager, 2)
    manager.cancel(cancelled)
    with pytest.raises(RequeueNeedsDeadline):
        manager.requeue(cancelled)
    assert manager.requeue(cancelled, deadline_seconds=60.0) == 2
    summary = manager.group(cancelled)
    assert not summary.cancel_requested
    assert len(manager.claim("w", 5, group_ids=[cancelled])) == 2

    expired, _ = new_group(manager, 1)
    expire_deadline(engine, expired)
    manager.reap()
    with pytest.raises(RequeueNeedsDeadline):
        manager.requeue(expired)
    assert manager.requeue(expired, deadline_seconds=60.0) == 1
    assert manager.group(expired).deadline_at > manager.group(expired).created_at


def test_a_group_whose_items_have_ended_is_not_cancelled(manager: LeaseManager) -> None:
    """Cancel raises `GroupEnded` once every item has ended and sets no flag, so a requeue needs
    no new deadline; cancelling a cancelled group stays idempotent."""
    group, _ = new_group(manager, 2)
    for claim in manager.claim("w", 2, group_ids=[group]):
        manager.fail(claim, "invalid_image")
    with pytest.raises(GroupEnded):
        manager.cancel(group)
    assert not manager.group(group).cancel_requested
    assert manager.requeue(group) == 2
    manager.cancel(group)
    manager.cancel(group)
    assert manager.group(group).cancel_requested
    with pytest.raises(NoSuchGroup):
        manager.cancel("no-such-group")


def test_unknown_group(manager: LeaseManager) -> None:
    """Operations on an unknown group raise NoSuchGroup; groups() skips it."""
    with pytest.raises(NoSuchGroup):
        manager.group("nope")
    with pytest.raises(NoSuchGroup):
        manager.cancel("nope")
    with pytest.raises(NoSuchGroup):
        manager.requeue("nope")
    group_id, _ = new_group(manager, 1)
    assert [s.id for s in manager.groups(["nope", group_id])] == [group_id]
    assert manager.item("nope") is None


@pytest.mark.parametrize("closer", ["reaper", "cancel"])
def test_a_requeue_between_two_abandon_batches_is_not_undone(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch, closer: str
) -> None:
    """An operator's requeue landing between two batches of a reaper pass (deadline) or of a
    cancel is final: the later batches see the group open again and abandon nothing more."""
    monkeypatch.setattr(manager_module, "MOVE_BATCH_ROWS", 1)
    operator = LeaseManager(engine)
    requeued: list[int] = []

    class RequeueMidway(LeaseManager):
        """Runs the operator's requeue right after its first abandon batch commits."""

        def _abandon_batch(
            self, group_id: str, from_state: State, cid: str
        ) -> Sequence[sa.Row[Any]] | None:
            rows = super()._abandon_batch(group_id, from_state, cid)
            if not requeued:
                requeued.append(operator.requeue(group_id, deadline_seconds=3600.0))
            return rows

    closing = RequeueMidway(engine)
    group_id, ids = new_group(operator, 3)
    if closer == "reaper":
        expire_deadline(engine, group_id)
        closing.reap()
    else:
        closing.cancel(group_id)

    assert requeued == [1]  # the first batch abandoned one item, which the requeue took back
    states = [getattr(operator.item(i), "state", None) for i in ids]
    assert states == [State.QUEUED] * 3
    assert operator.recount(group_id) == operator.counted(group_id)


def test_a_requeue_gives_a_whole_new_budget(manager: LeaseManager, engine: sa.Engine) -> None:
    """After a requeue an item may again fail `max_attempts` times transiently before it is
    exhausted: the budget counts from the requeue, not from the item's first attempt."""
    group_id, ids = new_group(manager, 1, max_attempts=2)
    for expected in (State.RETRYABLE, State.FAILED):
        make_due(engine)
        (claim,) = manager.claim("w", 1)
        assert expected is manager.retry_later(claim, "storage_unavailable")
    assert manager.requeue(group_id) == 1
    (claim,) = manager.claim("w", 1)
    assert claim.attempt == 3
    assert State.RETRYABLE is manager.retry_later(claim, "storage_unavailable")
    make_due(engine)
    (claim,) = manager.claim("w", 1)
    assert State.FAILED is manager.retry_later(claim, "storage_unavailable")
    item = manager.item(ids[0])
    assert item is not None
    assert (item.attempt, item.error_category) == (4, "attempts_exhausted")


def test_a_requeued_item_is_due_at_once_and_counts_as_moved(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """A retryable item waiting out a long backoff, abandoned by a cancel and then requeued, is
    claimable at once; the requeue moves the batch's `updated_at`."""
    manager = make_manager(retry_backoff_seconds=3600.0, retry_backoff_max_seconds=3600.0)
    group_id, _ = new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    manager.retry_later(claim, "storage_unavailable")  # due in an hour
    manager.cancel(group_id)
    before = manager.group(group_id).updated_at
    assert manager.requeue(group_id, deadline_seconds=600.0) == 1
    assert manager.group(group_id).updated_at > before
    assert len(manager.claim("w", 1)) == 1


def test_a_requeue_of_one_state_leaves_the_other_alone(manager: LeaseManager) -> None:
    """Requeuing `abandoned` items moves none of the `failed` ones, even under the same
    category."""
    group_id, ids = new_group(manager, 2)
    first, second = manager.claim("w", 2)
    manager.fail(first, "cancelled")
    manager.abandon(second, "cancelled")
    assert manager.requeue(group_id, states=[State.ABANDONED]) == 1
    states = {i: getattr(manager.item(i), "state", None) for i in ids}
    assert {first.item_id: State.FAILED, second.item_id: State.QUEUED} == states


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_cancel_chosen_as_a_deadlock_victim_is_tried_again(
    engine: sa.Engine, manager: LeaseManager
) -> None:
    """A mover holding a counter row waits for the group's lock (the finish hook's order) while
    a cancel's abandon batch holds that lock and waits for the counter row: PostgreSQL ends the
    cancel's transaction as deadlocked, and the cancel runs the batch again and finishes."""
    group_id, ids = new_group(manager, 2)  # seq 1, the queued one, counts in shard 1
    errors: list[BaseException] = []
    mover = engine.connect()
    try:
        mover.begin()
        mover.execute(
            sa.text(
                "SELECT n FROM lease_counters WHERE group_id = :g AND state = 'queued' "
                "AND shard = 1 FOR UPDATE"
            ),
            {"g": group_id},
        )

        def cancel() -> None:
            try:
                manager.cancel(group_id)
            except BaseException as exc:
                errors.append(exc)

        canceller = threading.Thread(target=cancel)
        canceller.start()
        time.sleep(0.3)  # the cancel now holds the group's lock and waits for the counter
        with contextlib.suppress(sa.exc.DBAPIError):  # the mover may be the victim instead
            mover.execute(
                sa.text("SELECT id FROM lease_groups WHERE id = :g FOR UPDATE"), {"g": group_id}
            )
        mover.rollback()
        canceller.join(30)
    finally:
        mover.close()
    assert errors == []
    assert [getattr(manager.item(i), "state", None) for i in ids] == [State.ABANDONED] * 2
    assert manager.recount(group_id) == manager.counted(group_id)

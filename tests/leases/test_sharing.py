"""Sharing one fleet: claims by priority with aging, pause and resume, lanes capping attempts."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest
import sqlalchemy as sa

from leases import Lane, LeaseManager, NewItem, NoSuchGroup, State
from tests.leases.conftest import ManagerFactory, duplicate_claims, expire_deadline

AGING_SECONDS = 60.0
CLAIMERS = 8


def _group(manager: LeaseManager, n: int, priority: int = 0) -> str:
    group_id = str(uuid.uuid4())
    manager.create_group(
        group_id,
        deadline_seconds=3600.0,
        max_attempts=3,
        items=[NewItem(str(uuid.uuid4()), {"i": i}) for i in range(n)],
        priority=priority,
    )
    return group_id


def _age(engine: sa.Engine, group_id: str, seconds: float) -> None:
    """Pretend the group was created `seconds` earlier."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_groups SET created_at = created_at - :ms WHERE id = :g"),
            {"ms": int(seconds * 1000), "g": group_id},
        )


def _claimed_groups(manager: LeaseManager, n: int) -> list[str]:
    """The groups of `n` claims of one item each, in claim order (a claim of several returns
    its rows in no particular order)."""
    return [claim.group_id for _ in range(n) for claim in manager.claim("w", 1)]


def test_higher_priority_is_claimed_first(make_manager: ManagerFactory) -> None:
    """A younger batch of priority 2 is claimed entirely before an older one of priority 0."""
    manager = make_manager(priority_aging_seconds=AGING_SECONDS)
    low = _group(manager, 5)
    high = _group(manager, 5, priority=2)
    assert Counter({high: 3}) == Counter(c.group_id for c in manager.claim("w", 3))
    assert [high] * 2 + [low] * 5 == _claimed_groups(manager, 7)


def test_equal_priorities_still_interleave(make_manager: ManagerFactory) -> None:
    """Groups of one priority share claims by seq, however old each is."""
    manager = make_manager(priority_aging_seconds=AGING_SECONDS)
    old = _group(manager, 3, priority=1)
    young = _group(manager, 3, priority=1)
    _age(manager._engine, old, 10 * AGING_SECONDS)
    assert Counter({old: 2, young: 2}) == Counter(_claimed_groups(manager, 4))


def test_a_waiting_group_ages_into_the_top_rank(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """A priority-0 group waits behind priority 2 only until two aging steps have passed since
    it was created; from then on it shares claims with the top rank (no starvation)."""
    manager = make_manager(priority_aging_seconds=AGING_SECONDS)
    low = _group(manager, 4)
    high = _group(manager, 8, priority=2)
    _age(engine, low, AGING_SECONDS + 1)
    assert [high] * 2 == _claimed_groups(manager, 2)
    _age(engine, low, AGING_SECONDS)
    # Both ranks are now 2: the low group's seq 0 comes before the high group's seq 2.
    assert [low, low] == _claimed_groups(manager, 2)
    assert Counter({low: 2, high: 2}) == Counter(_claimed_groups(manager, 4))


def test_changed_priority_applies_to_the_next_claim(manager: LeaseManager) -> None:
    """Raising a group's priority moves its remaining items ahead; the version moves."""
    first = _group(manager, 3)
    second = _group(manager, 3)
    before = manager.version([second])
    manager.set_priority(second, 5)
    assert before != manager.version([second])
    assert manager.group(second).priority == 5
    assert [second] * 3 == _claimed_groups(manager, 3)
    assert [first] * 3 == _claimed_groups(manager, 3)


def test_priority_bounds_and_unknown_groups(manager: LeaseManager) -> None:
    """A priority outside -10..10 is refused, at creation or later; an unknown group is named."""
    group = _group(manager, 1)
    with pytest.raises(ValueError, match="priority must be an integer from -10 to 10"):
        manager.set_priority(group, 11)
    with pytest.raises(ValueError, match="priority"):
        _group(manager, 1, priority=-11)
    with pytest.raises(NoSuchGroup):
        manager.pause(str(uuid.uuid4()))


def test_nothing_is_claimed_while_paused(manager: LeaseManager) -> None:
    """A paused group gives no claim and is not open; resumed, its items are claimed again."""
    group = _group(manager, 3)
    other = _group(manager, 1)
    version = manager.version([group])
    assert manager.pause(group) is True
    assert manager.pause(group) is False
    assert manager.group(group).paused is True
    assert version != manager.version([group])
    assert [other] == _claimed_groups(manager, 5)
    assert manager.claim("w", 5, group_ids=[group]) == []
    assert group not in manager.open_groups()
    assert manager.resume(group) is True
    assert manager.resume(group) is False
    assert [group] * 3 == _claimed_groups(manager, 5)


def test_held_items_of_a_paused_group_finish(manager: LeaseManager) -> None:
    """An attempt held when its group is paused keeps its lease and ends as usual, counted."""
    group = _group(manager, 2)
    held = manager.claim("w", 1)[0]
    manager.pause(group)
    reply = manager.heartbeat(held)
    assert reply.stop_reason is None
    manager.complete(held)
    summary = manager.group(group)
    assert (summary.counts[State.SUCCEEDED], summary.counts[State.QUEUED]) == (1, 1)
    assert manager.item(held.item_id).attempt == 1  # type: ignore[union-attr]


def test_a_paused_group_past_its_deadline_is_abandoned(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """The deadline of a paused group runs on: past it the reaper abandons its queued items."""
    group = _group(manager, 3)
    manager.pause(group)
    expire_deadline(engine, group)
    manager.reap()
    summary = manager.group(group)
    assert summary.counts[State.ABANDONED] == 3
    assert summary.failures == {"deadline_exceeded": 3}


def test_a_lane_caps_the_attempts_in_progress(manager: LeaseManager) -> None:
    """With a lane of 2, a claim of 5 takes 2; an ended attempt makes room for one more; other
    lanes and claims without a lane are not counted against it."""
    _group(manager, 10)
    lane = Lane("bucket-a", 2)
    first = manager.claim("w", 5, lane=lane)
    assert len(first) == 2
    assert manager.claim("w", 5, lane=lane) == []
    assert len(manager.claim("w", 1, lane=Lane("bucket-b", 1))) == 1
    assert len(manager.claim("w", 1)) == 1
    manager.complete(first[0])
    assert len(manager.claim("w", 5, lane=lane)) == 1


def test_concurrent_claimers_never_exceed_a_lane(manager: LeaseManager, engine: sa.Engine) -> None:
    """Eight threads claiming under one lane of 3 at once hold at most 3 attempts together."""
    _group(manager, 50)
    lane = Lane("bucket", 3)
    start = threading.Barrier(CLAIMERS)
    claimed: list[int] = []

    def claim(n: int) -> None:
        start.wait()
        for _ in range(5):
            claimed.append(len(manager.claim(f"w{n}", 2, lane=lane)))

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(CLAIMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(claimed) == 3
    assert manager.group(_only_group(engine)).counts[State.IN_PROGRESS] == 3
    assert duplicate_claims(engine) == []


def _only_group(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.text("SELECT id FROM lease_groups")).scalar_one())

"""Group versions (docs/design.md §3, group versions; ADR 0021): one read that moves with every
transition of a group's items, so that a poller can tell without reading the summary that it
has not changed. The clock is frozen, so no step can rely on a time moving."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from leases import LeaseManager, State
from tests.leases.conftest import FrozenClock, expire_deadline, expire_leases, make_due, new_group


class Watch:
    """The version of a group, and its summary, as of the last step."""

    def __init__(self, manager: LeaseManager, group_ids: list[str]) -> None:
        self.manager = manager
        self.group_ids = group_ids
        self.version = manager.version(group_ids)
        assert self.version is not None

    def moved(self, step: Callable[[], object]) -> bool:
        """Run `step`; whether the version moved (and remember the new one)."""
        step()
        version = self.manager.version(self.group_ids)
        assert version is not None
        moved, self.version = version != self.version, version
        return moved


def test_every_transition_moves_the_version_and_a_heartbeat_does_not(
    manager: LeaseManager, engine: sa.Engine, clock: FrozenClock
) -> None:
    """Claim, success, fail, retry, give-back, reap, abandon, cancel and requeue each move the
    version, all within one millisecond; heartbeats and reads leave it as it is."""
    group_id, _ = new_group(manager, 12, max_attempts=5)
    watch = Watch(manager, [group_id])

    def claim() -> None:
        assert len(manager.claim("w", 1, group_ids=[group_id])) == 1

    held = manager.claim("w", 6, group_ids=[group_id])
    assert len(held) == 6
    assert watch.moved(lambda: None) is True  # the claim above
    assert watch.moved(lambda: manager.heartbeat(held[0])) is False
    assert watch.moved(lambda: manager.check(held[0])) is False
    assert watch.moved(lambda: manager.group(group_id)) is False
    assert watch.moved(claim) is True
    assert watch.moved(lambda: manager.complete(held[0])) is True
    assert watch.moved(lambda: manager.fail(held[1], "invalid_image")) is True
    assert watch.moved(lambda: manager.retry_later(held[2], "dependency_timeout")) is True
    assert watch.moved(lambda: manager.give_back(held[3])) is True
    assert watch.moved(lambda: manager.abandon(held[4])) is True
    expire_leases(engine, [held[5].item_id])
    assert watch.moved(manager.reap) is True  # lease_expired: to retryable
    make_due(engine)
    assert watch.moved(manager.reap) is False  # nothing to reap
    assert watch.moved(lambda: manager.cancel(group_id)) is True
    assert watch.moved(lambda: manager.requeue(group_id, deadline_seconds=60)) is True
    assert manager.group(group_id).counts[State.QUEUED] > 0
    expire_deadline(engine, group_id)
    assert watch.moved(manager.reap) is True  # past its deadline: abandoned


def test_a_new_deadline_alone_moves_the_version(
    manager: LeaseManager, engine: sa.Engine, clock: FrozenClock
) -> None:
    """Requeue with nothing to move still sets a new deadline, which the summary shows."""
    group_id, _ = new_group(manager, 1)
    watch = Watch(manager, [group_id])
    clock.set(clock.ms + 5000)
    assert watch.moved(lambda: manager.requeue(group_id, deadline_seconds=60)) is True


def test_the_version_covers_every_group_named(manager: LeaseManager) -> None:
    """A version of several groups moves with any of them; an unknown first group has none,
    an unknown later group is left out."""
    first, _ = new_group(manager, 2)
    second, _ = new_group(manager, 2)
    watch = Watch(manager, [first, second, "no-such-group"])
    claims = manager.claim("w", 2, group_ids=[second])
    assert watch.moved(lambda: manager.complete(claims[0])) is True
    assert manager.version(["no-such-group", first]) is None
    assert manager.version([first]) != manager.version([second])

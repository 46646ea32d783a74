"""Time boundaries, with the database clock held exactly on them (`FrozenClock`).

Every time comparison of the lease engine is pinned here at equality, where `<` and `<=` (or
`>` and `>=`) part: a batch is closed from its deadline's very millisecond on, a lease has
expired from its expiry's, an item is due from its due time's, an attempt is over-long from the
millisecond it reaches `max_attempt_seconds`.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from leases import LeaseManager, RequeueNeedsDeadline, State, StopReason, queries
from tests.leases.conftest import (
    FROZEN_EPOCH_MS,
    FrozenClock,
    ManagerFactory,
    new_group,
    set_column,
)

NOW = FROZEN_EPOCH_MS
MAX_ATTEMPT_SECONDS = 60.0
MAX_ATTEMPT_MS = 60_000


def test_the_clock_is_frozen_where_the_test_puts_it(
    manager: LeaseManager, clock: FrozenClock
) -> None:
    """Statements read the frozen moment, exactly, and follow it when it moves."""
    with manager.reading() as conn:
        assert conn.execute(queries.select_now()).scalar_one() == NOW
    clock.set(NOW + 1)
    with manager.reading() as conn:
        assert conn.execute(queries.select_now()).scalar_one() == NOW + 1


@pytest.mark.parametrize(("deadline_offset_ms", "claimed"), [(0, 0), (1, 1)])
def test_no_claim_from_the_deadlines_millisecond_on(
    manager: LeaseManager,
    clock: FrozenClock,
    engine: sa.Engine,
    deadline_offset_ms: int,
    claimed: int,
) -> None:
    """A group whose deadline is now is closed: nothing is claimed; a millisecond before, it is."""
    new_group(manager, 1)
    set_column(engine, "lease_groups", "deadline_at", NOW + deadline_offset_ms)
    assert claimed == len(manager.claim("w", 1))


@pytest.mark.parametrize(("due_offset_ms", "claimed"), [(0, 1), (1, 0)])
def test_an_item_is_claimable_from_its_due_millisecond_on(
    manager: LeaseManager, clock: FrozenClock, engine: sa.Engine, due_offset_ms: int, claimed: int
) -> None:
    """An item due now is claimed; one due a millisecond from now is not yet."""
    new_group(manager, 1)
    set_column(engine, "lease_items", "next_attempt_at", NOW + due_offset_ms)
    assert claimed == len(manager.claim("w", 1))


@pytest.mark.parametrize(("deadline_offset_ms", "abandoned"), [(0, 1), (1, 0)])
def test_the_reaper_closes_a_group_at_its_deadline(
    manager: LeaseManager,
    clock: FrozenClock,
    engine: sa.Engine,
    deadline_offset_ms: int,
    abandoned: int,
) -> None:
    """At its deadline's millisecond a group's queued items are abandoned; before, untouched."""
    group_id, _ = new_group(manager, 1)
    set_column(engine, "lease_groups", "deadline_at", NOW + deadline_offset_ms)
    assert abandoned == manager.reap().abandoned
    assert abandoned == manager.group(group_id).counts[State.ABANDONED]


@pytest.mark.parametrize(("expiry_offset_ms", "retried"), [(0, 1), (1, 0)])
def test_a_lease_has_expired_from_its_expirys_millisecond_on(
    manager: LeaseManager,
    clock: FrozenClock,
    engine: sa.Engine,
    expiry_offset_ms: int,
    retried: int,
) -> None:
    """The reaper retries a lease expiring now, and leaves one expiring a millisecond later."""
    new_group(manager, 1)
    manager.claim("w", 1)
    set_column(engine, "lease_items", "lease_expires_at", NOW + expiry_offset_ms)
    assert retried == manager.reap().retried


@pytest.mark.parametrize(("expiry_offset_ms", "abandoned"), [(0, 1), (1, 0)])
def test_a_closed_groups_expired_lease_is_abandoned_from_its_expiry_on(
    manager: LeaseManager,
    clock: FrozenClock,
    engine: sa.Engine,
    expiry_offset_ms: int,
    abandoned: int,
) -> None:
    """In a group past its deadline, the reaper abandons a lease expiring now, not a later one."""
    new_group(manager, 1)
    manager.claim("w", 1)
    set_column(engine, "lease_groups", "deadline_at", NOW - 1)
    set_column(engine, "lease_items", "lease_expires_at", NOW + expiry_offset_ms)
    assert abandoned == manager.reap().abandoned


@pytest.mark.parametrize(
    ("deadline_offset_ms", "reason"), [(0, StopReason.DEADLINE_EXCEEDED), (1, None)]
)
def test_a_heartbeat_stops_at_the_deadlines_millisecond(
    manager: LeaseManager,
    clock: FrozenClock,
    engine: sa.Engine,
    deadline_offset_ms: int,
    reason: StopReason | None,
) -> None:
    """At the deadline the heartbeat (and `check`) say stop and the lease is not extended;
    a millisecond before, the lease is extended to now + lease."""
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    set_column(engine, "lease_groups", "deadline_at", NOW + 1000 + deadline_offset_ms)
    clock.set(NOW + 1000)
    reply = manager.heartbeat(claim)
    assert reason is reply.stop_reason
    assert reason is manager.check(claim)
    extended = reply.lease_expires_at.timestamp() * 1000 == NOW + 1000 + 30_000
    assert (reason is None) == extended


@pytest.mark.parametrize(
    ("age_ms", "reason"),
    [(MAX_ATTEMPT_MS, StopReason.MAX_ATTEMPT_SECONDS), (MAX_ATTEMPT_MS - 1, None)],
)
def test_an_attempt_is_over_long_from_the_millisecond_it_reaches_the_limit(
    make_manager: ManagerFactory,
    clock: FrozenClock,
    engine: sa.Engine,
    age_ms: int,
    reason: StopReason | None,
) -> None:
    """An attempt aged exactly `max_attempt_seconds` gets no extension; a millisecond younger,
    it does."""
    manager = make_manager(max_attempt_seconds=MAX_ATTEMPT_SECONDS)
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    clock.set(NOW + age_ms)
    reply = manager.heartbeat(claim)
    assert reason is reply.stop_reason
    assert reason is manager.check(claim)
    extended = reply.lease_expires_at.timestamp() * 1000 == NOW + age_ms + 30_000
    assert (reason is None) == extended


@pytest.mark.parametrize(("deadline_offset_ms", "needs_deadline"), [(0, True), (1, False)])
def test_a_requeue_at_the_deadline_needs_a_new_one(
    manager: LeaseManager,
    clock: FrozenClock,
    engine: sa.Engine,
    deadline_offset_ms: int,
    needs_deadline: bool,
) -> None:
    """A requeue in the deadline's millisecond counts the group as closed; before, as open."""
    group_id, _ = new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    manager.fail(claim, "invalid_image")
    set_column(engine, "lease_groups", "deadline_at", NOW + deadline_offset_ms)
    if needs_deadline:
        with pytest.raises(RequeueNeedsDeadline):
            manager.requeue(group_id)
    else:
        assert manager.requeue(group_id) == 1


def test_the_retry_backoff_doubles_with_equal_jitter_up_to_its_cap(
    make_manager: ManagerFactory, clock: FrozenClock, engine: sa.Engine
) -> None:
    """Attempt n waits between half and all of min(cap, base x 2^(n-1)) from now: 5 s, 10 s,
    20 s ... capped at 300 s."""
    manager = make_manager(retry_backoff_seconds=5.0, retry_backoff_max_seconds=300.0)
    new_group(manager, 1, max_attempts=10)
    for attempt in range(1, 10):
        set_column(engine, "lease_items", "next_attempt_at", NOW)
        (claim,) = manager.claim("w", 1)
        assert attempt == claim.attempt
        assert State.RETRYABLE is manager.retry_later(claim, "storage_unavailable")
        with engine.connect() as conn:
            due = conn.execute(sa.text("SELECT next_attempt_at FROM lease_items")).scalar_one()
        delay_ms = min(300_000, 5_000 * 2 ** (attempt - 1))
        assert NOW + delay_ms // 2 <= due <= NOW + delay_ms, (attempt, due - NOW)

"""Fencing: a worker whose lease was reaped (or superseded) cannot write anything more."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from leases import Claim, LeaseLost, LeaseManager, State, StopReason
from tests.leases.conftest import event_count, expire_leases, make_due, new_group

STALE_WRITES: dict[str, Callable[[LeaseManager, Claim], object]] = {
    "heartbeat": lambda m, c: m.heartbeat(c),
    "check": lambda m, c: m.check(c),
    "complete": lambda m, c: m.complete(c),
    "fail": lambda m, c: m.fail(c, "invalid_image"),
    "retry_later": lambda m, c: m.retry_later(c, "internal_error"),
    "give_back": lambda m, c: m.give_back(c),
    "abandon": lambda m, c: m.abandon(c),
}


@pytest.mark.parametrize("write", sorted(STALE_WRITES))
def test_reaped_worker_cannot_write(manager: LeaseManager, engine: sa.Engine, write: str) -> None:
    """After the reaper took the lease back, and another worker re-claimed it, every write fails."""
    group_id, _ = new_group(manager, 1)
    (stale,) = manager.claim("slow", 1)
    expire_leases(engine)
    manager.reap()
    with pytest.raises(LeaseLost):
        STALE_WRITES[write](manager, stale)
    make_due(engine)
    (fresh,) = manager.claim("fast", 1)
    with pytest.raises(LeaseLost):
        STALE_WRITES[write](manager, stale)
    manager.complete(fresh)
    assert manager.group(group_id).counts[State.SUCCEEDED] == 1
    assert event_count(engine, "succeeded") == 1


def test_expired_but_unreaped_lease_still_writes(manager: LeaseManager, engine: sa.Engine) -> None:
    """Token and state fence the write: an expired lease nobody has reaped may still commit."""
    _, ids = new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    expire_leases(engine)
    manager.complete(claim)
    item = manager.item(ids[0])
    assert item is not None
    assert item.state is State.SUCCEEDED


def _commit_with_manifest(manager: LeaseManager, claim: Claim) -> None:
    with manager.transaction() as conn:
        conn.execute(sa.text("INSERT INTO manifest VALUES (:i)"), {"i": claim.item_id})
        manager.complete(claim, conn=conn)


def test_complete_inside_caller_transaction(manager: LeaseManager, engine: sa.Engine) -> None:
    """complete(conn=...) commits with the caller's own rows, and a LeaseLost rolls both back."""
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE manifest (item_id TEXT)"))
    _, ids = new_group(manager, 2)
    good, stale = manager.claim("w", 2)
    _commit_with_manifest(manager, good)
    expire_leases(engine, [stale.item_id])
    manager.reap()
    with pytest.raises(LeaseLost):
        _commit_with_manifest(manager, stale)
    with engine.connect() as conn:
        written = conn.execute(sa.text("SELECT item_id FROM manifest")).scalars().all()
    assert written == [good.item_id]
    assert sorted(ids) == sorted([good.item_id, stale.item_id])


def test_wrong_token_is_rejected(manager: LeaseManager) -> None:
    """A made-up token never matches a held lease."""
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    with pytest.raises(LeaseLost):
        manager.complete(dataclasses.replace(claim, lease_token="0" * 32))
    assert manager.check(claim) is None


def test_check_tells_the_holder_that_cancel_was_requested(manager: LeaseManager) -> None:
    """After cancel the lease is still held, and `check` says to stop without a heartbeat."""
    group_id, _ = new_group(manager, 2)
    (claim,) = manager.claim("w", 1)
    manager.cancel(group_id)
    assert manager.check(claim) is StopReason.CANCELLED
    manager.abandon(claim)
    assert manager.group(group_id).counts[State.ABANDONED] == 2


def test_events_record_the_attempt(manager: LeaseManager) -> None:
    """Each transition of an attempt logs its worker, token and claim correlation id."""
    group_id, ids = new_group(manager, 1)
    (claim,) = manager.claim("w-7", 1)
    manager.fail(claim, "invalid_image")
    events = manager.events(group_id, item_id=ids[0])
    assert [(e.from_state, e.to_state) for e in events] == [
        (State.QUEUED, State.IN_PROGRESS),
        (State.IN_PROGRESS, State.FAILED),
    ]
    for event in events:
        assert (event.worker_id, event.lease_token, event.correlation_id, event.attempt) == (
            "w-7",
            claim.lease_token,
            claim.correlation_id,
            1,
        )
    assert events[-1].reason == "invalid_image"
    assert events[0].at <= events[1].at
    assert manager.events(group_id, after_id=events[0].id) == events[1:]

"""Heartbeats (B): extension, the reasons to stop extending, the Heartbeater thread, and the
Heartbeats thread that renews all of a holder's leases in one statement."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

import sqlalchemy as sa

from leases import Heartbeater, Heartbeats, LeaseManager, StopReason
from tests.leases.conftest import (
    ManagerFactory,
    age_attempts,
    expire_deadline,
    expire_leases,
    new_group,
)

WAIT_SECONDS = 5.0


def _wait_for(condition: Callable[[], bool], timeout: float = WAIT_SECONDS) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_heartbeat_extends_from_database_now(manager: LeaseManager, engine: sa.Engine) -> None:
    """A heartbeat moves the expiry to now + lease, even after the lease had expired unreaped."""
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    expire_leases(engine)
    reply = manager.heartbeat(claim)
    assert reply.stop_reason is None
    assert reply.lease_expires_at >= claim.lease_expires_at
    assert manager.reap().total == 0


def test_heartbeat_refuses_after_cancel(manager: LeaseManager) -> None:
    """After cancel the reply says so and the lease is not extended."""
    group_id, _ = new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    manager.cancel(group_id)
    reply = manager.heartbeat(claim)
    assert reply.stop_reason is StopReason.CANCELLED
    assert reply.lease_expires_at == claim.lease_expires_at


def test_heartbeat_refuses_past_deadline(manager: LeaseManager, engine: sa.Engine) -> None:
    """Past the group deadline the lease is not extended (`deadline_exceeded`)."""
    group_id, _ = new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    expire_deadline(engine, group_id)
    reply = manager.heartbeat(claim)
    assert reply.stop_reason is StopReason.DEADLINE_EXCEEDED
    assert reply.lease_expires_at == claim.lease_expires_at


def test_heartbeat_refuses_overlong_attempt(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """An attempt running longer than max_attempt_seconds is not extended any more."""
    manager: LeaseManager = make_manager(max_attempt_seconds=60.0)
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    assert manager.heartbeat(claim).stop_reason is None
    age_attempts(engine, 61.0)
    reply = manager.heartbeat(claim)
    assert reply.stop_reason is StopReason.MAX_ATTEMPT_SECONDS


def test_heartbeater_keeps_lease_alive(make_manager: ManagerFactory) -> None:
    """The thread renews a 1.5 s lease so that the reaper never takes it while work runs."""
    # Lease and duration leave slack for a loaded machine: a beat may come late by 0.9 s.
    manager: LeaseManager = make_manager(lease_seconds=1.5)
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    with Heartbeater(manager, claim) as beat:
        for _ in range(10):
            time.sleep(0.25)
            assert manager.reap().total == 0
        assert not beat.lost.is_set()
    manager.complete(claim)


def test_heartbeater_signals_lost_lease(manager: LeaseManager, engine: sa.Engine) -> None:
    """When the lease is reaped the thread sets `lost` and stops."""
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    # Reaped before the thread starts: a beat racing the reaper could legitimately renew the
    # expired (not yet reaped) lease.
    expire_leases(engine)
    manager.reap()
    with Heartbeater(manager, claim, interval_seconds=0.02) as beat:
        assert _wait_for(beat.lost.is_set)
    assert beat.stop_reason is None


def test_heartbeater_signals_cancel(manager: LeaseManager) -> None:
    """A cancel shows up as `stop_reason`; exit joins promptly."""
    group_id, _ = new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    started = time.monotonic()
    with Heartbeater(manager, claim, interval_seconds=0.02) as beat:
        manager.cancel(group_id)
        assert _wait_for(lambda: beat.stop_reason is StopReason.CANCELLED)
    assert time.monotonic() - started < WAIT_SECONDS
    manager.abandon(claim)
    assert manager.group(group_id).failures == {"cancelled": 1}


def test_heartbeater_default_interval_is_a_third_of_the_lease(make_manager: ManagerFactory) -> None:
    """Without an interval the thread beats every lease/3."""
    manager: LeaseManager = make_manager(lease_seconds=9.0)
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    beat = Heartbeater(manager, claim)
    assert beat.interval_seconds == 3.0


def _statements_on_items(engine: sa.Engine) -> list[tuple[str, object]]:
    """A live list of the UPDATEs of `lease_items` the engine runs from now on, with their
    parameters."""
    seen: list[tuple[str, object]] = []

    def record(
        conn: object, cursor: object, statement: str, parameters: object, *_: object
    ) -> None:
        if statement.lstrip().upper().startswith(("UPDATE LEASE_ITEMS", "WITH")):
            seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    return seen


def _leases_sent(parameters: object) -> int:
    """How many leases a set statement's parameters carry: PostgreSQL's array of ids, or
    SQLite's one JSON array of leases."""
    if isinstance(parameters, dict):
        return len(parameters["p_held_id"])
    (held,) = [v for v in parameters if isinstance(v, str) and v.startswith("[")]  # type: ignore[attr-defined]
    return len(json.loads(held))


def test_heartbeats_renew_every_held_lease_in_one_statement(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """A worker holding three items renews all three leases with one statement per beat."""
    new_group(manager, 3)
    claims = manager.claim("w", 3)
    expire_leases(engine)
    beats = Heartbeats(manager, interval_seconds=3600.0)
    with ExitStack() as stack:
        held = [stack.enter_context(beats.holding(claim)) for claim in claims]
        statements = _statements_on_items(engine)
        beats.beat()
        assert [_leases_sent(parameters) for _, parameters in statements] == [3]
        assert not any(h.lost.is_set() or h.stop_reason for h in held)
        assert manager.reap().total == 0


def test_heartbeats_signal_each_lease_on_its_own(manager: LeaseManager, engine: sa.Engine) -> None:
    """A lost lease and a refused one are flagged on their own holders and no longer renewed;
    the third lease goes on being renewed."""
    new_group(manager, 1)
    cancelled, _ = new_group(manager, 1)
    new_group(manager, 1)
    claims = manager.claim("w", 3)
    lost = next(c for c in claims if c.group_id != cancelled)
    expire_leases(engine, [lost.item_id])
    manager.reap()
    manager.cancel(cancelled)
    beats = Heartbeats(manager, interval_seconds=3600.0)
    with ExitStack() as stack:
        held = {c.item_id: stack.enter_context(beats.holding(c)) for c in claims}
        beats.beat()
        flags = {(h.lost.is_set(), h.stop_reason) for h in held.values()}
        assert {(True, None), (False, StopReason.CANCELLED), (False, None)} == flags
        assert held[lost.item_id].lost.is_set()
        statements = _statements_on_items(engine)
        beats.beat()
        assert [_leases_sent(parameters) for _, parameters in statements] == [1]
    beats.join()


def test_heartbeats_thread_runs_only_while_something_is_held(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """The thread renews a held lease on its own and ends once the last lease is released."""
    manager: LeaseManager = make_manager()
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    expire_leases(engine)
    beats = Heartbeats(manager, interval_seconds=0.02)

    def renewed() -> bool:
        with engine.connect() as conn:
            query = sa.text("SELECT lease_expires_at FROM lease_items WHERE id = :id")
            return int(conn.execute(query, {"id": claim.item_id}).scalar_one()) > 1

    with beats.holding(claim):
        assert _wait_for(renewed)
        assert "heartbeats" in {t.name for t in threading.enumerate()}
    beats.join()
    assert "heartbeats" not in {t.name for t in threading.enumerate()}

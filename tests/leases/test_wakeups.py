"""Wake-ups: the moves that make work claimable notify the listeners (PostgreSQL), and SQLite,
which has no notifications, leaves its waiters to poll (docs/design.md §3, wake-ups)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from leases import NewItem, Signal, State, Wakeups
from tests.leases.conftest import ManagerFactory, expire_leases, new_group

WAKE_TIMEOUT_SECONDS = 10.0
QUIET_SECONDS = 0.5
"""How long a signal is watched to see that nothing woke it."""


@pytest.fixture
def wakeups(engine: sa.Engine) -> Iterator[Wakeups]:
    """A started listener on the test's database, connected on PostgreSQL."""
    listener = Wakeups(engine)
    listener.start()
    if listener.listening:
        assert listener.wait_connected(WAKE_TIMEOUT_SECONDS)
    yield listener
    listener.stop()


def _settled(signal: Signal) -> int:
    """The signal's mark once the wake of (re)connecting has passed."""
    time.sleep(0.1)
    return signal.mark()


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_sealed_group_wakes_a_waiting_signal(
    wakeups: Wakeups, make_manager: ManagerFactory
) -> None:
    """Creating a group notifies: a waiter is woken at once, not at its timeout."""
    signal = wakeups.signal()
    mark = _settled(signal)
    new_group(make_manager(), 2)
    started = time.monotonic()
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)
    assert time.monotonic() - started < WAKE_TIMEOUT_SECONDS / 2
    assert wakeups.received >= 1


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_requeue_and_a_give_back_wake_a_waiting_signal(
    wakeups: Wakeups, make_manager: ManagerFactory
) -> None:
    """A requeue of failed items and a give-back each wake the waiters."""
    manager = make_manager()
    group_id, _ = new_group(manager, 2)
    signal = wakeups.signal()
    first, second = manager.claim("w", 2)
    manager.fail(first, "invalid_image")
    mark = _settled(signal)
    assert manager.requeue(group_id) == 1
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)
    mark = _settled(signal)
    manager.give_back(second)
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_resume_wakes_the_waiters_and_a_pause_does_not(
    wakeups: Wakeups, make_manager: ManagerFactory
) -> None:
    """Resuming a paused group announces its work; pausing it, or resuming it twice, does not."""
    manager = make_manager()
    group_id, _ = new_group(manager, 1)
    signal = wakeups.signal()
    mark = _settled(signal)
    manager.pause(group_id)
    assert not signal.wait(mark, 0.3)
    assert manager.resume(group_id)
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)
    mark = _settled(signal)
    assert not manager.resume(group_id)
    assert not signal.wait(mark, 0.3)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_retry_wakes_the_waiters_when_it_is_due(
    wakeups: Wakeups, make_manager: ManagerFactory
) -> None:
    """A retry announces when it is due: the waiter is woken then, and finds the item due."""
    manager = make_manager(retry_backoff_seconds=1.0, retry_backoff_max_seconds=1.0)
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    signal = wakeups.signal()
    mark = _settled(signal)
    assert manager.retry_later(claim, "storage_unavailable") is State.RETRYABLE
    assert not signal.wait(mark, 0.3)  # not due yet: 0.5 to 1 s of jittered backoff
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)
    assert [c.item_id for c in manager.claim("w", 1)] == [claim.item_id]


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_retry_made_before_the_listener_connects_wakes_its_waiters_when_due(
    engine: sa.Engine, make_manager: ManagerFactory
) -> None:
    """A retry announced before a listener connects (a worker's first registry refresh
    releases a killed worker's item before its slots listen) still wakes the waiters when it
    is due: on connecting, the listener reads the earliest due time itself."""
    manager = make_manager(retry_backoff_seconds=2.0, retry_backoff_max_seconds=2.0)
    new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    assert manager.retry_later(claim, "storage_unavailable") is State.RETRYABLE
    listener = Wakeups(engine)
    signal = listener.signal()
    listener.start()
    try:
        assert listener.wait_connected(WAKE_TIMEOUT_SECONDS)
        mark = _settled(signal)
        assert listener.received == 0
        assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)
        assert [c.item_id for c in manager.claim("w", 1)] == [claim.item_id]
    finally:
        listener.stop()


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_an_expired_lease_reaped_wakes_the_waiters(
    wakeups: Wakeups, engine: sa.Engine, make_manager: ManagerFactory
) -> None:
    """The reaper's release of an expired lease (retryable, due soon) wakes the waiters."""
    manager = make_manager()
    new_group(manager, 1)
    manager.claim("w", 1)
    expire_leases(engine)
    signal = wakeups.signal()
    mark = _settled(signal)
    assert manager.reap().retried == 1
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_group_added_in_a_transaction_wakes_the_waiters_at_its_commit(
    wakeups: Wakeups, make_manager: ManagerFactory
) -> None:
    """A small group added in the caller's transaction (a callback's delivery, written by the
    transaction that ends its batch) announces itself when that transaction commits."""
    manager = make_manager()
    signal = wakeups.signal()
    mark = _settled(signal)
    items = [NewItem(str(uuid.uuid4()), {"ref": "r"})]
    with manager.transaction() as conn:
        manager.add_group(conn, str(uuid.uuid4()), deadline_seconds=60, max_attempts=1, items=items)
        assert not signal.wait(mark, QUIET_SECONDS)  # not before the commit
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_rolled_back_transaction_wakes_nobody(
    wakeups: Wakeups, make_manager: ManagerFactory
) -> None:
    """A group added in a transaction that rolls back announces nothing."""
    manager = make_manager()
    signal = wakeups.signal()
    mark = _settled(signal)
    items = [NewItem(str(uuid.uuid4()), {"ref": "r"})]

    def add_then_fail() -> None:
        with manager.transaction() as conn:
            manager.add_group(
                conn, str(uuid.uuid4()), deadline_seconds=60, max_attempts=1, items=items
            )
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        add_then_fail()
    assert not signal.wait(mark, QUIET_SECONDS)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_listener_reconnects_and_wakes_everyone_after_losing_its_connection(
    wakeups: Wakeups, engine: sa.Engine, make_manager: ManagerFactory
) -> None:
    """A listening connection killed by the server comes back, wakes its waiters (what was
    announced meanwhile is lost) and receives notifications again."""
    signal = wakeups.signal()
    mark = _settled(signal)
    with engine.connect() as conn:
        killed = conn.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE query = 'LISTEN leases_work' AND datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        ).scalar()
    assert killed == 1
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)  # the reconnection's wake
    assert wakeups.wait_connected(WAKE_TIMEOUT_SECONDS)
    mark = _settled(signal)
    new_group(make_manager(), 1)
    assert signal.wait(mark, WAKE_TIMEOUT_SECONDS)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sqlite_has_no_listener_and_its_waiters_time_out(
    wakeups: Wakeups, make_manager: ManagerFactory
) -> None:
    """On SQLite nothing listens and a new group wakes nobody: waiters poll as before."""
    assert not wakeups.listening
    assert not wakeups.connected
    signal = wakeups.signal()
    mark = signal.mark()
    new_group(make_manager(), 1)
    assert not signal.wait(mark, QUIET_SECONDS)

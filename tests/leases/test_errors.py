"""Transient database failures surface as DatabaseUnavailable, chained to the driver error."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
import sqlalchemy as sa

from leases import (
    DatabaseUnavailable,
    LeaseError,
    LeaseManager,
    SchemaMissing,
    make_engine,
    upgrade,
)
from leases import engine as lease_engine
from tests.leases.conftest import new_group

CLOSED_PORT_URL = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"


def test_unreachable_postgres_is_unavailable() -> None:
    """A refused connection raises DatabaseUnavailable (a LeaseError) from the driver error."""
    engine = make_engine(CLOSED_PORT_URL)
    manager = LeaseManager(engine)
    with pytest.raises(DatabaseUnavailable) as caught:
        manager.claim("w", 1)
    assert isinstance(caught.value, LeaseError)
    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
    engine.dispose()


def test_sqlite_lock_beyond_busy_timeout_is_unavailable(sqlite_url: str) -> None:
    """A write lock held elsewhere longer than the busy timeout raises DatabaseUnavailable."""
    engine = make_engine(sqlite_url)
    upgrade(engine)
    manager = LeaseManager(engine)
    new_group(manager, 1)
    engine.dispose()

    def short_timeout(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=50")

    sa.event.listen(engine, "connect", short_timeout)
    holder = sqlite3.connect(sa.make_url(sqlite_url).database or "", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseUnavailable):
            manager.claim("w", 1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(manager.claim("w", 1)) == 1
    engine.dispose()


def test_a_sqlite_writer_takes_the_lock_at_its_next_short_try(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write waiting for SQLite's lock tries again after each short sleep of its own (not
    SQLite's ever longer waits, which miss the gaps a submission leaves between its chunks),
    takes the lock at the first try after it comes free, and leaves the connection its busy
    timeout."""
    engine = make_engine(sqlite_url)
    upgrade(engine)
    manager = LeaseManager(engine)
    new_group(manager, 1)
    holder = sqlite3.connect(sa.make_url(sqlite_url).database or "", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            holder.execute("ROLLBACK")  # the lock comes free during the third wait

    monkeypatch.setattr(lease_engine.time, "sleep", nap)
    try:
        assert len(manager.claim("w", 1)) == 1
    finally:
        holder.close()
    assert naps == [lease_engine.SQLITE_WRITE_POLL_SECONDS] * 3
    with engine.connect() as conn:
        timeout = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
    assert timeout == lease_engine.SQLITE_BUSY_TIMEOUT_MILLISECONDS
    engine.dispose()


def test_programming_errors_are_not_outages(sqlite_url: str) -> None:
    """A missing schema is not an outage (nothing to wait out): it is `SchemaMissing`, with the
    driver's error chained, so a caller can name the likely mistake."""
    engine = make_engine(sqlite_url)
    with pytest.raises(SchemaMissing) as caught:
        LeaseManager(engine).claim("w", 1)
    assert not isinstance(caught.value, DatabaseUnavailable)
    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
    assert "no such table" in str(caught.value.__cause__)
    engine.dispose()


@pytest.mark.postgres
def test_lost_connections_fail_one_call_and_the_next_reconnects(postgres_url: str) -> None:
    """After the server dropped every connection (a restart), one call raises
    DatabaseUnavailable, the pool's other dead connections are discarded with it, and the next
    call reconnects: on the statements run per item too, which go to the driver directly."""
    engine = make_engine(postgres_url)
    upgrade(engine)
    manager = LeaseManager(engine)
    new_group(manager, 2)
    claims = manager.claim("w", 2)
    with engine.connect() as first, engine.connect() as second:
        for conn in (first, second):
            conn.exec_driver_sql("SELECT 1")
    admin = sa.create_engine(postgres_url, poolclass=sa.NullPool)
    with admin.connect() as conn:
        dropped = conn.exec_driver_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).scalar_one()
    admin.dispose()
    assert dropped >= 2

    with pytest.raises(DatabaseUnavailable) as caught:
        manager.heartbeat_many(claims)

    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
    assert [reply is not None for reply in manager.heartbeat_many(claims)] == [True, True]
    assert manager.complete_many(claims) == []
    engine.dispose()


@pytest.mark.postgres
def test_a_lost_connection_leaves_the_ones_checked_out_elsewhere_closable(
    postgres_url: str,
) -> None:
    """A lost connection met on the driver's own cursor does not discard the pool under a
    connection another caller holds: returned, that one is closed with the engine, not left
    open for the garbage collector."""
    engine = make_engine(postgres_url)
    upgrade(engine)
    manager = LeaseManager(engine)
    new_group(manager, 1)
    claims = manager.claim("w", 1)
    idle, held = engine.connect(), engine.connect()
    idle.exec_driver_sql("SELECT 1")
    held_pid = held.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    idle.close()  # back in the pool, where the next call takes it
    held_raw: Any = held.connection.dbapi_connection
    admin = sa.create_engine(postgres_url, poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = "
            f"current_database() AND pid NOT IN (pg_backend_pid(), {int(held_pid)})"
        )
    admin.dispose()
    with pytest.raises(DatabaseUnavailable):
        manager.heartbeat_many(claims)  # on the idle connection, which the server dropped

    held.close()
    engine.dispose()

    assert held_raw.closed
    assert [reply is not None for reply in manager.heartbeat_many(claims)] == [True]
    engine.dispose()

"""Engine helpers: SQLite in WAL mode with `BEGIN IMMEDIATE` writes, pooled PostgreSQL.

`make_engine(url)` is what applications should use; `configure_sqlite(engine)` adapts an engine
made elsewhere (it must run before the engine's first connection).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from leases.errors import DatabaseUnavailable

try:
    import fcntl
except ImportError:  # not POSIX: creations take turns within the process only
    fcntl = None  # type: ignore[assignment]

SQLITE_BUSY_TIMEOUT_MILLISECONDS = 30_000
SQLITE_WRITE_POLL_SECONDS = 0.002
"""How often a write transaction waiting for SQLite's write lock tries again (see `_on_begin`)."""
SQLITE_POOL_SIZE = 20
SQLITE_POOL_MAX_OVERFLOW = 20
POSTGRES_POOL_SIZE = 10
POSTGRES_POOL_MAX_OVERFLOW = 20
POOL_RECYCLE_SECONDS = 1800
# Execution option marking a connection whose transactions only read: SQLite then begins them
# DEFERRED, so readers never queue for the write lock.
READ_ONLY_OPTION = "leases_read_only"


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite must not emit its own deferred BEGIN: `_on_begin` emits the right one instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MILLISECONDS}")
        # NORMAL is durable across application crashes in WAL mode; only power loss can lose
        # the last commits, which the lease protocol survives (leases expire and are reaped).
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _on_begin(connection: sa.Connection) -> None:
    # BEGIN IMMEDIATE takes the write lock up front: a deferred transaction that reads and then
    # writes can fail with SQLITE_BUSY without waiting on the busy timeout.
    if connection.get_execution_options().get(READ_ONLY_OPTION):
        connection.exec_driver_sql("BEGIN")
    else:
        _begin_immediate(connection)


def _begin_immediate(connection: sa.Connection) -> None:
    """BEGIN IMMEDIATE, trying every `SQLITE_WRITE_POLL_SECONDS` while another connection holds
    the write lock, for up to the connection's busy timeout.

    SQLite's own wait (its busy handler) sleeps longer and longer between tries — 25 ms after
    0.05 s, 100 ms after 0.23 s — so a writer that has waited a while can miss gap after gap
    that another writer leaves (a large submission leaves one after each chunk: ADR 0007) and
    wait many times longer than anyone held the lock. Trying every 2 ms, it takes the first gap.
    """
    raw: Any = connection.connection.dbapi_connection
    # The connection's own busy timeout (SQLITE_BUSY_TIMEOUT_MILLISECONDS unless reconfigured)
    # bounds the wait, and is its timeout again afterwards for every other statement.
    (timeout_ms,) = raw.execute("PRAGMA busy_timeout").fetchone()
    deadline = time.monotonic() + timeout_ms / 1000
    raw.execute("PRAGMA busy_timeout=0")
    try:
        while True:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                message = str(exc).lower()
                if "locked" not in message and "busy" not in message:
                    break  # another failure: reported below, as SQLAlchemy reports it
                if time.monotonic() >= deadline:
                    break
            time.sleep(SQLITE_WRITE_POLL_SECONDS)
        # Once more through SQLAlchemy, with no wait left: it succeeds (the lock just came
        # free) or raises SQLAlchemy's own error for the caller to translate.
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    finally:
        raw.execute(f"PRAGMA busy_timeout={int(timeout_ms)}")


CREATION_TURN_WAIT_SECONDS = 120.0
"""How long a creation on SQLite waits for another to finish before giving up as unavailable."""
_CREATION_TURN_POLL_SECONDS = 0.05
_CREATION_TURN = threading.Lock()


@contextmanager
def creation_turn(engine: sa.Engine) -> Iterator[None]:
    """On SQLite, hold the one turn to create groups in this database file; elsewhere nothing.

    SQLite's write lock is not first come, first served: a writer waiting on the busy timeout
    polls, and several submissions writing chunk after chunk would leave it no gap. One creation
    at a time (a lock on a file beside the database, across processes), which pauses after each
    chunk, always leaves one. Raises `DatabaseUnavailable` after `CREATION_TURN_WAIT_SECONDS`
    (another creation is stuck or very long). Where the lock file cannot be opened (a read-only
    folder), creations take turns within this process only.
    """
    if engine.dialect.name != "sqlite":
        yield
        return
    path = engine.url.database
    fd = None
    if fcntl is not None and path and path != ":memory:" and not path.startswith("file:"):
        with contextlib.suppress(OSError):
            # Read-only is enough for flock, so any user who can use the database can use it.
            fd = os.open(f"{path}-create.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    if fd is None:
        if not _CREATION_TURN.acquire(timeout=CREATION_TURN_WAIT_SECONDS):
            raise _turn_not_free()
        try:
            yield
        finally:
            _CREATION_TURN.release()
        return
    try:
        deadline = time.monotonic() + CREATION_TURN_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _turn_not_free() from None
                time.sleep(_CREATION_TURN_POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _turn_not_free() -> DatabaseUnavailable:
    return DatabaseUnavailable(
        f"another submission has been writing into this database for over "
        f"{CREATION_TURN_WAIT_SECONDS:g} s; try again later"
    )


def configure_sqlite(engine: sa.Engine) -> None:
    """Install WAL, busy timeout and BEGIN IMMEDIATE on a SQLite engine; idempotent, else no-op."""
    if engine.dialect.name != "sqlite" or sa.event.contains(engine, "connect", _on_connect):
        return
    sa.event.listen(engine, "connect", _on_connect)
    sa.event.listen(engine, "begin", _on_begin)


def make_engine(url: str, **kw: Any) -> sa.Engine:
    """Create an engine for `url` with the settings the lease engine relies on.

    SQLite: WAL, busy timeout, `BEGIN IMMEDIATE` for write transactions, a pool large enough for
    many worker threads. PostgreSQL: a pool with recycling and no pre-ping (a ping per checkout
    would double the round trips of every one-statement transition); after a server restart the
    first call fails with `DatabaseUnavailable`, SQLAlchemy then discards the whole pool, and the
    next call reconnects. Keyword arguments override these and go to `create_engine`.
    """
    parsed = sa.make_url(url)
    options: dict[str, Any]
    if parsed.get_backend_name() == "sqlite":
        options = {"pool_size": SQLITE_POOL_SIZE, "max_overflow": SQLITE_POOL_MAX_OVERFLOW}
    else:
        options = {
            "pool_size": POSTGRES_POOL_SIZE,
            "max_overflow": POSTGRES_POOL_MAX_OVERFLOW,
            "pool_recycle": POOL_RECYCLE_SECONDS,
        }
    options.update(kw)
    engine = sa.create_engine(parsed, **options)
    configure_sqlite(engine)
    return engine

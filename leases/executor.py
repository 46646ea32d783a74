"""The one place that executes SQL: transactions, statement execution, driver error translation.

Thread-safe as the engine is: each transaction uses its own pooled connection.
"""

from __future__ import annotations

import contextlib
import threading
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

from leases.engine import READ_ONLY_OPTION, configure_sqlite
from leases.errors import ConstraintViolation, DatabaseRefused, DatabaseUnavailable, SchemaMissing

# SQLite reports lock waits that outlasted the busy timeout with these OperationalError messages;
# its other OperationalErrors (missing table, syntax) are programming errors, not outages.
SQLITE_TRANSIENT_MARKERS = ("database is locked", "database is busy", "disk i/o error")
POSTGRES_UNDEFINED_TABLE = "42P01"
SQLITE_AUTOCHECKPOINT = "wal_autocheckpoint"
SQLITE_CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
# The server (or SQLite) answered and refused: a configuration mistake, not an outage. psycopg
# reports connection-time refusals without a SQLSTATE, so they are known by their message.
REFUSAL_MARKERS = (
    "does not exist",  # FATAL: database "x" / role "x" does not exist
    "authentication failed",  # password, peer, ident, SCRAM
    "no pg_hba.conf entry",
    "permission denied for database",
    "unable to open database file",  # SQLite: a missing folder, no permission
    "too many connections for role",
)


def driver_reason(exc: BaseException) -> str:
    """The first line of a driver error, which says why (refused, timed out, no such database);
    it never holds the password."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    text = lines[0].strip() if lines else type(orig).__name__
    return text.removeprefix("connection failed: ")


def is_refusal(exc: sa.exc.DBAPIError) -> bool:
    """True when the database refused us for a reason waiting cannot fix (no such database or
    role, bad credentials, an SQLite file that cannot be opened)."""
    if not isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return False
    message = str(exc.orig).lower()
    return any(marker in message for marker in REFUSAL_MARKERS) and (
        "fatal" in message or "sqlite" in type(exc.orig).__module__ or "unable to open" in message
    )


def _is_transient(exc: sa.exc.DBAPIError, dialect_name: str) -> bool:
    if exc.connection_invalidated or isinstance(exc, sa.exc.InterfaceError):
        return True
    if not isinstance(exc, sa.exc.OperationalError):
        return False
    if dialect_name == "sqlite":
        message = str(exc.orig).lower()
        return any(marker in message for marker in SQLITE_TRANSIENT_MARKERS)
    return True


def _is_missing_table(exc: sa.exc.DBAPIError) -> bool:
    # PostgreSQL's SQLSTATE 42P01 (undefined_table); SQLite says so in its message.
    if getattr(exc.orig, "sqlstate", None) == POSTGRES_UNDEFINED_TABLE:
        return True
    return str(exc.orig).lower().startswith("no such table")


# Statements a manager remembers compiled for `Executor.fetch`; past this the memory is cleared
# (the engine's statements are a few dozen: built once by cached builders).
DRIVER_STATEMENTS_MAX = 1000


@dataclass
class _DriverStatement:
    """A statement compiled once for the driver's own cursor: its text, its constant values,
    the processors of its parameters, and (after its first run) the type of its rows."""

    sql: str
    constants: dict[str, Any]
    processors: Mapping[str, Callable[[Any], Any]]
    row: Any = None


class Executor:
    """Executes `leases.queries` statements on an engine, translating transient failures."""

    def __init__(self, engine: sa.Engine) -> None:
        configure_sqlite(engine)
        self.engine = engine
        self.dialect_name = engine.dialect.name
        # `fetch` runs on psycopg's cursor directly; other drivers go through SQLAlchemy.
        self._driver: dict[Executable, _DriverStatement | None] | None = (
            {} if engine.dialect.driver == "psycopg" else None
        )
        self._driver_lock = threading.Lock()

    @contextmanager
    def translate_errors(self) -> Iterator[None]:
        """Raise transient driver failures as `DatabaseUnavailable` and constraint violations as
        `ConstraintViolation` (chained), so callers never need the driver's exceptions."""
        try:
            yield
        except sa.exc.IntegrityError as exc:
            raise ConstraintViolation(f"constraint violated: {type(exc.orig).__name__}") from exc
        except sa.exc.DBAPIError as exc:
            if is_refusal(exc):
                raise DatabaseRefused(f"the database refused: {driver_reason(exc)}") from exc
            if _is_transient(exc, self.dialect_name):
                raise DatabaseUnavailable(f"database unreachable: {driver_reason(exc)}") from exc
            if _is_missing_table(exc):
                raise SchemaMissing("the database has no such table") from exc
            raise
        except sa.exc.TimeoutError as exc:
            raise DatabaseUnavailable("database connection pool exhausted") from exc

    @contextmanager
    def write(
        self, conn: sa.Connection | None = None, *, on: sa.Connection | None = None
    ) -> Iterator[sa.Connection]:
        """A write transaction (BEGIN IMMEDIATE on SQLite), committed on normal exit.

        With `conn`, run inside the caller's transaction instead: nothing is committed here.
        With `on` (a `session()`), a transaction of its own on that connection.
        """
        if conn is not None:
            with self.translate_errors():
                yield conn
            return
        if on is not None:
            with self.translate_errors(), on.begin():
                yield on
            return
        with self.translate_errors(), self.engine.begin() as own:
            yield own

    @contextmanager
    def session(self) -> Iterator[sa.Connection]:
        """One connection for a series of transactions (`write(on=...)`), such as a group's
        creation. On SQLite it leaves the WAL's checkpoints to `checkpoint`: a commit that
        checkpoints runs on after the write lock is released, so a clock around a transaction
        would count the checkpoint as time the lock was held (and the caller, knowing better,
        runs it in the gap it leaves other writers anyway)."""
        with self.translate_errors(), self.engine.connect() as conn:
            if self.dialect_name != "sqlite":
                yield conn
                return
            # The driver's own connection, outside any transaction (a PRAGMA needs none).
            raw: Any = conn.connection.dbapi_connection
            (pages,) = raw.execute(f"PRAGMA {SQLITE_AUTOCHECKPOINT}").fetchone()
            raw.execute(f"PRAGMA {SQLITE_AUTOCHECKPOINT}=0")
            try:
                yield conn
            finally:
                # The connection goes back to the pool as it came (a broken one is discarded).
                with contextlib.suppress(Exception):
                    raw.execute(f"PRAGMA {SQLITE_AUTOCHECKPOINT}={int(pages)}")

    def checkpoint(self, session: sa.Connection) -> None:
        """SQLite: copy the WAL's committed pages into the database (a passive checkpoint,
        which writers do not wait for), on a `session()` between its transactions; elsewhere
        nothing."""
        if self.dialect_name == "sqlite":
            with self.translate_errors():
                session.connection.dbapi_connection.execute(SQLITE_CHECKPOINT)  # type: ignore[union-attr]

    @contextmanager
    def single(self, conn: sa.Connection | None = None) -> Iterator[sa.Connection]:
        """A connection for ONE atomic statement: PostgreSQL autocommit (no BEGIN/COMMIT round
        trips), SQLite a write transaction; with `conn`, the caller's transaction."""
        if conn is not None or self.dialect_name != "postgresql":
            with self.write(conn) as c:
                yield c
            return
        with self.translate_errors(), self.engine.connect() as own:
            own.execution_options(isolation_level="AUTOCOMMIT")
            yield own

    @contextmanager
    def read_one(self) -> Iterator[sa.Connection]:
        """A connection for ONE read statement, which sees one snapshot by itself: PostgreSQL
        autocommit (no BEGIN/COMMIT round trips), SQLite a read transaction."""
        if self.dialect_name != "postgresql":
            with self.read() as c:
                yield c
            return
        with self.translate_errors(), self.engine.connect() as own:
            own.execution_options(isolation_level="AUTOCOMMIT")
            yield own

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A read-only transaction (a plain deferred BEGIN on SQLite)."""
        with self.translate_errors(), self.engine.connect() as conn:
            conn.execution_options(**{READ_ONLY_OPTION: True})
            with conn.begin():
                yield conn

    def rows(
        self, conn: sa.Connection, stmt: Executable, params: dict[str, Any] | None = None
    ) -> Sequence[sa.Row[Any]]:
        """Execute (with bound `params`) and fetch every row."""
        with self.translate_errors():
            return conn.execute(stmt, params).all()

    def fetch(
        self, conn: sa.Connection, stmt: Executable, params: dict[str, Any] | None = None
    ) -> Sequence[sa.Row[Any]]:
        """`rows` for the statements run per item (a claim, a heartbeat, a move with its log),
        on the driver's own cursor: the statement is compiled once, and an execution costs the
        driver's work and little more (SQLAlchemy's execution and result machinery cost more
        than the driver on these short statements). The rows are named tuples with the same
        attributes. `stmt` must be built once (a cached builder's): it is remembered.

        Only on psycopg, for a statement whose result columns need no conversion and with no
        list parameter expanded at execution, and while nobody watches the engine's statements
        (`echo`, cursor or error listeners); anything else goes through `rows`. Errors are
        SQLAlchemy's (then translated as everywhere): a lost connection is invalidated and the
        whole pool marked stale, as SQLAlchemy does, so the next call reconnects.
        """
        compiled = self._for_driver(stmt)
        if compiled is None or self._watched():
            return self.rows(conn, stmt, params)
        values = dict(compiled.constants)
        for name, value in (params or {}).items():
            process = compiled.processors.get(name)
            values[name] = value if process is None else process(value)
        with self.translate_errors():
            raw: Any = conn.connection.dbapi_connection
            try:
                with raw.cursor() as cursor:
                    cursor.execute(compiled.sql, values)
                    fetched = cursor.fetchall()
                    if compiled.row is None:
                        names = [column.name for column in cursor.description]
                        compiled.row = namedtuple("Row", names)  # type: ignore[misc]
            except self.engine.dialect.loaded_dbapi.Error as exc:
                raise self._driver_error(conn, raw, exc, compiled.sql, values) from exc
        make = compiled.row._make
        return cast(Sequence[sa.Row[Any]], [make(row) for row in fetched])

    def _watched(self) -> bool:
        """Whether someone watches this engine's statements (`echo`, or cursor listeners, as
        a test or an application may install): then they all go through SQLAlchemy, which
        reports them."""
        dispatch = self.engine.dispatch
        return bool(
            self.engine.echo
            or dispatch.before_cursor_execute
            or dispatch.after_cursor_execute
            or self.engine.dialect.dispatch.handle_error
        )

    def _for_driver(self, stmt: Executable) -> _DriverStatement | None:
        """`stmt` compiled for `fetch`, or None when it must go through SQLAlchemy."""
        cache = self._driver
        if cache is None:
            return None
        try:
            return cache[stmt]
        except KeyError:
            pass
        prepared = _compiled_for_driver(stmt, self.engine.dialect)
        with self._driver_lock:
            if len(cache) >= DRIVER_STATEMENTS_MAX:
                cache.clear()
            cache[stmt] = prepared
        return prepared

    def _driver_error(
        self, conn: sa.Connection, raw: Any, exc: Any, sql: str, values: dict[str, Any]
    ) -> sa.exc.StatementError:
        """A driver error as SQLAlchemy raises it; after a lost connection, that connection is
        invalidated and so is the whole pool, as SQLAlchemy does on a disconnect: every
        connection made before now (they died with the server) is closed and replaced at its
        next checkout, or closed when the engine is disposed."""
        dialect = self.engine.dialect
        lost = bool(dialect.is_disconnect(exc, raw, None))
        if lost:
            # Not `engine.dispose()`: the connections other threads have checked out would go
            # back into the discarded pool, which nobody disposes, and stay open until the
            # garbage collector finds them. SQLAlchemy's own handling of a disconnect calls
            # this (no public method marks a pool's connections stale).
            self.engine.pool._invalidate(conn.connection, exc, _checkin=False)
            conn.invalidate(exc)
        dbapi_error = dialect.loaded_dbapi.Error
        wrapped: sa.exc.StatementError = sa.exc.DBAPIError.instance(
            sql, values, exc, dbapi_error, connection_invalidated=lost, dialect=dialect
        )
        return wrapped

    def one(
        self, conn: sa.Connection, stmt: Executable, params: dict[str, Any] | None = None
    ) -> sa.Row[Any] | None:
        """Execute (with bound `params`) and fetch the first row, if any."""
        with self.translate_errors():
            return conn.execute(stmt, params).first()

    def scalar(self, conn: sa.Connection, stmt: Executable) -> Any:
        """Execute and fetch the first column of the first row (None when no row)."""
        with self.translate_errors():
            return conn.execute(stmt).scalar()

    def rowcount(
        self, conn: sa.Connection, stmt: Executable, params: dict[str, Any] | None = None
    ) -> int:
        """Execute (with bound `params`) and return the number of rows matched."""
        with self.translate_errors():
            return int(conn.execute(stmt, params).rowcount)

    def execute_many(
        self, conn: sa.Connection, stmt: Executable, params: Sequence[dict[str, Any]]
    ) -> None:
        """Execute once per parameter set (batched by the driver); nothing when empty."""
        if not params:
            return
        with self.translate_errors():
            conn.execute(stmt, list(params))

    def can_copy(self, conn: sa.Connection) -> bool:
        """Whether `conn` runs on psycopg 3, whose cursors can COPY (PostgreSQL's bulk load)."""
        raw: Any = conn.connection.dbapi_connection
        return hasattr(getattr(raw, "cursor_factory", None), "copy")

    def copy_text(self, conn: sa.Connection, statement: str, blocks: Iterable[str]) -> None:
        """Run `statement` (a `COPY ... FROM STDIN` in text format) in `conn`'s transaction,
        sending each block of lines as it is produced: the server parses and inserts one block
        while the next is formatted. Only where `can_copy`."""
        with self.translate_errors():
            # The raw driver connection is the one `conn` runs on: the rows join its transaction.
            raw: Any = conn.connection.dbapi_connection
            try:
                with raw.cursor() as cursor, cursor.copy(statement) as copy:
                    for block in blocks:
                        copy.write(block)
            except self.engine.dialect.loaded_dbapi.Error as exc:
                # The driver's own error, as SQLAlchemy would have raised it: translated above.
                raise self._driver_error(conn, raw, exc, statement, {}) from exc

    @contextmanager
    def listening(self, statement: str) -> Iterator[Any]:
        """A driver connection of its own (outside the pool, autocommit) that has run the
        `LISTEN` `statement`; closed on exit. Only on psycopg, whose connections yield
        notifications (`notifies()`); its errors while waiting are the driver's (`psycopg`),
        for the listener to treat as a lost connection."""
        with self.translate_errors():
            pooled = self.engine.raw_connection()
            pooled.detach()  # a listening connection is never handed to anyone else
            raw: Any = pooled.dbapi_connection
            try:
                raw.autocommit = True
                raw.execute(statement)
            except BaseException:
                raw.close()
                raise
        try:
            yield raw
        finally:
            with contextlib.suppress(Exception):
                raw.close()

    def execute(
        self, conn: sa.Connection, stmt: Executable, params: dict[str, Any] | None = None
    ) -> None:
        """Execute a statement (with bound `params`) whose result is not needed."""
        with self.translate_errors():
            conn.execute(stmt, params)


def _compiled_for_driver(stmt: Executable, dialect: sa.Dialect) -> _DriverStatement | None:
    """`stmt` compiled once for the driver's cursor: None when a result column needs converting
    or a list parameter is expanded at each execution (SQLAlchemy must run it then)."""
    if not isinstance(stmt, ClauseElement):
        return None
    compiled = stmt.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler):
        return None
    sql = str(compiled)
    returned: Iterable[Any] = (
        getattr(stmt, "selected_columns", None) or getattr(stmt, "exported_columns", None) or ()
    )
    if "POSTCOMPILE" in sql or any(
        c.type.dialect_impl(dialect).result_processor(dialect, None) is not None for c in returned
    ):
        return None
    binds = {compiled.bind_names[b]: b for b in compiled.binds.values()}
    processors = {
        name: process
        for name, b in binds.items()
        if (process := b.type.dialect_impl(dialect).bind_processor(dialect)) is not None
    }
    constants = {}
    for name, b in binds.items():
        if not b.required:
            process = processors.get(name)
            value = b.effective_value
            constants[name] = value if process is None else process(value)
    return _DriverStatement(sql, constants, processors)

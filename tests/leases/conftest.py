"""Fixtures for the lease engine tests: a migrated engine per test on SQLite and PostgreSQL.

Time is moved by rewriting timestamps in SQL (`expire_leases`, `expire_deadline`, `make_due`),
never by sleeping through a lease.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa

from leases import LeaseManager, NewItem, make_engine, upgrade

# Far enough in the past that every comparison with the database clock sees it as expired.
LONG_AGO_MS = 1


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    """A migrated engine on a fresh database (SQLite file or PostgreSQL database)."""
    eng = make_engine(database_url)
    upgrade(eng)
    yield eng
    eng.dispose()


ManagerFactory = Callable[..., LeaseManager]


@pytest.fixture
def make_manager(engine: sa.Engine) -> ManagerFactory:
    """Build managers on the test engine; tests pass short leases and backoffs."""

    def build(**kw: float) -> LeaseManager:
        kw.setdefault("lease_seconds", 30.0)
        kw.setdefault("retry_backoff_seconds", 0.001)
        kw.setdefault("retry_backoff_max_seconds", 0.001)
        return LeaseManager(engine, **kw)  # type: ignore[arg-type]

    return build


@pytest.fixture
def manager(make_manager: ManagerFactory) -> LeaseManager:
    """A manager with a 30 s lease and near-zero retry backoff."""
    return make_manager()


def new_group(
    manager: LeaseManager,
    n: int,
    *,
    max_attempts: int = 3,
    deadline_seconds: float = 3600.0,
) -> tuple[str, list[str]]:
    """Create a group of `n` items; return its id and the item ids in seq order."""
    group_id = str(uuid.uuid4())
    ids = [str(uuid.uuid4()) for _ in range(n)]
    manager.create_group(
        group_id,
        deadline_seconds=deadline_seconds,
        max_attempts=max_attempts,
        items=[NewItem(item_id, {"ref": f"ref-{i}"}) for i, item_id in enumerate(ids)],
    )
    return group_id, ids


def expire_leases(engine: sa.Engine, item_ids: Sequence[str] | None = None) -> None:
    """Make the given (or all) in-progress leases expired, as if time had passed."""
    stmt = "UPDATE lease_items SET lease_expires_at = :t WHERE state = 'in_progress'"
    params: dict[str, object] = {"t": LONG_AGO_MS}
    with engine.begin() as conn:
        if item_ids is None:
            conn.execute(sa.text(stmt), params)
        else:
            for item_id in item_ids:
                conn.execute(sa.text(stmt + " AND id = :id"), {**params, "id": item_id})


def expire_deadline(engine: sa.Engine, group_id: str) -> None:
    """Move a group's deadline into the past."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_groups SET deadline_at = :t WHERE id = :g"),
            {"t": LONG_AGO_MS, "g": group_id},
        )


def make_due(engine: sa.Engine) -> None:
    """Make every retryable item due now."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_items SET next_attempt_at = :t WHERE state = 'retryable'"),
            {"t": LONG_AGO_MS},
        )


def age_attempts(engine: sa.Engine, seconds: float) -> None:
    """Pretend every in-progress attempt started `seconds` earlier."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE lease_items SET attempt_started_at = attempt_started_at - :ms "
                "WHERE state = 'in_progress'"
            ),
            {"ms": int(seconds * 1000)},
        )


def duplicate_claims(engine: sa.Engine) -> list[tuple[str, int, int]]:
    """(item, attempt, n) for every attempt claimed more than once, from the event log."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT item_id, attempt, count(*) FROM lease_events "
                "WHERE to_state = 'in_progress' GROUP BY item_id, attempt HAVING count(*) > 1"
            )
        ).all()
    return [(r[0], r[1], r[2]) for r in rows]


def event_count(engine: sa.Engine, to_state: str) -> int:
    """The number of events into `to_state`."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT count(*) FROM lease_events WHERE to_state = :s"), {"s": to_state}
            ).scalar_one()
        )


# A moment well inside the range every dialect converts exactly (2023-11-14T22:13:20Z).
FROZEN_EPOCH_MS = 1_700_000_000_000
JULIAN_DAY_OF_EPOCH = 2440587.5
MS_PER_DAY = 86_400_000.0


class FrozenClock:
    """The database clock of one engine, held at a moment the test chooses (epoch ms).

    Statements read time only through `leases.sqlfuncs.db_now_ms`, which calls
    `statement_timestamp()` on PostgreSQL and `julianday('now')` on SQLite; both are shadowed
    here on every new connection (a function of the same name earlier on PostgreSQL's
    `search_path`; an application-defined SQLite function), so a test can put "now" exactly on
    a boundary instead of sleeping near it.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.ms = FROZEN_EPOCH_MS
        if engine.dialect.name == "postgresql":
            with engine.begin() as conn:
                conn.execute(sa.text("CREATE SCHEMA test_clock"))
                conn.execute(sa.text("CREATE TABLE test_clock.frozen (ms BIGINT NOT NULL)"))
                conn.execute(sa.text("INSERT INTO test_clock.frozen VALUES (:ms)"), {"ms": self.ms})
                conn.execute(
                    sa.text(
                        "CREATE FUNCTION test_clock.statement_timestamp() RETURNS timestamptz "
                        "LANGUAGE sql STABLE AS "
                        "$$ SELECT to_timestamp(ms / 1000.0) FROM test_clock.frozen $$"
                    )
                )
        sa.event.listen(engine, "connect", self._on_connect)
        engine.dispose()  # pooled connections predate the listener

    def _on_connect(self, dbapi_conn: Any, record: Any) -> None:
        if self.engine.dialect.name == "postgresql":
            # Outside a transaction, so that the pool's rollback on check-in cannot undo it.
            autocommit = dbapi_conn.autocommit
            dbapi_conn.autocommit = True
            dbapi_conn.execute("SET search_path = test_clock, public, pg_catalog")
            dbapi_conn.autocommit = autocommit
        else:
            dbapi_conn.create_function("julianday", 1, self._julianday)

    def _julianday(self, argument: str) -> float | None:
        if argument != "now":
            return None
        return JULIAN_DAY_OF_EPOCH + self.ms / MS_PER_DAY

    def set(self, ms: int) -> None:
        """Hold the clock at `ms` (epoch milliseconds) from the next statement on."""
        self.ms = ms
        if self.engine.dialect.name == "postgresql":
            with self.engine.begin() as conn:
                conn.execute(sa.text("UPDATE test_clock.frozen SET ms = :ms"), {"ms": ms})


@pytest.fixture
def clock(engine: sa.Engine) -> FrozenClock:
    """The test engine's database clock, frozen at `FROZEN_EPOCH_MS` until moved with `set`."""
    return FrozenClock(engine)


def set_column(engine: sa.Engine, table: str, column: str, ms: int, **where: str) -> None:
    """Write a time column (epoch ms) of the rows matching `where` (column = value, ANDed)."""
    condition = " AND ".join(f"{name} = :{name}" for name in where) or "1 = 1"
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE {table} SET {column} = :ms WHERE {condition}"), {"ms": ms, **where}
        )

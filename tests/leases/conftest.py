"""Fixtures for the lease engine tests: a migrated engine per test on SQLite and PostgreSQL.

Time is moved by rewriting timestamps in SQL (`expire_leases`, `expire_deadline`, `make_due`),
never by sleeping through a lease.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence

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
    with manager.transaction() as conn:
        manager.create_group(
            conn,
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

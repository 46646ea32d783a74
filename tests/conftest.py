"""Shared fixtures: real SQLite and real PostgreSQL databases, one fresh database per test.

PostgreSQL tests skip only when PostgreSQL is absent *and* `CI` is unset; under `CI` a missing
server fails the run, so the PostgreSQL half of the suite can never vanish silently.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from leases import group_queries, pgqueries, queries
from tests.services import postgres

# moto_s3, rgw, rgw_bucket for every suite; make_app, app, store, run_batch for the subsystems
# tests (the API and page suites override make_app with their own source roots).
pytest_plugins = ["tests.s3_fixtures", "tests.app_fixtures"]

IN_CI = bool(os.environ.get("CI"))


def _admin_url() -> str:
    explicit = os.environ.get("BATCHCROP_TEST_POSTGRES_URL")
    if explicit:
        return explicit
    try:
        return postgres.ensure()
    except (postgres.PostgresUnavailableError, OSError, RuntimeError) as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI: {exc}")
        pytest.skip(f"PostgreSQL not available: {exc}")


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """URL of a PostgreSQL server the tests may create databases on."""
    return _admin_url()


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    name = f"bc_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(postgres_admin_url).set(database=name)
    yield url.render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite database file for one test."""
    return f"sqlite:///{tmp_path / 'batchcrop.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(autouse=True)
def fresh_statement_caches() -> None:
    """Each test builds the lease engine's statements anew (their builders are cached per
    process): a test then exercises the builders' code itself, and mutation testing, which maps
    each function to the tests that run it, sees every test that depends on a builder."""
    for module in (queries, pgqueries, group_queries):
        for value in vars(module).values():
            cache_clear = getattr(value, "cache_clear", None)
            if callable(cache_clear):
                cache_clear()

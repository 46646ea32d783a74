"""Fixtures for the chaos tests: the RGW fixture and PostgreSQL binaries, required under CI."""

from __future__ import annotations

import os

import pytest

from tests.s3_fixtures import rgw  # noqa: F401 -- re-exported fixture
from tests.services import postgres

IN_CI = bool(os.environ.get("CI"))


@pytest.fixture(scope="session")
def postgres_binaries() -> None:
    """initdb and pg_ctl are installed (a private cluster is started from them)."""
    try:
        postgres._bin_dir()
    except postgres.PostgresUnavailableError as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI: {exc}")
        pytest.skip(f"PostgreSQL not available: {exc}")

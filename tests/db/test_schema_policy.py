"""Migrations are a deploy step (docs/adr/0015): `db current` / `db check` report where the
schema stands; `worker` and `serve` never migrate unless told (`--migrate`) and refuse a schema
behind them at once (exit 3 naming `batchcrop db upgrade`); `run` and `submit` migrate SQLite
themselves and only create an empty PostgreSQL database's tables. SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.db import migrations
from leases import make_engine
from leases.migrate import head as leases_head
from tests.cli.test_cli import Cli, cli, wait_for
from tests.images import write_photos

__all__ = ["cli"]  # fixture

pytestmark = pytest.mark.slow
APP_HEAD = migrations.revisions()[0]
APP_PREVIOUS = migrations.revisions()[1]
FAST_SECONDS = 20.0


@pytest.fixture
def engine(cli: Cli) -> Iterator[sa.Engine]:
    """An engine on the CLI's database, for moving its schema behind or ahead."""
    eng = make_engine(cli.env["BATCHCROP_DATABASE_URL"])
    yield eng
    eng.dispose()


def _one_line(result: object, code: int, needle: str) -> None:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == code, stderr  # type: ignore[attr-defined]
    assert needle in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert "Traceback" not in stderr


def test_db_current_and_check_on_an_empty_then_upgraded_database(cli: Cli) -> None:
    """Empty: both histories `missing`, exit 1, `db check` says to run `db upgrade`. After the
    upgrade: both at head, exit 0."""
    cli.create_empty_database()
    current = cli("db", "current")
    assert current.returncode == 1, current.stderr
    assert [line.split()[-1] for line in current.stdout.splitlines()] == ["missing", "missing"]
    _one_line(cli("db", "check"), 1, "run `batchcrop db upgrade`")

    assert cli("db", "upgrade").returncode == 0
    current = cli("db", "current")
    assert current.returncode == 0, current.stderr
    rows = [line.split() for line in current.stdout.splitlines()]
    assert rows == [
        ["leases", "current", leases_head(), "head", leases_head(), "at", "head"],
        ["batchcrop", "current", APP_HEAD, "head", APP_HEAD, "at", "head"],
    ]
    check = cli("db", "check")
    assert (check.returncode, check.stderr) == (0, "")
    assert "at head" in check.stdout


def test_worker_and_serve_refuse_an_older_schema_until_db_upgrade(
    cli: Cli, engine: sa.Engine, tmp_path: Path
) -> None:
    """The application history one revision behind (the previous version's schema):
    `db current`/`db check` exit 1 naming it; `worker` and `serve` exit 3 at once with one line
    naming `batchcrop db upgrade`, and migrate nothing; after `db upgrade` the worker starts."""
    assert cli("db", "upgrade").returncode == 0
    migrations.downgrade(engine, APP_PREVIOUS)

    current = cli("db", "current")
    assert current.returncode == 1
    assert f"batchcrop  current {APP_PREVIOUS}" in current.stdout
    assert current.stdout.splitlines()[1].endswith("behind")
    _one_line(cli("db", "check"), 1, f"batchcrop {APP_PREVIOUS} (head {APP_HEAD})")

    for command in (("worker",), ("serve", "--port", "0")):
        started = time.monotonic()
        result = cli(*command, timeout=FAST_SECONDS * 2)
        assert time.monotonic() - started < FAST_SECONDS
        _one_line(result, 3, "run `batchcrop db upgrade`")
        assert f"batchcrop {APP_PREVIOUS} (head {APP_HEAD})" in result.stderr
    assert migrations.current(engine) == APP_PREVIOUS  # nobody migrated behind our back

    assert cli("db", "upgrade").returncode == 0
    worker = cli.spawn("worker", "--concurrency", "1")
    try:
        wait_for(lambda: "worker_started" in cli.log_of(worker), "the worker to start")
    finally:
        worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_worker_migrate_flag_upgrades_at_start(cli: Cli, engine: sa.Engine) -> None:
    """`worker --migrate` (one-machine deployments) brings an older schema to head itself."""
    assert cli("db", "upgrade").returncode == 0
    migrations.downgrade(engine, APP_PREVIOUS)
    worker = cli.spawn("worker", "--migrate", "--concurrency", "1")
    try:
        wait_for(lambda: "worker_started" in cli.log_of(worker), "the worker to start")
    finally:
        worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert migrations.current(engine) == APP_HEAD


def test_a_newer_schema_is_accepted_with_a_warning(cli: Cli, engine: sa.Engine) -> None:
    """Rolling deploy: the new version ran `db upgrade`; an old worker restarting on the newer
    schema starts (logging `schema_newer_than_code`) while `db check` says it is not at head."""
    assert cli("db", "upgrade").returncode == 0
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE batchcrop_alembic_version SET version_num = 'f00d'"))
    _one_line(cli("db", "check"), 1, "newer than this batchcrop (batchcrop f00d")
    worker = cli.spawn("worker", "--concurrency", "1")
    try:
        wait_for(lambda: "worker_started" in cli.log_of(worker), "the worker to start")
    finally:
        worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert "schema_newer_than_code" in cli.log_of(worker)


def test_submit_migrates_sqlite_but_only_checks_an_older_postgresql_schema(
    cli: Cli, engine: sa.Engine, tmp_path: Path
) -> None:
    """On an empty database `submit` creates the tables (both databases: the quickstart and a
    first deploy). Behind: SQLite (one machine's database) is migrated by `submit` itself;
    PostgreSQL is left alone and `submit` exits 3 naming `batchcrop db upgrade`."""
    write_photos(tmp_path / "src", 1)
    first = cli("submit", str(tmp_path / "src"))
    assert first.returncode == 0, first.stderr
    migrations.downgrade(engine, APP_PREVIOUS)
    again = cli("submit", str(tmp_path / "src"), "--label", "again")
    if engine.dialect.name == "sqlite":
        assert again.returncode == 0, again.stderr
        assert migrations.current(engine) == APP_HEAD
    else:
        _one_line(again, 3, "run `batchcrop db upgrade`")
        assert migrations.current(engine) == APP_PREVIOUS

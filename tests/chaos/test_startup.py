"""A worker started during a database outage waits it out instead of exiting (regression)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.app import build
from batchcrop.cli.startup import wait_until_ready
from batchcrop.settings import Settings
from leases import DatabaseUnavailable
from tests.chaos import corpus
from tests.services.proxy import FaultProxy

OUTAGE_SECONDS = 4.0
WAIT_SECONDS = 60.0


@pytest.fixture
def proxied_postgres(postgres_url: str) -> Iterator[tuple[str, FaultProxy]]:
    """This test's PostgreSQL database reached through a fault proxy: (proxied URL, proxy)."""
    url = sa.make_url(postgres_url)
    proxy = FaultProxy(url.host or "127.0.0.1", url.port or 5432, http=False).start()
    yield url.set(port=proxy.port).render_as_string(hide_password=False), proxy
    proxy.stop()


def _spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "batchcrop", "worker", "--concurrency", "1"],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.slow
@pytest.mark.postgres
def test_worker_started_in_an_outage_waits_then_works(
    proxied_postgres: tuple[str, FaultProxy], postgres_url: str, tmp_path: Path
) -> None:
    """Database refused at start: the worker waits, then processes the batch and exits 0."""
    proxied_url, proxy = proxied_postgres
    (tmp_path / "a.jpg").write_bytes(corpus.clean_jpeg(1))
    app = build(Settings(database_url=postgres_url, store=f"file://{tmp_path / 'out'}"))
    env = {**os.environ, "BATCHCROP_DATABASE_URL": proxied_url}
    env["BATCHCROP_STORE"] = f"file://{tmp_path / 'out'}"
    submitted = subprocess.run(
        [sys.executable, "-m", "batchcrop", "submit", str(tmp_path / "a.jpg")],
        env={**env, "BATCHCROP_DATABASE_URL": postgres_url},
        capture_output=True,
        text=True,
        check=True,
    )
    batch = submitted.stdout.strip()
    proxy.outage(OUTAGE_SECONDS)
    worker = _spawn(env, tmp_path / "worker.log")
    try:
        time.sleep(OUTAGE_SECONDS / 2)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        deadline = time.monotonic() + WAIT_SECONDS
        while app.batches.status(batch)["state"] != "succeeded":
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
        app.close()
    assert code == 0
    assert "waiting_for_backends" in (tmp_path / "worker.log").read_text()


@pytest.mark.slow
@pytest.mark.postgres
def test_sigterm_while_waiting_exits_0(
    proxied_postgres: tuple[str, FaultProxy], tmp_path: Path
) -> None:
    """A worker stopped while it waits for the database exits 0 at once (it held nothing)."""
    proxied_url, proxy = proxied_postgres
    proxy.outage(WAIT_SECONDS)
    env = {**os.environ, "BATCHCROP_DATABASE_URL": proxied_url}
    env["BATCHCROP_STORE"] = f"file://{tmp_path / 'out'}"
    worker = _spawn(env, tmp_path / "worker.log")
    deadline = time.monotonic() + WAIT_SECONDS
    while b"waiting_for_backends" not in (tmp_path / "worker.log").read_bytes():
        assert time.monotonic() < deadline
        assert worker.poll() is None
        time.sleep(0.1)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def test_waiting_gives_up_with_the_last_error(tmp_path: Path) -> None:
    """A database that never answers is reported (DatabaseUnavailable) once the wait is over."""
    url = "postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=1"
    app = build(Settings(database_url=url, store=f"file://{tmp_path / 'out'}"))
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable):
        wait_until_ready(app, threading.Event(), wait_seconds=1.0)
    assert time.monotonic() - started < 10
    app.close()

"""Idle workers are woken by notifications on PostgreSQL, fall back to polling when one is lost,
and poll on SQLite (docs/design.md §3, wake-ups)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.worker.worker import Worker, WorkerOptions
from leases import TERMINAL, Wakeups, make_engine
from storage import LocalStore
from tests.app_fixtures import run_batch
from tests.images import write_photos
from tests.receiver import SECRET, receiving

LONG_SECONDS = 120.0
"""A poll interval no test waits out: an item claimed sooner was claimed because of a wake-up."""
CLAIMED_WITHIN_SECONDS = 15.0
SETTLE_SECONDS = 1.0
"""Long enough for every idle slot to have looked once and begun its wait."""


def _request(paths: list[Path]) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p), ref=p.stem) for p in paths),
        spec=RenderSpec(ratios=(Ratio.parse("1:1"),), max_side=200, quality=80),
        deadline_seconds=3600,
        max_attempts=3,
    )


@pytest.fixture
def quiet_database_url(postgres_admin_url: str) -> Iterator[str]:
    """Another empty PostgreSQL database: a listener there is connected but never notified."""
    name = f"bc_quiet_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield sa.make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _idle_worker(app: App, tmp_path: Path, **options: float) -> Worker:
    worker = app.worker(
        LocalStore(tmp_path / "store"),
        WorkerOptions(concurrency=2, reaper_interval_seconds=LONG_SECONDS, **options),
        deliver=False,
    )
    worker.start()
    return worker


def _seconds_to_finish(app: App, tmp_path: Path) -> float:
    """Submit one photo to the idle worker; how long until its batch ended."""
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1)))
    started = time.monotonic()
    while time.monotonic() - started < CLAIMED_WITHIN_SECONDS:
        if app.batches.status(status["id"])["state"] in TERMINAL:
            assert app.batches.status(status["id"])["state"] == "succeeded"
            return time.monotonic() - started
        time.sleep(0.05)
    pytest.fail(f"the idle worker did not take the new batch within {CLAIMED_WITHIN_SECONDS} s")


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_an_idle_worker_is_woken_by_a_new_batch_on_postgresql(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """With both polls far off, a new batch is still taken at once: its seal notified."""
    app = make_app()
    worker = _idle_worker(
        app, tmp_path, idle_sleep_seconds=LONG_SECONDS, fallback_poll_seconds=LONG_SECONDS
    )
    try:
        assert app.wakeups.wait_connected(CLAIMED_WITHIN_SECONDS)
        time.sleep(SETTLE_SECONDS)
        assert _seconds_to_finish(app, tmp_path) < CLAIMED_WITHIN_SECONDS
    finally:
        worker.stop()
        assert worker.join(10)  # stop() wakes the idle slots: no poll is waited out


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_lost_notification_is_made_up_by_the_fallback_poll(
    make_app: Callable[..., App], tmp_path: Path, quiet_database_url: str
) -> None:
    """A worker whose listener hears nothing (it listens on another database) still takes the
    new batch at its fallback poll."""
    app = make_app()
    quiet = make_engine(quiet_database_url)
    app._wakeups = Wakeups(quiet)  # connected, and never notified
    worker = _idle_worker(app, tmp_path, idle_sleep_seconds=LONG_SECONDS, fallback_poll_seconds=1.0)
    try:
        assert app.wakeups.wait_connected(CLAIMED_WITHIN_SECONDS)
        time.sleep(SETTLE_SECONDS)
        assert _seconds_to_finish(app, tmp_path) < CLAIMED_WITHIN_SECONDS
        assert app.wakeups.received == 0
    finally:
        worker.stop()
        worker.join(10)
        assert app.wakeups.stop()
        quiet.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_idle_worker_polls_on_sqlite(make_app: Callable[..., App], tmp_path: Path) -> None:
    """SQLite has no notifications: the idle poll (not the far fallback) finds the batch."""
    app = make_app()
    assert not app.wakeups.listening
    worker = _idle_worker(app, tmp_path, idle_sleep_seconds=0.5, fallback_poll_seconds=LONG_SECONDS)
    try:
        time.sleep(SETTLE_SECONDS)
        assert _seconds_to_finish(app, tmp_path) < CLAIMED_WITHIN_SECONDS
    finally:
        worker.stop()
        worker.join(10)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_deliverer_is_woken_when_a_batch_ends_on_postgresql(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """A callback deliverer polling only every 120 s delivers a batch's callback at once: the
    outbox group written by the batch's last commit announced it."""
    app = make_app(
        callback_secret=SECRET,
        callback_hosts=("127.0.0.1:*",),
        idle_poll_seconds=LONG_SECONDS,
        fallback_poll_seconds=LONG_SECONDS,
    )
    deliverer = app.deliverer("test-deliverer")
    assert deliverer is not None
    with receiving() as receiver:
        deliverer.start()
        try:
            assert app.wakeups.wait_connected(CLAIMED_WITHIN_SECONDS)
            time.sleep(SETTLE_SECONDS)
            sources = write_photos(tmp_path / "src", 1)
            request = dataclasses.replace(_request(sources), callback_url=receiver.url)
            status, _ = app.batches.submit(request)
            assert run_batch(app, LocalStore(tmp_path / "store"), status["id"])["state"] == (
                "succeeded"
            )
            ended = time.monotonic()
            receiver.wait_processed(1, timeout=CLAIMED_WITHIN_SECONDS)
            assert time.monotonic() - ended < CLAIMED_WITHIN_SECONDS
        finally:
            deliverer.stop()
            deliverer.join(10)
    assert not deliverer.is_alive()  # stop() woke it: no poll was waited out


def _backends(admin_url: str, database: str) -> list[str]:
    """The last statement of every other session connected to `database` (pg_stat_activity)."""
    admin = sa.create_engine(admin_url)
    try:
        with admin.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT query FROM pg_stat_activity"
                    " WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": database},
            )
            return [row.query for row in rows]
    finally:
        admin.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_stopping_the_listener_closes_its_connection(
    make_app: Callable[..., App], postgres_admin_url: str
) -> None:
    """`stop()` returns once the listening connection is closed, not a tick later."""
    app = make_app()
    app.wakeups.start()
    assert app.wakeups.wait_connected(CLAIMED_WITHIN_SECONDS)
    database = str(app.engine.url.database)
    assert any(q.startswith("LISTEN") for q in _backends(postgres_admin_url, database))

    assert app.wakeups.stop()

    assert not any(q.startswith("LISTEN") for q in _backends(postgres_admin_url, database))


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_closed_app_leaves_no_connection_open(
    make_app: Callable[..., App], tmp_path: Path, postgres_admin_url: str
) -> None:
    """After a worker ran a batch (slots, heartbeats, deliverer, listener) and was joined, closing
    the app leaves no session on the database: nothing is left for the garbage collector."""
    app = make_app(lease_seconds=0.3)
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 2)))
    assert run_batch(app, LocalStore(tmp_path / "store"), status["id"])["state"] == "succeeded"

    app.close()

    assert _backends(postgres_admin_url, str(app.engine.url.database)) == []

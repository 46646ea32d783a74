"""Fixtures for the subsystems' tests: a wired app on each database, stores, a worker runner."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from batchcrop.app import App
from batchcrop.worker.worker import WorkerOptions
from leases import TERMINAL
from storage import LocalStore, ObjectStore
from tests.apps import app_factory

RUN_TIMEOUT_SECONDS = 90.0


@pytest.fixture
def make_app(
    database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., App]]:
    """Build apps on this test's database (every app shares it), upgraded, disposed after.

    Batches record the app's store and workers serve only their own store's batches, so the
    apps use the test's `store` when it has one, else the folder `LocalStore(tmp_path / "store")`
    opens.
    """
    if "store" in request.fixturenames:
        url = request.getfixturevalue("store").url
    else:
        url = f"file://{tmp_path / 'store'}"
    with app_factory(database_url=database_url, store=url) as make:
        yield make


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    """One wired app with default settings."""
    return make_app()


@pytest.fixture(params=["local", "moto", pytest.param("rgw", marks=pytest.mark.rgw)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """The derivative store: the local folder, moto in process, or a live Ceph RGW bucket."""
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    fixture = {"moto": "moto_s3", "rgw": "rgw_bucket"}[request.param]
    store: ObjectStore = request.getfixturevalue(fixture)
    return store


def run_batch(
    app: App, store: ObjectStore, batch_id: str, *, concurrency: int = 2, force: bool = False
) -> dict[str, Any]:
    """Run an in-process worker on one batch until it is terminal; return its status.
    `force`: the worker renders items whose outputs are all stored (`--force`)."""
    worker = app.worker(
        store,
        WorkerOptions(
            concurrency=concurrency,
            batch_ids=[batch_id],
            idle_sleep_seconds=0.05,
            reaper_interval_seconds=0.5,
            force_render=force,
        ),
    )
    worker.start()
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    try:
        while True:
            status = app.batches.status(batch_id)
            if status["state"] in TERMINAL:
                return status
            assert time.monotonic() < deadline, f"batch not terminal in time: {status}"
            time.sleep(0.05)
    finally:
        worker.stop()
        worker.join(30)

"""One value handed over once: a `BatchRequest` carries its idempotency key (or, resumable,
has the service derive `batchcrop run`'s), and a `WorkRequest` becomes a worker whose other
options come from the settings."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.app import App, WorkRequest
from batchcrop.batches.errors import NoSuchBatch
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.settings import IDLE_POLL_SECONDS
from storage import LocalStore
from tests.images import write_photos


def _request(paths: list[Path], *, resumable: bool = True) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p)) for p in paths),
        spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 200}),
        deadline_seconds=3600,
        max_attempts=2,
        resumable=resumable,
    )


def _stored_key(app: App, batch_id: str) -> str:
    with app.engine.connect() as conn:
        key = conn.execute(
            sa.text("SELECT idempotency_key FROM batchcrop_batches WHERE id = :b"), {"b": batch_id}
        ).scalar_one()
    return str(key)


def test_a_resumable_request_finds_its_batch_until_a_source_changes(
    app: App, tmp_path: Path
) -> None:
    """The same resumable request returns its batch; a source with another mtime makes a new
    one; the key is the one `batchcrop run` has always derived (fingerprint, store, each local
    source's size and mtime), so runs interrupted before an upgrade still resume."""
    paths = write_photos(tmp_path / "src", 2)
    first, created = app.batches.submit(_request(paths))
    again, created_again = app.batches.submit(_request(paths))
    assert (True, False, first["id"]) == (created, created_again, again["id"])

    digest = hashlib.sha256(_request(paths).fingerprint().encode())
    digest.update(LocalStore(tmp_path / "store").url.encode())
    for path in paths:
        stat = path.stat()
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    assert "run:" + digest.hexdigest() == _stored_key(app, first["id"])

    stat = paths[0].stat()
    os.utime(paths[0], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    changed, created_changed = app.batches.submit(_request(paths))
    assert created_changed
    assert changed["id"] != first["id"]


def test_a_request_is_not_plain_and_resumable_alike(tmp_path: Path) -> None:
    """A resumable request derives its key: one given as well is refused, not ignored."""
    with pytest.raises(ValueError, match="give no key"):
        BatchRequest(
            items=(ItemRequest(source=str(tmp_path / "a.jpg")),),
            spec=RenderSpec.from_input({"ratios": "1:1"}),
            deadline_seconds=60,
            max_attempts=1,
            idempotency_key="k",
            resumable=True,
        )


def test_a_work_request_becomes_a_worker_with_the_settings_options(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """`App.worker_for` resolves the batch id prefixes it is given and takes the reaper
    interval, the source size limit and the database's label from the app, the idle pause
    from the request or the worker's default."""
    app = make_app(reaper_interval_seconds=7.0, max_source_bytes=12_345)
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1), resumable=False))
    store = LocalStore(tmp_path / "store")

    worker = app.worker_for(
        store, WorkRequest(concurrency=3, batch_ids=[status["id"][:8]], idle_sleep_seconds=0.5)
    )
    options = worker.options
    assert (3, [status["id"]], 0.5) == (
        options.concurrency,
        options.batch_ids,
        options.idle_sleep_seconds,
    )
    assert (7.0, 12_345, app.database_label()) == (
        options.reaper_interval_seconds,
        options.max_source_bytes,
        options.database,
    )
    every = app.worker_for(store, WorkRequest(concurrency=1))
    assert (every.options.batch_ids, every.options.idle_sleep_seconds) == (None, IDLE_POLL_SECONDS)
    with pytest.raises(NoSuchBatch):
        app.worker_for(store, WorkRequest(concurrency=1, batch_ids=["ffffffff"]))

"""Sharing one fleet between batches, with real workers: pause and resume, and their races
with cancel, requeue, re-crop and the deadline; the per-store limit on concurrent attempts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from batchcrop.app import App, WorkRequest
from batchcrop.batches.fleet import worker_documents
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.recrop import recrop
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.worker.lanes import store_lane
from batchcrop.worker.worker import WorkerOptions
from leases import TERMINAL
from storage import LocalStore
from tests.app_fixtures import RUN_TIMEOUT_SECONDS, run_batch
from tests.images import write_photos

SPEC = {"ratios": "1:1", "max_side": 64}
IDLE_SECONDS = 0.05
PAUSED_WATCH_SECONDS = 0.6


def _submit(app: App, sources: list[Path], **fields: Any) -> str:
    request = BatchRequest(
        items=[ItemRequest(source=str(path)) for path in sources],
        spec=RenderSpec.from_input(SPEC),
        deadline_seconds=3600,
        max_attempts=1,
        **fields,
    )
    status, _ = app.batches.submit(request)
    return str(status["id"])


def _options(batch_id: str) -> WorkerOptions:
    return WorkerOptions(
        concurrency=2,
        batch_ids=[batch_id],
        idle_sleep_seconds=IDLE_SECONDS,
        reaper_interval_seconds=0.5,
    )


def _until_terminal(app: App, batch_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while (status := app.batches.status(batch_id))["state"] not in TERMINAL:
        assert time.monotonic() < deadline, status
        time.sleep(IDLE_SECONDS)
    return status


def test_a_worker_claims_nothing_while_paused_and_finishes_after_resume(
    app: App, tmp_path: Path
) -> None:
    """A running worker leaves a paused batch's items queued; resumed, the batch succeeds."""
    batch_id = _submit(app, write_photos(tmp_path / "src", 3))
    assert app.batches.pause(batch_id)["paused"] is True
    worker = app.worker(LocalStore(tmp_path / "store"), _options(batch_id))
    worker.start()
    try:
        time.sleep(PAUSED_WATCH_SECONDS)
        assert app.batches.status(batch_id)["counts"]["queued"] == 3
        resumed = app.batches.resume(batch_id)
        assert (resumed["paused"], resumed["state"]) == (False, "queued")
        assert _until_terminal(app, batch_id)["state"] == "succeeded"
    finally:
        worker.stop()


def test_cancel_of_a_paused_batch_abandons_its_items(app: App, tmp_path: Path) -> None:
    """Cancel wins over pause: the queued items of a paused batch are abandoned (cancelled)."""
    batch_id = _submit(app, write_photos(tmp_path / "src", 2))
    app.batches.pause(batch_id)
    cancelled = app.batches.cancel(batch_id)
    assert (cancelled["state"], cancelled["failures"]) == ("abandoned", {"cancelled": 2})
    assert cancelled["paused"] is True


def test_requeue_and_recrop_of_a_paused_batch_wait_for_the_resume(app: App, tmp_path: Path) -> None:
    """Items a requeue or re-crop moves back to queued in a paused batch are not claimed
    until it is resumed."""
    missing = [ItemRequest(source=str(tmp_path / f"missing{i}.jpg")) for i in range(2)]
    request = BatchRequest(
        items=missing, spec=RenderSpec.from_input(SPEC), deadline_seconds=3600, max_attempts=1
    )
    batch_id = str(app.batches.submit(request)[0]["id"])
    assert run_batch(app, LocalStore(tmp_path / "store"), batch_id)["state"] == "failed"
    first, second = (str(item["id"]) for item in app.batches.items(batch_id)[0])
    app.batches.pause(batch_id)
    app.batches.requeue(batch_id, item_ids=[first])
    recrop(app.batches, batch_id, second, [0, 0, 50, 50])
    assert app.batches.status(batch_id)["counts"]["queued"] == 2
    assert app.leases.claim("w", 5, group_ids=[batch_id]) == []
    app.batches.resume(batch_id)
    assert len(app.leases.claim("w", 5, group_ids=[batch_id])) == 2


def test_the_deadline_of_a_paused_batch_runs_on(app: App, tmp_path: Path) -> None:
    """A paused batch past its deadline is abandoned by the reaper, as any batch."""
    batch_id = _submit(app, write_photos(tmp_path / "src", 2))
    app.batches.pause(batch_id)
    with app.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_groups SET deadline_at = 1 WHERE id = :g"), {"g": batch_id}
        )
    app.leases.reap()
    status = app.batches.status(batch_id)
    assert (status["state"], status["failures"]) == ("abandoned", {"deadline_exceeded": 2})


def test_the_store_limit_holds_across_workers(make_app: Callable[..., App], tmp_path: Path) -> None:
    """Two workers of three slots each, limited to two attempts on their store, never hold
    more than two at once together; the batch still succeeds, and the registry and metrics
    show the limit."""
    apps = [make_app(store_max_concurrent=2) for _ in range(2)]
    batch_id = _submit(apps[0], write_photos(tmp_path / "src", 8))
    store = LocalStore(tmp_path / "store")
    lane = store_lane(store.url, 2)
    assert lane is not None
    work = WorkRequest(concurrency=3, batch_ids=[batch_id], idle_sleep_seconds=IDLE_SECONDS)
    workers = [app.worker_for(store, work) for app in apps]
    seen: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(apps[0].leases.lane_in_progress(lane.name))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    for worker in workers:
        worker.start()
        worker.start_presence()
    try:
        assert _until_terminal(apps[0], batch_id)["state"] == "succeeded"
        documents = worker_documents(apps[0].leases.workers())
        assert {2} == {d["store_max_concurrent"] for d in documents}
        metrics = apps[0].metrics.render().decode()
        assert f'batchcrop_store_max_concurrent{{store="{store.url}"}} 2.0' in metrics
        assert "batchcrop_store_attempts_in_progress{" in metrics
    finally:
        done.set()
        sampler.join()
        for worker in workers:
            worker.stop()
            worker.join()
            worker.retire(forget=True)
    assert max(seen) <= 2
    assert max(seen) >= 1

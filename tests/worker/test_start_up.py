"""A worker's start (docs/scaling.md, "Scaling from zero"): its slots claim an item queued
before it started as their first act, once its render children are warm, waiting for neither
a poll nor a wake-up."""

from __future__ import annotations

import time
from pathlib import Path

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.worker.worker import WorkerOptions
from leases import State
from tests.images import write_photos

NEVER_SECONDS = 3600.0
"""An idle wait no test outlives: a slot that waited first would never claim in time."""
CLAIM_WITHIN_SECONDS = 60.0


def test_a_started_worker_claims_an_item_queued_before_it_at_once(app: App, tmp_path: Path) -> None:
    """With polls an hour apart, a worker started beside a queued item claims it within a
    minute, after its render child is warm: the claim comes first, not after an idle wait."""
    status, _ = app.batches.submit(
        BatchRequest(
            items=(ItemRequest(source=str(write_photos(tmp_path / "src", 1)[0])),),
            spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 64}),
            deadline_seconds=3600,
            max_attempts=1,
        )
    )
    batch_id = str(status["id"])
    assert app.leases.counted(batch_id) == {(State.QUEUED, ""): 1}
    worker = app.worker(
        app.open_store(),
        WorkerOptions(
            concurrency=1,
            idle_sleep_seconds=NEVER_SECONDS,
            fallback_poll_seconds=NEVER_SECONDS,
            reaper_interval_seconds=NEVER_SECONDS,
            render_processes=1,
        ),
        deliver=False,
    )
    started = time.monotonic()
    worker.start()
    try:
        assert len(worker.render_pids) == 1  # warm before start() returned
        while app.leases.counted(batch_id).get((State.QUEUED, ""), 0):
            assert time.monotonic() - started < CLAIM_WITHIN_SECONDS, "not claimed in time"
            time.sleep(0.02)
    finally:
        worker.stop()
        worker.join(30)
    (claimed,) = [e for e in app.leases.events(batch_id) if e.from_state is State.QUEUED]
    assert claimed.to_state is State.IN_PROGRESS
    assert claimed.worker_id == worker.worker_id

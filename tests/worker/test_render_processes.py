"""A worker rendering in child processes: the same derivatives as in its threads, and every
reason an attempt must stop kills the render under it at once (docs/design.md §6)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.renders import RENDER_DEADLINE_SECONDS
from batchcrop.worker.attempts import Outcome
from batchcrop.worker.worker import Worker, WorkerOptions
from leases import Claim
from storage import LocalStore
from tests.crop.images import adobe_rgb_profile
from tests.images import write_photos
from tests.scans import slow_jpeg

SPEC = RenderSpec(ratios=(Ratio(1, 1), Ratio(16, 9)), max_side=160, formats=("jpeg", "webp"))
STOP_SECONDS_MAX = 1.5
"""How soon after the reason to stop the attempt has ended and its child is gone."""


def _submit(app: App, sources: list[Path], *, max_attempts: int = 3) -> str:
    request = BatchRequest(
        items=tuple(ItemRequest(source=str(p), ref=p.stem) for p in sources),
        spec=SPEC,
        deadline_seconds=3600,
        max_attempts=max_attempts,
    )
    status, _ = app.batches.submit(request)
    return str(status["id"])


def _slow_source(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "slow.jpg"
    path.write_bytes(slow_jpeg())
    return path


@pytest.fixture
def pooled(app: App, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """`make(batch_id)`: a worker with one warm render child, closed after."""
    workers: list[Worker] = []

    def make(batch_id: str, *, deadline_seconds: float = RENDER_DEADLINE_SECONDS) -> Worker:
        worker = app.worker(
            LocalStore(tmp_path / "store"),
            WorkerOptions(
                batch_ids=[batch_id],
                render_processes=1,
                render_deadline_seconds=deadline_seconds,
            ),
        )
        workers.append(worker)
        worker.warm_renders()
        return worker

    yield make
    for worker in workers:
        worker.close_renders()


def _claim(app: App, batch_id: str) -> Claim:
    (claim,) = app.leases.claim("test", 1, group_ids=[batch_id])
    return claim


def _while_rendering(worker: Worker, action: Callable[[], object]) -> tuple[float, int]:
    """Run `action` once the worker's child has been rendering for a moment; return when it
    ran and the child's pid."""
    (child,) = _warm(worker)
    time.sleep(0.4)
    action()
    return time.monotonic(), child


def _warm(worker: Worker) -> list[int]:
    deadline = time.monotonic() + 60
    while not worker.render_pids:
        assert time.monotonic() < deadline, "no render child in time"
        time.sleep(0.05)
    return worker.render_pids


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_derivatives_are_the_same_bytes_from_render_processes(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """One batch run with render children and one in the slots' threads store byte-identical
    derivatives and previews under the same keys."""
    sources = write_photos(tmp_path / "src", 3)
    stored: list[dict[str, str]] = []
    for processes in (0, 2):
        folder = tmp_path / f"store-{processes}"
        app = make_app(store=f"file://{folder}")
        batch_id = _submit(app, sources)
        worker = app.worker(
            LocalStore(folder),
            WorkerOptions(
                batch_ids=[batch_id],
                concurrency=2,
                render_processes=processes,
                idle_sleep_seconds=0.05,
            ),
        )
        worker.start()
        try:
            deadline = time.monotonic() + 90
            while app.batches.status(batch_id)["state"] != "succeeded":
                assert time.monotonic() < deadline, app.batches.status(batch_id)
                time.sleep(0.05)
        finally:
            worker.stop()
            assert worker.join(30)
        assert worker.render_pids == []  # the children went with the worker
        store = LocalStore(folder)
        stored.append({info.key: store.get(info.key).hex() for info in store.list("")})
    assert len(stored[0]) == 3 * (2 * 2 + 1)
    assert stored[0] == stored[1]


def test_a_render_past_its_deadline_fails_at_once_as_render_timeout(
    app: App, tmp_path: Path, pooled: Callable[..., Worker]
) -> None:
    """The child is killed at the render deadline and the item fails `render_timeout` on its
    first attempt: the same bytes would take as long again."""
    batch_id = _submit(app, [_slow_source(tmp_path / "src")])
    worker = pooled(batch_id, deadline_seconds=0.5)
    (child,) = _warm(worker)

    outcome = worker.process(_claim(app, batch_id))

    (item,) = app.batches.items(batch_id)[0]
    assert outcome == Outcome.FAILED
    assert (item["state"], item["error_category"], item["attempt"]) == (
        "failed",
        "render_timeout",
        1,
    )
    assert _gone(child)


def test_shutdown_past_its_grace_kills_the_render_and_gives_the_item_back(
    app: App, tmp_path: Path, pooled: Callable[..., Worker]
) -> None:
    """`give_back_now` mid-render: the child is killed within a poll and the item is queued
    again, its attempt not counted."""
    batch_id = _submit(app, [_slow_source(tmp_path / "src")])
    worker = pooled(batch_id)
    claim = _claim(app, batch_id)
    told: list[tuple[float, int]] = []
    thread = threading.Thread(
        target=lambda: told.append(_while_rendering(worker, worker.give_back_now))
    )
    thread.start()

    outcome = worker.process(claim)

    thread.join()
    (at, child) = told[0]
    assert outcome == Outcome.GIVEN_BACK
    assert time.monotonic() - at < STOP_SECONDS_MAX
    assert _gone(child)
    assert app.batches.items(batch_id)[0][0]["state"] == "queued"


def test_cancelling_the_batch_kills_the_render_under_its_item(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """The heartbeat that learns of the cancel stops the render: the child is killed and the
    item ends `abandoned` `cancelled` without waiting for the render."""
    app = make_app(lease_seconds=1.5)
    batch_id = _submit(app, [_slow_source(tmp_path / "src")])
    worker = app.worker(
        LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[batch_id], render_processes=1)
    )
    try:
        worker.warm_renders()
        claim = _claim(app, batch_id)
        told: list[tuple[float, int]] = []
        thread = threading.Thread(
            target=lambda: told.append(
                _while_rendering(worker, lambda: app.batches.cancel(batch_id))
            )
        )
        thread.start()

        outcome = worker.process(claim)

        thread.join()
        (at, child) = told[0]
        (item,) = app.batches.items(batch_id)[0]
        assert outcome == Outcome.ABANDONED
        assert (item["state"], item["error_category"]) == ("abandoned", "cancelled")
        # A heartbeat interval (lease / 3) to learn of it, then one poll.
        assert time.monotonic() - at < 0.5 + STOP_SECONDS_MAX
        assert _gone(child)
    finally:
        worker.close_renders()


def test_a_render_child_killed_mid_render_makes_the_attempt_retryable(
    app: App, tmp_path: Path, pooled: Callable[..., Worker]
) -> None:
    """SIGKILL of the child under an item: the attempt ends `retryable` (`internal_error`),
    and the worker renders the next item with a fresh child."""
    slow = _slow_source(tmp_path / "src")
    batch_id = _submit(app, [slow])
    worker = pooled(batch_id)
    claim = _claim(app, batch_id)
    told: list[tuple[float, int]] = []
    thread = threading.Thread(
        target=lambda: told.append(
            _while_rendering(worker, lambda: os.kill(worker.render_pids[0], signal.SIGKILL))
        )
    )
    thread.start()

    outcome = worker.process(claim)

    thread.join()
    (item,) = app.batches.items(batch_id)[0]
    assert outcome == Outcome.RETRYABLE
    assert (item["state"], item["error_category"]) == ("retryable", "internal_error")
    good_batch = _submit(app, write_photos(tmp_path / "good", 1))
    assert worker.process(_claim(app, good_batch)) == Outcome.SUCCEEDED
    assert worker.render_pids != [told[0][1]]


def test_an_ignored_colour_profile_is_said_in_the_success_event_only(
    app: App, tmp_path: Path, pooled: Callable[..., Worker]
) -> None:
    """A source whose profile is over the size limit succeeds with its pixels taken as sRGB,
    and the success's event says so; the item's message stays the one for failures (null)."""
    from batchcrop.crop import colour  # noqa: PLC0415

    source = tmp_path / "src" / "huge-profile.jpg"
    source.parent.mkdir()
    junk = adobe_rgb_profile() + b"\x01" * colour.MAX_PROFILE_BYTES
    Image.new("RGB", (320, 240), (180, 90, 40)).save(source, "JPEG", icc_profile=junk)
    batch_id = _submit(app, [source])
    worker = pooled(batch_id)

    outcome = worker.process(_claim(app, batch_id))

    (item,) = app.batches.items(batch_id)[0]
    assert outcome == Outcome.SUCCEEDED
    assert (item["state"], item["error_message"]) == ("succeeded", None)
    (success,) = [
        e for e in app.leases.events(batch_id, item_id=item["id"]) if e.to_state == "succeeded"
    ]
    size = f"{len(junk) / (1024 * 1024):.1f} MiB"
    assert success.message == f"colour profile of {size} ignored: the pixels were taken as sRGB"

"""A real batch end to end through the live API: workers crop generated images into a local
store while a client polls by the rules (ETag, Retry-After, poll_until), and the counters the
API shows always agree with a GROUP BY over the items."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from batchcrop.api.server import Reaper
from batchcrop.app import App
from batchcrop.worker.worker import WorkerOptions
from leases import State
from storage import LocalStore
from tests.api.conftest import batch_body
from tests.api.live import LiveServer

TERMINAL = {"succeeded", "failed", "abandoned"}
COPIES_PER_IMAGE = 4


@dataclass
class PollLog:
    """What a polling client saw: final document, statuses, waits and the reason it stopped."""

    final: dict[str, Any] = field(default_factory=dict)
    statuses: list[int] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    stopped_because: str = ""


def poll(live: LiveServer, batch_id: str, *, wait_scale: float = 1.0) -> PollLog:
    """Poll like a well-behaved client: If-None-Match, sleep Retry-After, stop when terminal or
    once `poll_until` has passed. `wait_scale` shortens the waits to keep the test fast."""
    log = PollLog()
    etag = None
    while True:
        headers = {"If-None-Match": etag} if etag else {}
        response = live.client.get(f"/v1/batches/{batch_id}", headers=headers)
        log.statuses.append(response.status_code)
        if response.status_code == 200:
            log.final = response.json()
            etag = response.headers["etag"]
        if log.final["state"] in TERMINAL:
            assert "retry-after" not in response.headers
            log.stopped_because = "terminal"
            return log
        poll_until = datetime.fromisoformat(log.final["poll_until"].replace("Z", "+00:00"))
        if datetime.now(UTC) >= poll_until:
            log.stopped_because = "poll_until"
            return log
        wait = int(response.headers["retry-after"]) * wait_scale
        log.waits.append(wait)
        time.sleep(wait)


def counts_from_group_by(app: App, batch_id: str) -> tuple[dict[str, int], dict[str, int]]:
    """Per-state counts and failure categories, from `recount` (a GROUP BY over the items)."""
    by_state: Counter[str] = Counter({s.value: 0 for s in State})
    failures: Counter[str] = Counter()
    for (state, category), n in app.leases.recount(batch_id).items():
        by_state[state.value] += n
        if state in (State.FAILED, State.ABANDONED) and category:
            failures[category] += n
    return dict(by_state), dict(failures)


def _last_event_id(app: App, batch_id: str) -> int:
    last = 0
    while page := app.leases.events(batch_id, after_id=last, limit=1000):
        last = page[-1].id
    return last


def test_polling_client_follows_a_real_batch_to_success(
    api: LiveServer, sources: list[str], tmp_path: Path
) -> None:
    """Workers crop every image; the poller sees 304s, stops at `succeeded`, and each poll's
    counters equal a GROUP BY taken around it whenever nothing moved in between."""
    body = batch_body(sources * COPIES_PER_IMAGE, ratios=["1:1", "16:9", "3:4"])
    batch = api.client.post("/v1/batches", json=body).json()
    batch_id = batch["id"]
    worker = api.app.worker(
        LocalStore(tmp_path / "derivatives"),
        WorkerOptions(
            concurrency=2,
            batch_ids=[batch_id],
            reaper_interval_seconds=1.0,
            idle_sleep_seconds=0.02,
        ),
    )
    stable_checks = 0
    checker_done = threading.Event()
    mismatches: list[str] = []

    def check_counters() -> None:
        nonlocal stable_checks
        while True:
            # One last pass after the poller saw the batch end: nothing moves then, so at
            # least one check is always a stable one, however fast the batch ran.
            finished = checker_done.is_set()
            last_event = _last_event_id(api.app, batch_id)
            before = counts_from_group_by(api.app, batch_id)
            shown = api.client.get(f"/v1/batches/{batch_id}").json()
            if sum(shown["counts"].values()) != shown["total"]:
                mismatches.append(f"counts do not add up: {shown['counts']}")
            # Events are appended in the transaction of each transition: none after
            # `last_event` means nothing moved around the poll, so it must agree exactly.
            if not api.app.leases.events(batch_id, after_id=last_event, limit=1):
                stable_checks += 1
                if (shown["counts"], shown["failures"]) != before:
                    mismatches.append(f"{shown['counts']} != {before}")
            if finished:
                return

    checker = threading.Thread(target=check_counters, daemon=True)
    worker.start()
    checker.start()
    try:
        log = poll(api, batch_id, wait_scale=0.2)
    finally:
        checker_done.set()
        checker.join()
        worker.stop()
        worker.join()
    assert mismatches == []
    assert stable_checks >= 1
    assert (log.stopped_because, log.final["state"]) == ("terminal", "succeeded")
    assert log.final["counts"]["succeeded"] == len(sources) * COPIES_PER_IMAGE
    assert (log.final["counts"], log.final["failures"]) == counts_from_group_by(api.app, batch_id)
    assert all(1 * 0.2 <= w <= 10 * 0.2 for w in log.waits)
    items = api.client.get(f"/v1/batches/{batch_id}/items", params={"limit": 1000}).json()
    for item in items["items"]:
        assert sorted(d["ratio"] for d in item["derivatives"]) == ["16:9", "1:1", "3:4"]
        for derivative in item["derivatives"]:
            stored = tmp_path / "derivatives" / derivative["key"]
            assert stored.stat().st_size == derivative["bytes"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_poller_stops_at_poll_until_when_nothing_moves(
    serve: Callable[..., LiveServer], sources: list[str]
) -> None:
    """With no worker and no reaper a past-deadline batch never ends: the client stops at
    poll_until (deadline + lease + one reaper interval) instead of polling forever."""
    live = serve(lease_seconds=0.5, reaper_interval_seconds=0.5)
    body = batch_body(sources[:1], deadline_seconds=1)
    batch = live.client.post("/v1/batches", json=body).json()
    started = time.monotonic()
    log = poll(live, batch["id"], wait_scale=0.25)
    assert (log.stopped_because, log.final["state"]) == ("poll_until", "queued")
    assert 2.0 <= time.monotonic() - started < 6.0
    assert 304 in log.statuses


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_serve_reaper_abandons_past_deadline_batches(
    serve: Callable[..., LiveServer], sources: list[str]
) -> None:
    """The reaper thread `serve` runs moves a past-deadline batch to abandoned before
    poll_until, so the polling client stops on a terminal state."""
    live = serve(lease_seconds=0.5, reaper_interval_seconds=0.3)
    batch = live.client.post("/v1/batches", json=batch_body(sources[:2], deadline_seconds=1)).json()
    reaper = Reaper(live.app)
    reaper.start()
    try:
        log = poll(live, batch["id"], wait_scale=0.25)
    finally:
        reaper.stop()
        reaper.join()
    assert (log.stopped_because, log.final["state"]) == ("terminal", "abandoned")
    assert log.final["failures"] == {"deadline_exceeded": 2}

"""Callbacks stay fair and bounded (docs/design.md §7, callbacks; ADR 0034): hanging receivers
do not delay a healthy one, a destination that keeps timing out rests, name resolution counts
toward the deadline, and a claim whose lease was lost is never sent."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.callbacks.deliverer import Deliverer
from batchcrop.crop import RenderSpec
from tests.cli.test_cli import wait_for
from tests.images import write_photos
from tests.receiver import SECRET, hanging, receiving

FAST_RETRY_SECONDS = 0.05
HANGING_RECEIVERS = 9
DEADLINE_SECONDS = 1.0
"""The delivery deadline in these tests (15 s in production): every hung attempt lasts this."""
SLOW_RESOLVER_SECONDS = 5.0


@pytest.fixture
def calling_back(make_app: Callable[..., App]) -> App:
    """An app that may call loopback, with the test secret and near-zero retry backoff."""
    return make_app(
        callback_secret=SECRET,
        callback_hosts=("127.0.0.1:*",),
        callback_retry_seconds=FAST_RETRY_SECONDS,
    )


def _ended_batch(app: App, source: Path, callback_url: str) -> str:
    """A batch with a callback, cancelled at once: it ends now and its callback is due."""
    request = BatchRequest(
        items=(ItemRequest(source=str(source)),),
        spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 64}),
        deadline_seconds=3600,
        max_attempts=1,
        callback_url=callback_url,
    )
    status, _ = app.batches.submit(request)
    app.batches.cancel(status["id"])
    return str(status["id"])


def _deliverer(app: App, worker_id: str = "test-deliverer") -> Deliverer:
    deliverer = app.deliverer(worker_id)
    assert deliverer is not None
    deliverer.client.timeout = httpx.Timeout(DEADLINE_SECONDS)
    deliverer.deadline_seconds = DEADLINE_SECONDS
    deliverer.poll_seconds = 0.1
    return deliverer


def test_a_healthy_receiver_is_called_at_once_while_nine_others_hang(
    calling_back: App, tmp_path: Path
) -> None:
    """With nine other batches' receivers hanging (each attempt a timeout at the deadline, then
    due again at once), a batch ending now has its callback to a healthy receiver within a
    second, not after the others' timeouts."""
    app = calling_back
    (source,) = write_photos(tmp_path / "src", 1)
    with hanging(HANGING_RECEIVERS, hang_seconds=30.0) as hung, receiving() as healthy:
        for receiver in hung:
            _ended_batch(app, source, receiver.url)
        deliverer = _deliverer(app)
        deliverer.start()
        try:
            wait_for(
                lambda: sum(len(r.requests) for r in hung) >= HANGING_RECEIVERS,
                "as many hung requests as hanging receivers",
                60,
            )
            ended = time.monotonic()
            _ended_batch(app, source, healthy.url)
            healthy.wait_processed(1, timeout=120)
        finally:
            deliverer.stop()
            deliverer.join(10)
    (arrived,) = healthy.processed_at.values()
    assert arrived - ended < 1.0, arrived - ended


def test_a_destination_that_keeps_timing_out_rests_and_others_go_on(
    calling_back: App, tmp_path: Path
) -> None:
    """Four callbacks to one hanging receiver: after three timeouts in a row (two requests at
    a time) it is not called again during its rest, its deliveries stay due (retryable, not
    failed), and another receiver's callback still goes."""
    app = calling_back
    (source,) = write_photos(tmp_path / "src", 1)
    with hanging(1, hang_seconds=10.0) as (hung,), receiving() as healthy:
        batches = [_ended_batch(app, source, hung.url) for _ in range(4)]
        deliverer = _deliverer(app)
        until = time.monotonic() + 4 * DEADLINE_SECONDS
        while time.monotonic() < until:
            deliverer.deliver_due()
            time.sleep(FAST_RETRY_SECONDS)
        called = len(hung.requests)
        assert deliverer.pacing.resting() == [f"127.0.0.1:{hung.url.split(':')[2].split('/')[0]}"]
        _ended_batch(app, source, healthy.url)
        until = time.monotonic() + 2 * DEADLINE_SECONDS
        while time.monotonic() < until:
            deliverer.deliver_due()
            time.sleep(FAST_RETRY_SECONDS)
        assert len(healthy.processed) == 1
        assert len(hung.requests) == called
    assert called in (3, 4), called
    states = {d["state"] for b in batches for d in app.batches.status(b)["deliveries"]}
    assert states <= {"retryable", "queued"}, states


def test_name_resolution_counts_toward_the_delivery_deadline(
    calling_back: App, tmp_path: Path
) -> None:
    """A resolver taking 5 s with a 1 s deadline: the attempt ends as a `timeout` after about
    1 s (well before the resolver answers) and no request is made."""
    app = calling_back
    (source,) = write_photos(tmp_path / "src", 1)

    def slow_resolver(url: httpx.URL) -> list[str]:
        time.sleep(SLOW_RESOLVER_SECONDS)
        return ["127.0.0.1"]

    with receiving() as receiver:
        batch = _ended_batch(app, source, receiver.url)
        deliverer = _deliverer(app)
        deliverer.resolver = slow_resolver
        started = time.monotonic()
        assert deliverer.deliver_due() == 1
        elapsed = time.monotonic() - started
        assert receiver.requests == []
    assert elapsed < SLOW_RESOLVER_SECONDS - 2.0, elapsed
    (delivery,) = app.batches.status(batch)["deliveries"]
    assert (delivery["state"], delivery["reason"]) == ("retryable", "timeout")


def test_a_claim_whose_lease_was_lost_before_its_turn_is_not_sent(
    calling_back: App, tmp_path: Path
) -> None:
    """A delivery claimed, then given back and claimed by another deliverer before the first
    holder sent it: the first sends nothing, the second delivers it, one request in all."""
    app = calling_back
    (source,) = write_photos(tmp_path / "src", 1)
    with receiving() as receiver:
        _ended_batch(app, source, receiver.url)
        first, second = _deliverer(app, "first"), _deliverer(app, "second")
        (stale,) = first.leases.claim("first", 1)
        first.leases.give_back(stale)
        (held,) = second.leases.claim("second", 1)
        assert first.deliver(stale) is None
        assert receiver.requests == []
        assert second.deliver(held) is not None
    assert len(receiver.requests) == 1

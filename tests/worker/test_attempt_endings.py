"""Every way an attempt ends goes through `batchcrop.worker.attempts`, and says which way it went:
a lost lease and a database outage are different outcomes, with their own metric labels."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.documents import Derivative
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.errors import Category
from batchcrop.worker.attempts import Attempts, Outcome
from batchcrop.worker.worker import WorkerOptions
from storage import LocalStore
from tests.apps import app_factory
from tests.images import write_photos
from tests.services.proxy import FaultProxy

OUTAGE_SECONDS = 30.0


def _submit(app: App, tmp_path: Path, n: int = 1, *, missing: bool = False) -> str:
    sources = write_photos(tmp_path / "src", n, size=(400, 300))
    if missing:
        sources = [tmp_path / "src" / f"missing-{i}.jpg" for i in range(n)]
    request = BatchRequest(
        items=tuple(ItemRequest(source=str(p)) for p in sources),
        spec=RenderSpec(ratios=(Ratio(1, 1),), max_side=64),
        deadline_seconds=3600.0,
        max_attempts=3,
    )
    status, _ = app.batches.submit(request)
    return str(status["id"])


def _sample(app: App, name: str, **labels: str) -> float:
    value = app.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.mark.postgres
@pytest.mark.parametrize(
    "missing",
    [
        pytest.param(False, id="at-a-lease-check"),
        # A missing source fails before any lease check: the outage meets the `fail` ending.
        pytest.param(True, id="at-the-ending"),
    ],
)
def test_a_database_outage_mid_attempt_is_an_outage_not_a_lost_lease(
    postgres_url: str, tmp_path: Path, missing: bool
) -> None:
    """The database goes away while an item is held: the attempt ends `database_unavailable`
    (its own metric label), not `lease_lost`, and nothing of it is committed."""
    url = sa.make_url(postgres_url)
    proxy = FaultProxy(str(url.host), int(url.port or 5432), http=False).start()
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    try:
        with app_factory(database_url=proxied) as make:
            app = make()
            batch_id = _submit(app, tmp_path, missing=missing)
            worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[batch_id]))
            (claim,) = app.leases.claim("w", 1, group_ids=[batch_id])
            proxy.outage(OUTAGE_SECONDS)

            outcome = worker.process(claim)

            assert outcome == Outcome.DATABASE_UNAVAILABLE
            duration = "batchcrop_item_duration_seconds_count"
            assert _sample(app, duration, outcome="database_unavailable") == 1.0
            assert _sample(app, duration, outcome="lease_lost") == 0.0
            assert _sample(app, "batchcrop_lease_lost_total") == 0.0
    finally:
        proxy.stop()
    with app_factory(database_url=postgres_url) as make:
        item = make().leases.item(claim.item_id)
    assert item is not None
    assert (item.state, item.attempt) == ("in_progress", 1)


def test_a_superseded_claim_ends_lease_lost_whatever_the_ending(app: App, tmp_path: Path) -> None:
    """Each ending, tried with a claim whose lease was taken over, reports `lease_lost` and
    leaves the item and the manifest as the new holder has them."""
    batch_id = _submit(app, tmp_path)
    (claim,) = app.leases.claim("w", 1, group_ids=[batch_id])
    stale = dataclasses.replace(claim, lease_token="0" * 32)
    attempts = Attempts(app.leases)
    row = Derivative("1:1", "k", 1, 1, 1, "0" * 64, (0, 0, 1, 1))
    endings = {
        "succeed": attempts.succeed(stale, [row]),
        "fail": attempts.fail(stale, Category.INVALID_IMAGE),
        "retry": attempts.retry(stale, Category.STORAGE_UNAVAILABLE),
        "give_back": attempts.give_back(stale),
        "abandon": attempts.abandon(stale, Category.CANCELLED),
    }
    assert {name: Outcome.LEASE_LOST for name in endings} == endings
    item = app.leases.item(claim.item_id)
    assert item is not None
    assert ("in_progress", claim.attempt) == (item.state, item.attempt)
    assert app.batches.manifest(batch_id) == []


def test_each_ending_moves_the_item_and_names_its_outcome(app: App, tmp_path: Path) -> None:
    """Held claims ended each way report the state the item is now in."""
    batch_id = _submit(app, tmp_path, n=5)
    claims = app.leases.claim("w", 5, group_ids=[batch_id])
    attempts = Attempts(app.leases)
    row = Derivative("1:1", "k", 1, 1, 1, "0" * 64, (0, 0, 1, 1))
    outcomes = [
        attempts.succeed(claims[0], [row]),
        attempts.fail(claims[1], Category.INVALID_IMAGE),
        attempts.retry(claims[2], Category.STORAGE_UNAVAILABLE),
        attempts.give_back(claims[3]),
        attempts.abandon(claims[4], Category.CANCELLED),
    ]
    assert outcomes == [
        Outcome.SUCCEEDED,
        Outcome.FAILED,
        Outcome.RETRYABLE,
        Outcome.GIVEN_BACK,
        Outcome.ABANDONED,
    ]
    states = [getattr(app.leases.item(c.item_id), "state", None) for c in claims]
    assert states == ["succeeded", "failed", "retryable", "queued", "abandoned"]
    assert [claims[0].item_id] == [m["item_id"] for m in app.batches.manifest(batch_id)]

"""The batch knows its store (docs/design.md §5, ADR 0010): recorded at submission, served only
by workers of that store, named in every derivative's location, read back by the API."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from batchcrop.app import App
from batchcrop.batches.errors import IdempotencyConflict
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.worker.worker import WorkerOptions
from storage import LocalStore
from tests.api.live import running
from tests.app_fixtures import run_batch
from tests.images import write_photos


def _request(paths: list[Path], idempotency_key: str | None = None) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p)) for p in paths),
        spec=RenderSpec.from_input({"ratios": "1:1,16:9", "max_side": 200}),
        deadline_seconds=3600,
        max_attempts=2,
        idempotency_key=idempotency_key,
    )


def test_the_batch_records_its_store_and_names_each_derivatives_location(
    make_app: Callable[..., App], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative store URL is recorded in its canonical form; every derivative's location is
    that store, a slash and its key, in documents and in the manifest."""
    monkeypatch.chdir(tmp_path)
    app = make_app(store="file://./store")
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 2)))
    store = LocalStore(tmp_path / "store")
    assert status["store"] == store.url == f"file://{tmp_path.resolve()}/store"
    final = run_batch(app, store, status["id"])
    assert final["state"] == "succeeded"
    assert final["store"] == store.url
    items, _ = app.batches.items(status["id"])
    for item in items:
        for derivative in item["derivatives"]:
            names = list(derivative)
            assert names[names.index("key") + 1] == "location"
            assert derivative["location"] == f"{store.url}/{derivative['key']}"
            path = Path(derivative["location"].removeprefix("file://"))
            assert path.stat().st_size == derivative["bytes"]
    manifest = app.batches.manifest(status["id"])
    assert {row["location"] for row in manifest} == {
        d["location"] for item in items for d in item["derivatives"]
    }


def test_a_worker_serves_only_its_own_stores_batches_and_says_so_once(
    make_app: Callable[..., App], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker started with another --store claims nothing of the batch (its items stay queued)
    and logs the skipped batch once; a worker of the batch's store then finishes it."""
    app = make_app(store=f"file://{tmp_path / 'right'}")
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 2)))
    wrong = app.worker(
        LocalStore(tmp_path / "wrong"),
        WorkerOptions(concurrency=2, idle_sleep_seconds=0.01, reaper_interval_seconds=60),
    )
    with caplog.at_level(logging.INFO, logger="batchcrop"):
        wrong.start()
        time.sleep(0.5)
        assert wrong.claimable_batches() == []
        wrong.stop()
        assert wrong.join(10)
    assert app.batches.status(status["id"])["counts"]["queued"] == 2
    skipped = [r for r in caplog.records if "batch_of_another_store" in r.getMessage()]
    assert len(skipped) == 1
    assert status["id"] in skipped[0].getMessage()
    assert not list(LocalStore(tmp_path / "wrong").list("derivatives/"))
    final = run_batch(app, LocalStore(tmp_path / "right"), status["id"])
    assert final["state"] == "succeeded"


def test_an_idempotency_key_reused_for_another_store_is_a_conflict(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    paths = write_photos(tmp_path / "src", 1)
    first = make_app(store=f"file://{tmp_path / 'a'}")
    document, created = first.batches.submit(_request(paths, idempotency_key="k"))
    again, created_again = first.batches.submit(_request(paths, idempotency_key="k"))
    assert (created, created_again, again["id"]) == (True, False, document["id"])
    other = make_app(store=f"file://{tmp_path / 'b'}")
    with pytest.raises(IdempotencyConflict):
        other.batches.submit(_request(paths, idempotency_key="k"))


def test_the_api_reads_a_derivative_from_the_batchs_store(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """`serve` configured with another store still serves a batch's derivatives from the
    batch's own store."""
    app = make_app(store=f"file://{tmp_path / 'batch-store'}")
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1)))
    assert run_batch(app, LocalStore(tmp_path / "batch-store"), status["id"])["state"] == (
        "succeeded"
    )
    (item,), _ = app.batches.items(status["id"])
    served = make_app(store=f"file://{tmp_path / 'serve-store'}")
    with running(served) as live:
        response = live.client.get(
            f"/v1/batches/{status['id']}/items/{item['id']}/derivatives/16x9"
        )
    assert response.status_code == 200
    expected = Path(item["derivatives"][1]["location"].removeprefix("file://")).read_bytes()
    assert response.content == expected

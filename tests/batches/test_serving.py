"""Stores the live fleet serves (docs/design.md §5, §7): a submission to a store no live
worker serves says so, and the queue gauges leave such stores out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.serving import unserved_warning
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.worker.presence import worker_info
from tests.app.test_logs_and_metrics import scrape


def _request(count: int = 2) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=f"/nowhere/{n}.jpg") for n in range(count)),
        spec=RenderSpec.from_input({}),
        deadline_seconds=3600.0,
        max_attempts=3,
    )


def _seen(app: App, worker_id: str, store: str, batch_ids: list[str] | None = None) -> None:
    """Register a live worker of `store` as a worker process does at start."""
    info = worker_info(concurrency=4, batch_ids=batch_ids, store=store)
    app.leases.worker_seen(worker_id, info)


def test_a_batch_no_live_worker_serves_is_named_with_the_stores_served(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """No worker: the warning says none is registered; a worker of another store: it names that
    store; a worker of the batch's store (or one naming other batches only): as it applies."""
    typo = make_app(store=f"file://{tmp_path / 'typo'}")
    status, _ = typo.batches.submit(_request())
    store = status["store"]
    alone = unserved_warning(typo.leases, store, status["id"])
    assert alone == (
        f"no live worker serves its store {store} (none is registered in this database): "
        "the batch waits"
    )
    fleet_store = f"file://{tmp_path / 'fleet'}"
    _seen(typo, "w-fleet", fleet_store)
    assert unserved_warning(typo.leases, store, status["id"]) == (
        f"no live worker serves its store {store}: the batch waits until one starts with that "
        f"--store (live workers serve {fleet_store})"
    )
    _seen(typo, "w-other-batch", store, batch_ids=["0" * 36])
    assert unserved_warning(typo.leases, store, status["id"]) is not None
    _seen(typo, "w-mine", store)
    assert unserved_warning(typo.leases, store, status["id"]) is None


def test_the_queue_gauges_carry_the_store_and_leave_out_unserved_stores(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """Batches of a served store are counted under its `store` label; those of a store no live
    worker serves are not exported at all."""
    served = make_app(store=f"file://{tmp_path / 'served'}")
    typo = make_app(store=f"file://{tmp_path / 'typo'}")
    status, _ = served.batches.submit(_request(3))
    typo.batches.submit(_request(5))
    assert "batchcrop_queue_items" not in scrape(served.metrics)
    _seen(served, "w-served", status["store"])
    fresh = make_app(store=f"file://{tmp_path / 'served'}")  # no cached queue read
    samples = scrape(fresh.metrics)["batchcrop_queue_items"]
    assert samples == {
        (("state", "queued"), ("store", status["store"])): 3.0,
        (("state", "in_progress"), ("store", status["store"])): 0.0,
        (("state", "retryable"), ("store", status["store"])): 0.0,
    }

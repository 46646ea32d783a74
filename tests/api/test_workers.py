"""`GET /v1/workers`: the worker registry over HTTP."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.worker.worker import WorkerOptions
from tests.api.conftest import TOKEN
from tests.api.live import LiveServer


def test_workers_lists_alive_absent_and_unregistered(api: LiveServer) -> None:
    """A started worker is alive with its settings; one not seen for the timeout is absent;
    a lease holder without a row is unregistered; a clean retire removes the row."""
    app = api.app
    worker = app.worker(app.open_store(), WorkerOptions(concurrency=3, batch_ids=["b1"]))
    worker.start_presence()
    try:
        app.leases.worker_seen("gone", {"host": "h", "pid": 1})
        with app.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE lease_workers SET last_seen_at = last_seen_at - 60000 WHERE id = 'gone'"
                )
            )
        response = api.client.get("/v1/workers")
        assert response.status_code == 200
        documents = {d["id"]: d for d in response.json()["workers"]}
        mine = documents[worker.worker_id]
        assert mine["status"] == "alive"
        assert (mine["concurrency"], mine["batch_ids"], mine["store"]) == (
            3,
            ["b1"],
            worker.store.url,
        )
        assert mine["pid"] is not None
        assert mine["version"]
        assert mine["leases_held"] == 0
        assert list(mine) == [
            "id", "status", "host", "pid", "version", "started_at", "last_seen_at",
            "seen_seconds_ago", "concurrency", "batch_ids", "store", "store_max_concurrent",
            "leases_held", "oldest_lease_at", "in_flight", "held_not_in_flight",
        ]  # fmt: skip
        assert documents["gone"]["status"] == "absent"
        assert documents["gone"]["seen_seconds_ago"] >= 60
    finally:
        worker.retire(forget=True)
    remaining = [d["id"] for d in api.client.get("/v1/workers").json()["workers"]]
    assert remaining == ["gone"]


def test_workers_needs_the_token(serve: Callable[..., LiveServer]) -> None:
    """Like every route but /healthz, the registry is behind the token."""
    server = serve(api_token=TOKEN, client_token="")
    assert server.client.get("/v1/workers").status_code == 401
    app: App = server.app
    assert app.leases.workers() == []

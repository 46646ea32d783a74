"""A requeue or re-crop racing `prune`, interleaved step by step (docs/design.md §4, retention):
whatever the order, no queued group is left without its batch row."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.errors import NoSuchBatch
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.recrop import recrop
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from storage import LocalStore
from tests.app_fixtures import run_batch

STEP_SECONDS = 30.0
"""How long one side waits for the other's step before the test fails."""


def _finished(app: App, tmp_path: Path) -> tuple[str, str]:
    """A batch of one item that ended `failed` (its source is missing), which both requeue
    and re-crop accept: (batch id, item id)."""
    request = BatchRequest(
        items=(ItemRequest(source=str(tmp_path / "missing.jpg")),),
        spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 64}),
        deadline_seconds=3600,
        max_attempts=1,
    )
    status, _ = app.batches.submit(request)
    assert run_batch(app, LocalStore(tmp_path / "store"), status["id"])["state"] == "failed"
    (item,) = app.batches.items(status["id"])[0]
    return str(status["id"]), str(item["id"])


def _lease_rows(app: App, batch_id: str) -> int:
    with app.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT count(*) FROM lease_items WHERE group_id = :g"), {"g": batch_id}
            ).scalar_one()
        )


@pytest.mark.parametrize(
    ("operation", "reads"),
    [("requeue", 1), ("recrop", 2), ("pause", 1), ("resume", 1), ("priority", 1)],
)
def test_a_requeue_or_recrop_between_prunes_batch_delete_and_purge_is_refused(
    app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str, reads: int
) -> None:
    """The operation (or a pause, resume or new priority) reads the batch row (its last read,
    before its write), then `prune`
    deletes that row, then the operation writes, then `prune` purges the group: the operation
    is refused (no such batch) and the prune removes every lease row, rather than leaving the
    item queued in a group without its batch."""
    app_batches = app.batches
    batch_id, item_id = _finished(app, tmp_path)
    read, go = threading.Event(), threading.Event()
    real_batch = app_batches.batch
    calls = 0

    def batch_then_pause(wanted: str) -> Any:
        nonlocal calls
        found = real_batch(wanted)
        calls += 1
        if calls == reads:  # the operation's last read before its write transaction
            read.set()
            assert go.wait(STEP_SECONDS)
        return found

    outcome: list[BaseException | None] = []

    def run_operation() -> None:
        try:
            if operation == "requeue":
                app_batches.requeue(batch_id)
            elif operation == "recrop":
                recrop(app_batches, batch_id, item_id, [0, 0, 50, 50])
            elif operation == "priority":
                app_batches.set_priority(batch_id, 3)
            else:
                getattr(app_batches, operation)(batch_id)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)
        else:
            outcome.append(None)

    # The facade names the reads' method; the parts call it on the reads: patch both.
    monkeypatch.setattr(app_batches, "batch", batch_then_pause)
    monkeypatch.setattr(app_batches.reads, "batch", batch_then_pause)
    racer = threading.Thread(target=run_operation)
    racer.start()
    assert read.wait(STEP_SECONDS)
    real_purge = app_batches.leases.purge

    def operation_then_purge(group_id: str) -> int:
        if group_id == batch_id and not go.is_set():
            go.set()  # the batch row is gone (committed): let the operation write now
            racer.join(STEP_SECONDS)
        return real_purge(group_id)

    monkeypatch.setattr(app_batches.leases, "purge", operation_then_purge)
    app_batches.prune(0.0)
    racer.join(STEP_SECONDS)
    (raised,) = outcome
    assert isinstance(raised, NoSuchBatch), raised
    assert _lease_rows(app, batch_id) == 0
    assert batch_id not in app_batches.leases.open_groups()

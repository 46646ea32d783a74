"""A callback says why it is sent (docs/design.md §7, callbacks; docs/api.md): the batch ended,
ended again after a requeue, or after re-crops, naming the items re-cropped."""

from __future__ import annotations

from pathlib import Path

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.recrop import recrop
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from storage import LocalStore
from tests.app_fixtures import run_batch
from tests.callbacks.test_callbacks import _deliver_until, calling_back, processing
from tests.images import write_photos
from tests.receiver import receiving

__all__ = ["calling_back", "processing"]  # fixtures


def test_each_callback_names_its_cause_and_a_recrop_names_its_item(
    calling_back: App, processing: App, tmp_path: Path
) -> None:
    """A batch of a photo (ref `sku-1`), another (no ref) and a missing file ends `failed`:
    `ended`. Re-cropping the first photo ends it again: `recropped` naming that item alone,
    its ref and its box. Requeueing the missing file ends it again: `requeued`, no item."""
    app = calling_back
    photos = write_photos(tmp_path / "src", 2)
    items = (
        ItemRequest(source=str(photos[0]), ref="sku-1"),
        ItemRequest(source=str(photos[1])),
        ItemRequest(source=str(tmp_path / "src" / "gone.jpg")),
    )
    store = LocalStore(tmp_path / "store")
    with receiving() as receiver:
        request = BatchRequest(
            items=items,
            spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 64}),
            deadline_seconds=3600,
            max_attempts=1,
            callback_url=receiver.url,
        )
        status, _ = app.batches.submit(request)
        batch_id = status["id"]
        assert run_batch(processing, store, batch_id)["state"] == "failed"
        _deliver_until(app, receiver, 1)
        by_ref = {item["ref"]: item for item in app.batches.items(batch_id)[0]}
        recropped = by_ref["sku-1"]["id"]
        recrop(app.batches, batch_id, recropped, [0, 0, 40, 40])
        assert run_batch(processing, store, batch_id)["state"] == "failed"
        _deliver_until(app, receiver, 2)
        app.batches.requeue(batch_id)
        assert run_batch(processing, store, batch_id)["state"] == "failed"
        _deliver_until(app, receiver, 3)
    bodies = list(receiver.processed.values())
    assert [(b["cause"], b["changed_items"]) for b in bodies] == [
        ("ended", []),
        ("recropped", [{"id": recropped, "ref": "sku-1", "focus_box": [0, 0, 40, 40]}]),
        ("requeued", []),
    ]
    assert "cause" not in app.batches.status(batch_id)

"""Re-crops through the service on real SQLite and PostgreSQL with a real worker: a box outside
the picture, a batch past its deadline, and retention of the re-crop rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.recrop import RECROP_OPEN_SECONDS, FocusOutside, recrop
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from storage import LocalStore
from tests.app_fixtures import run_batch
from tests.images import write_photos

PHOTO_SIZE = (400, 300)


def _done(app: App, tmp_path: Path) -> tuple[str, str, LocalStore]:
    """A succeeded batch of one photo: (batch id, item id, its store)."""
    paths = write_photos(tmp_path / "src", 1, size=PHOTO_SIZE)
    request = BatchRequest(
        items=(ItemRequest(source=str(paths[0])),),
        spec=RenderSpec.from_input({"ratios": ["1:1", "16:9"], "max_side": 120}),
        deadline_seconds=3600,
        max_attempts=2,
    )
    status, _ = app.batches.submit(request)
    store = LocalStore(tmp_path / "store")
    assert run_batch(app, store, status["id"])["state"] == "succeeded"
    (item,) = app.batches.items(status["id"])[0]
    return status["id"], item["id"], store


def test_a_box_outside_the_picture_is_refused_and_the_batch_stays_succeeded(
    app: App, tmp_path: Path
) -> None:
    """A re-crop whose box misses the picture (its size known from the stored preview) is
    refused before anything is written: the item and the batch stay succeeded, with no new
    event and no new callback; a box reaching past an edge but meeting it is accepted."""
    batch_id, item_id, store = _done(app, tmp_path)
    before = app.batches.status(batch_id)
    events, _ = app.batches.events(batch_id, limit=1000)
    width, height = PHOTO_SIZE
    for box in ([1000, 1000, 1100, 1100], [width, 0, width + 10, 10], [0, height, 10, height + 5]):
        with pytest.raises(FocusOutside, match=f"outside the {width}x{height} picture"):
            recrop(app.batches, batch_id, item_id, box)
    assert before == app.batches.status(batch_id)
    assert events == app.batches.events(batch_id, limit=1000)[0]
    recrop(app.batches, batch_id, item_id, [width - 1, height - 1, width + 50, height + 50])
    assert run_batch(app, store, batch_id)["state"] == "succeeded"


def test_an_item_without_a_preview_fails_invalid_focus_then_a_good_box_repairs_it(
    app: App, tmp_path: Path
) -> None:
    """Without a stored preview (an item rendered before previews were kept) the size is not
    known at re-crop time: the item fails `invalid_focus` still listing the derivatives of its
    last success; re-cropping the failed item with a good box replaces them."""
    batch_id, item_id, store = _done(app, tmp_path)
    first = app.batches.item(batch_id, item_id)["derivatives"]
    with app.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM batchcrop_previews WHERE item_id = :i"), {"i": item_id})

    recrop(app.batches, batch_id, item_id, [1000, 1000, 1100, 1100])
    assert run_batch(app, store, batch_id)["state"] == "failed"

    failed = app.batches.item(batch_id, item_id)
    assert ("failed", "invalid_focus", first) == (
        failed["state"],
        failed["error_category"],
        failed["derivatives"],
    )
    recrop(app.batches, batch_id, item_id, [0, 0, 100, 100])
    assert run_batch(app, store, batch_id)["state"] == "succeeded"
    redone = app.batches.item(batch_id, item_id)["derivatives"]
    assert len(first) == len(redone) == len(app.batches.manifest(batch_id))
    assert not {d["key"] for d in first} & {d["key"] for d in redone}


def test_a_batch_past_its_deadline_is_given_an_hour_for_the_recrop(
    app: App, tmp_path: Path
) -> None:
    """Re-cropping in a batch whose deadline has passed moves the deadline to an hour from now,
    so a worker renders the item instead of the reaper abandoning it."""
    batch_id, item_id, store = _done(app, tmp_path)
    with app.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_groups SET deadline_at = 1 WHERE id = :g"), {"g": batch_id}
        )

    recrop(app.batches, batch_id, item_id, [0, 0, 100, 100])

    deadline = datetime.fromisoformat(app.batches.status(batch_id)["deadline_at"])
    later = datetime.now(UTC) + timedelta(seconds=RECROP_OPEN_SECONDS)
    assert abs((later - deadline).total_seconds()) < 60
    assert run_batch(app, store, batch_id)["state"] == "succeeded"


def test_prune_deletes_the_recrop_rows_with_the_batch(app: App, tmp_path: Path) -> None:
    """A pruned batch's re-crop rows go with its manifest; stored objects stay."""
    batch_id, item_id, store = _done(app, tmp_path)
    recrop(app.batches, batch_id, item_id, [0, 0, 100, 100])
    assert run_batch(app, store, batch_id)["state"] == "succeeded"
    objects = sorted(info.key for info in store.list("derivatives/"))

    assert app.batches.prune(0.001).batches == 1

    with app.engine.connect() as conn:
        left = conn.execute(
            sa.text("SELECT count(*) FROM batchcrop_recrops WHERE batch_id = :b"), {"b": batch_id}
        ).scalar_one()
    assert left == 0
    assert objects == sorted(info.key for info in store.list("derivatives/"))

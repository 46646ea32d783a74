"""The source preview (docs/design.md §5, previews): written once by the worker that renders an
item, under a key naming the source and the preview variant, with put-if-absent; recorded for
the item with its manifest; shared by every batch of the same source; a key held by something
else never fails an item. On each database, and on the local folder and moto S3 stores."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from PIL import Image

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec, preview_variant, source_preview
from batchcrop.worker.facts import preview_facts
from batchcrop.worker.processing import preview_key
from storage import ObjectStore
from tests.app_fixtures import run_batch
from tests.images import write_photos

SOURCE_SIZE = (1600, 1000)


def _request(paths: list[Path], *, max_side: int = 300, ratios: str = "1:1") -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p), ref=p.stem) for p in paths),
        spec=RenderSpec(ratios=tuple(Ratio.parse(r) for r in ratios.split(",")), max_side=max_side),
        deadline_seconds=3600,
        max_attempts=1,
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_batch_of_a_source_records_the_one_stored_preview(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Two batches of one source with different render requests record the same preview: the
    640 px JPEG of the upright source under `previews/{source sha256}/{variant}.jpg`, stored
    once, with the source's size, byte for byte what `source_preview` makes of the source."""
    (source,) = write_photos(tmp_path / "src", 1, size=SOURCE_SIZE)
    data = source.read_bytes()
    first, _ = app.batches.submit(_request([source]))
    second, _ = app.batches.submit(_request([source], max_side=200, ratios="16:9,3:4"))
    for batch in (first, second):
        assert run_batch(app, store, batch["id"])["state"] == "succeeded"

    previews = [app.batches.items(b["id"])[0][0]["preview"] for b in (first, second)]
    expected = source_preview(data)
    key = preview_key(_sha256(data), preview_variant())
    assert previews[0] == previews[1]
    assert {
        "key": key,
        "location": f"{store.url}/{key}",
        "width": 640,
        "height": 400,
        "bytes": len(expected.data),
        "sha256": expected.sha256,
        "source_width": 1600,
        "source_height": 1000,
    } == previews[0]
    assert [key] == [info.key for info in store.list("previews/")]
    stored = store.get(key)
    assert expected.sha256 == _sha256(stored)
    with Image.open(io.BytesIO(stored)) as image:
        assert (image.format, image.size) == ("JPEG", (640, 400))
    assert store.head(key).metadata["kind"] == "preview"


def test_a_preview_key_holding_something_else_leaves_the_item_without_a_preview(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Bytes batchcrop did not write as this source's preview never fail the item: it succeeds
    without a preview (its thumbnail is then decoded from the source) and the object stays."""
    (source,) = write_photos(tmp_path / "src", 1, size=SOURCE_SIZE)
    key = preview_key(_sha256(source.read_bytes()), preview_variant())
    store.put_if_absent(key, b"somebody else's object", metadata={"writer": "somebody/1.0"})
    batch, _ = app.batches.submit(_request([source]))

    assert run_batch(app, store, batch["id"])["state"] == "succeeded"

    (item,) = app.batches.items(batch["id"])[0]
    assert (item["state"], item["preview"]) == ("succeeded", None)
    assert store.get(key) == b"somebody else's object"


def test_a_preview_key_holding_this_preview_in_other_bytes_records_the_stored_one(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Other bytes whose facts name this source and preview variant (another CPU's rounding)
    stand for the preview: the record is the stored object's."""
    (source,) = write_photos(tmp_path / "src", 1, size=SOURCE_SIZE)
    data = source.read_bytes()
    variant = preview_variant()
    key = preview_key(_sha256(data), variant)
    ours = source_preview(data)
    theirs_image = Image.open(io.BytesIO(ours.data))
    buffer = io.BytesIO()
    theirs_image.save(buffer, format="JPEG", quality=79)
    theirs = buffer.getvalue()
    facts = preview_facts(_sha256(data), variant, ours)
    store.put_if_absent(key, theirs, metadata={**facts, "bytes": str(len(theirs))})
    batch, _ = app.batches.submit(_request([source]))

    assert run_batch(app, store, batch["id"])["state"] == "succeeded"

    (item,) = app.batches.items(batch["id"])[0]
    assert (item["preview"]["sha256"], item["preview"]["bytes"]) == (_sha256(theirs), len(theirs))


def test_the_preview_bytes_are_deterministic(tmp_path: Path) -> None:
    """The same source gives the same preview bytes every time (the key promises it)."""
    (source,) = write_photos(tmp_path / "src", 1, size=SOURCE_SIZE)
    data = source.read_bytes()
    assert len({source_preview(data).sha256 for _ in range(3)}) == 1

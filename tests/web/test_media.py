"""The image endpoints the operator page needs, through a live server on SQLite and PostgreSQL:
source thumbnails (oriented, with the source size in headers; from the item's stored preview
when it has one, else decoded from the source) and derivative bytes from the store, behind the
token, with problems for everything unknown or missing."""

from __future__ import annotations

import hashlib
import io
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from tests.web.conftest import RATIOS, TOKEN, ProcessedBatch, photo, process, submit


def by_ref(processed: ProcessedBatch, ref: str) -> dict[str, Any]:
    """The item document with this ref."""
    return next(i for i in processed.items if i["ref"] == ref)


def unrendered(processed: ProcessedBatch, ref: str) -> tuple[str, dict[str, Any]]:
    """(batch id, item) of `ref`'s source in a new batch of the same sources that no worker
    has rendered: it has no preview, so its thumbnail is decoded from the source."""
    live = processed.live
    sources = [i["source"] for i in processed.items]
    batch = submit(live, sources)
    items = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    item = next(i for i in items if i["ref"] == ref)
    assert item["preview"] is None
    return batch["id"], item


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    """An RFC 9457 problem with `status`, no stack trace and no local path in it."""
    assert status == response.status_code, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert status == problem["status"]
    assert "Traceback" not in response.text
    assert "/sources/" not in response.text
    return problem


def test_thumbnail_is_an_oriented_jpeg_with_the_source_size(processed: ProcessedBatch) -> None:
    """The rotated source (stored 240x120, EXIF "rotate 90°") comes back portrait, fitted to
    max_side, with its upright size 120x240 in the headers; crop boxes fit inside that size."""
    item = by_ref(processed, "sku-5")
    response = processed.live.client.get(
        f"/v1/batches/{processed.id}/items/{item['id']}/source-thumbnail", params={"max_side": 64}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/jpeg"
    assert (
        response.headers["x-source-width"],
        response.headers["x-source-height"],
    ) == ("120", "240")
    with Image.open(io.BytesIO(response.content)) as thumbnail:
        assert (thumbnail.format, thumbnail.size) == ("JPEG", (32, 64))
    assert response.headers["x-thumbnail-from"] == "preview"
    for derivative in item["derivatives"]:
        left, top, right, bottom = derivative["crop_box"]
        assert 0 <= left < right <= 120
        assert 0 <= top < bottom <= 240


def test_thumbnail_never_enlarges_a_small_source(processed: ProcessedBatch) -> None:
    """Asking for more than the source has yields the source size, not an upscaled picture."""
    item = by_ref(processed, "sku-0")
    response = processed.live.client.get(
        f"/v1/batches/{processed.id}/items/{item['id']}/source-thumbnail", params={"max_side": 1024}
    )
    with Image.open(io.BytesIO(response.content)) as thumbnail:
        size = thumbnail.size
    assert (
        int(response.headers["x-source-width"]),
        int(response.headers["x-source-height"]),
    ) == size


def test_derivative_bytes_are_the_stored_object(processed: ProcessedBatch) -> None:
    """Each ratio's endpoint answers exactly the bytes the manifest describes (sha256, size)."""
    item = by_ref(processed, "sku-1")
    assert sorted(RATIOS) == sorted(d["ratio"] for d in item["derivatives"])
    for derivative in item["derivatives"]:
        path_ratio = derivative["ratio"].replace(":", "x")
        response = processed.live.client.get(
            f"/v1/batches/{processed.id}/items/{item['id']}/derivatives/{path_ratio}"
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "image/jpeg"
        assert derivative["sha256"] == hashlib.sha256(response.content).hexdigest()
        with Image.open(io.BytesIO(response.content)) as image:
            assert (derivative["width"], derivative["height"]) == image.size


def test_unknown_items_ratios_and_missing_objects_are_404_problems(
    processed: ProcessedBatch,
) -> None:
    """Unknown batch, unknown item, malformed id, a ratio the batch lacks, a malformed ratio and
    a derivative whose object vanished from the store all answer 404 problems."""
    client = processed.live.client
    item = by_ref(processed, "sku-0")
    other = str(uuid.uuid4())
    base = f"/v1/batches/{processed.id}/items/{item['id']}"
    for path in (
        f"/v1/batches/{other}/items/{item['id']}/source-thumbnail",
        f"/v1/batches/{processed.id}/items/{other}/source-thumbnail",
        f"/v1/batches/{processed.id}/items/not-a-uuid/derivatives/1x1",
        f"{base}/derivatives/4x3",
        f"{base}/derivatives/16:9",
        f"{base}/derivatives/1x1x1",
        f"{base}/derivatives/square",
    ):
        assert_problem(client.get(path), 404)
    store = Path(processed.live.app.settings.store.removeprefix("file://"))
    key = next(d["key"] for d in item["derivatives"] if d["ratio"] == "16:9")
    (store / key).unlink()
    problem = assert_problem(client.get(f"{base}/derivatives/16x9"), 404)
    assert "missing" in problem["detail"]


def test_unusable_and_vanished_sources(processed: ProcessedBatch, source_root: Path) -> None:
    """A source that is not an image is a 422 naming its category; a deleted source is a 404
    for an item without a preview, while a rendered item still shows its stored preview."""
    client = processed.live.client
    broken = by_ref(processed, "sku-6")
    assert (broken["state"], broken["error_category"], broken["preview"]) == (
        "failed",
        "invalid_image",
        None,
    )
    problem = assert_problem(
        client.get(f"/v1/batches/{processed.id}/items/{broken['id']}/source-thumbnail"), 422
    )
    assert "invalid_image" in problem["detail"]
    other_batch, waiting = unrendered(processed, "sku-0")
    (source_root / "img0.jpg").unlink()
    assert_problem(
        client.get(f"/v1/batches/{other_batch}/items/{waiting['id']}/source-thumbnail"), 404
    )
    rendered = by_ref(processed, "sku-0")
    response = client.get(f"/v1/batches/{processed.id}/items/{rendered['id']}/source-thumbnail")
    assert (response.status_code, response.headers["x-thumbnail-from"]) == (200, "preview")


def test_max_side_outside_its_range_is_a_422_naming_it(processed: ProcessedBatch) -> None:
    """max_side below 16 or above 1024 px is refused with a problem naming the field."""
    item = by_ref(processed, "sku-0")
    for value in (0, 15, 1025):
        response = processed.live.client.get(
            f"/v1/batches/{processed.id}/items/{item['id']}/source-thumbnail",
            params={"max_side": value},
        )
        problem = assert_problem(response, 422)
        assert [e["field"] for e in problem["errors"]] == ["max_side"]


def test_images_need_the_token(processed: ProcessedBatch) -> None:
    """Without the bearer token, or with a wrong one, neither endpoint shows anything."""
    item = by_ref(processed, "sku-0")
    base = f"{processed.live.url}/v1/batches/{processed.id}/items/{item['id']}"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        for path in ("/source-thumbnail", "/derivatives/1x1"):
            response = httpx.get(base + path, headers=headers)
            assert_problem(response, 401)
    ok = httpx.get(base + "/derivatives/1x1", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200


def test_openapi_documents_both_endpoints(processed: ProcessedBatch) -> None:
    """Both operations appear in the OpenAPI document with a JPEG 200 and problem errors."""
    paths = processed.live.client.get("/openapi.json").json()["paths"]
    thumbnail = paths["/v1/batches/{batch_id}/items/{item_id}/source-thumbnail"]["get"]
    derivative = paths["/v1/batches/{batch_id}/items/{item_id}/derivatives/{ratio}"]["get"]
    for operation in (thumbnail, derivative):
        assert "image/jpeg" in operation["responses"]["200"]["content"]
        assert "application/problem+json" in operation["responses"]["404"]["content"]
    assert {"X-Source-Width", "X-Source-Height"} <= set(thumbnail["responses"]["200"]["headers"])
    page_paths = [p for p in paths if not p.startswith(("/v1", "/healthz", "/metrics"))]
    assert page_paths == []


def test_a_source_swapped_out_of_the_roots_is_not_served(
    processed: ProcessedBatch, source_root: Path, tmp_path: Path
) -> None:
    """A source replaced after submission by a symlink leading out of the source roots gets a
    404, as the worker refuses it: the thumbnail never shows a file from outside the roots."""
    batch_id, item = unrendered(processed, "sku-1")
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes((source_root / "img1.jpg").read_bytes())
    (source_root / "img1.jpg").unlink()
    (source_root / "img1.jpg").symlink_to(outside)
    response = processed.live.client.get(
        f"/v1/batches/{batch_id}/items/{item['id']}/source-thumbnail"
    )
    assert_problem(response, 404)


def test_a_source_swapped_for_a_fifo_is_a_quick_404(
    processed: ProcessedBatch, source_root: Path
) -> None:
    """A thumbnail of a source replaced by a FIFO answers 404 at once instead of holding a
    server thread until a writer appears."""
    batch_id, item = unrendered(processed, "sku-2")
    (source_root / "img2.png").unlink()
    os.mkfifo(source_root / "img2.png")
    started = time.monotonic()
    response = processed.live.client.get(
        f"/v1/batches/{batch_id}/items/{item['id']}/source-thumbnail", timeout=10
    )
    assert_problem(response, 404)
    assert time.monotonic() - started < 5


def test_thumbnails_wait_for_decode_memory_then_answer_busy(
    processed: ProcessedBatch, monkeypatch: Any
) -> None:
    """While other decodes hold the whole memory budget, a thumbnail waits its few seconds and
    then answers 503 busy with Retry-After, whether it is decoded from the source or scaled
    from the stored preview; once the memory is free it is served."""
    monkeypatch.setattr("batchcrop.api.media.THUMBNAIL_QUEUE_SECONDS", 0.2)
    batch_id, waiting = unrendered(processed, "sku-0")
    rendered = by_ref(processed, "sku-0")
    budget = processed.live.app.decode_budget
    for url in (
        f"/v1/batches/{batch_id}/items/{waiting['id']}/source-thumbnail",
        f"/v1/batches/{processed.id}/items/{rendered['id']}/source-thumbnail?max_side=32",
    ):
        with budget.reserve(budget.capacity_bytes):
            problem = assert_problem(processed.live.client.get(url), 503)
        assert problem["type"] == "urn:batchcrop:problem:busy"
        assert problem["status"] == 503
        assert processed.live.client.get(url).status_code == 200
    assert budget.used_bytes == 0


def test_a_stored_preview_is_served_as_is_and_decoding_is_the_fallback(
    processed: ProcessedBatch, source_root: Path
) -> None:
    """For a 1000x700 source: at 640 px the answer is the stored preview's very bytes; smaller
    thumbnails are scaled from it; a larger one, or any once the preview object is gone from
    the store, is decoded from the source; the source size headers are the same throughout."""
    live = processed.live
    photo(3, (1000, 700)).save(source_root / "large.jpg")
    batch = submit(live, [str(source_root / "large.jpg")])
    process(live, batch["id"])
    (item,) = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    preview = item["preview"]
    assert (preview["width"], preview["height"]) == (640, 448)
    url = f"/v1/batches/{batch['id']}/items/{item['id']}/source-thumbnail"

    def fetch(max_side: int) -> tuple[str, tuple[int, int], Any]:
        response = live.client.get(url, params={"max_side": max_side})
        assert response.status_code == 200, response.text
        assert (response.headers["x-source-width"], response.headers["x-source-height"]) == (
            "1000",
            "700",
        )
        with Image.open(io.BytesIO(response.content)) as image:
            return response.headers["x-thumbnail-from"], image.size, response

    origin, size, response = fetch(640)
    assert (origin, size) == ("preview", (640, 448))
    assert preview["sha256"] == hashlib.sha256(response.content).hexdigest()
    assert fetch(320)[:2] == ("preview", (320, 224))
    assert fetch(1000)[:2] == ("source", (1000, 700))
    store = Path(live.app.settings.store.removeprefix("file://"))
    (store / preview["key"]).unlink()
    assert fetch(640)[:2] == ("source", (640, 448))

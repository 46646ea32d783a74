"""The image endpoints the operator page needs, through a live server on SQLite and PostgreSQL:
source thumbnails (oriented, with the source size in headers) and derivative bytes from the
store, behind the token, with problems for everything unknown or missing."""

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

from tests.web.conftest import RATIOS, TOKEN, ProcessedBatch


def by_ref(processed: ProcessedBatch, ref: str) -> dict[str, Any]:
    """The item document with this ref."""
    return next(i for i in processed.items if i["ref"] == ref)


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
    """A source that is not an image is a 422 naming its category; a deleted source is a 404."""
    client = processed.live.client
    broken = by_ref(processed, "sku-6")
    assert (broken["state"], broken["error_category"]) == ("failed", "invalid_image")
    problem = assert_problem(
        client.get(f"/v1/batches/{processed.id}/items/{broken['id']}/source-thumbnail"), 422
    )
    assert "invalid_image" in problem["detail"]
    (source_root / "img0.jpg").unlink()
    gone = by_ref(processed, "sku-0")
    assert_problem(
        client.get(f"/v1/batches/{processed.id}/items/{gone['id']}/source-thumbnail"), 404
    )


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
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes((source_root / "img1.jpg").read_bytes())
    (source_root / "img1.jpg").unlink()
    (source_root / "img1.jpg").symlink_to(outside)
    item = by_ref(processed, "sku-1")
    response = processed.live.client.get(
        f"/v1/batches/{processed.id}/items/{item['id']}/source-thumbnail"
    )
    assert_problem(response, 404)


def test_a_source_swapped_for_a_fifo_is_a_quick_404(
    processed: ProcessedBatch, source_root: Path
) -> None:
    """A thumbnail of a source replaced by a FIFO answers 404 at once instead of holding a
    server thread until a writer appears."""
    (source_root / "img2.png").unlink()
    os.mkfifo(source_root / "img2.png")
    item = by_ref(processed, "sku-2")
    started = time.monotonic()
    response = processed.live.client.get(
        f"/v1/batches/{processed.id}/items/{item['id']}/source-thumbnail", timeout=10
    )
    assert_problem(response, 404)
    assert time.monotonic() - started < 5


def test_thumbnails_wait_for_decode_memory_then_answer_busy(
    processed: ProcessedBatch, monkeypatch: Any
) -> None:
    """While other decodes hold the whole memory budget, a thumbnail waits its few seconds and
    then answers 503 busy with Retry-After; once the memory is free it is served."""
    monkeypatch.setattr("batchcrop.api.media.THUMBNAIL_QUEUE_SECONDS", 0.2)
    item = by_ref(processed, "sku-0")
    url = f"/v1/batches/{processed.id}/items/{item['id']}/source-thumbnail"
    budget = processed.live.app.decode_budget
    with budget.reserve(budget.capacity_bytes):
        problem = assert_problem(processed.live.client.get(url), 503)
    assert problem["type"] == "urn:batchcrop:problem:busy"
    assert processed.live.client.get(url).status_code == 200
    assert budget.used_bytes == 0

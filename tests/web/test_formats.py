"""Output formats through the live server and the operator page: the derivative endpoint serves
each format with its type (`?format=`, default the batch's first), and the contact sheet shows one
picture per ratio with every format's size (docs/design.md §7, ADR 0009)."""

from __future__ import annotations

import io
from typing import Any

from PIL import Image

from tests.web.conftest import RATIOS, LiveServer, process, submit
from tests.web.test_pages import open_with_token

FORMATS = ["webp", "jpeg", "avif"]
PILLOW = {"jpeg": "JPEG", "webp": "WEBP", "avif": "AVIF"}


def _processed(live: LiveServer, sources: list[str]) -> tuple[str, list[dict[str, Any]]]:
    batch = submit(live, sources[:2], formats=FORMATS)
    assert batch["formats"] == FORMATS
    assert process(live, batch["id"])["state"] == "succeeded"
    items = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    return batch["id"], items


def test_each_format_is_served_with_its_type(live: LiveServer, sources: list[str]) -> None:
    """`?format=` picks the format and the answer carries its media type; no format means the
    batch's first; a format the batch lacks is a 404 and an unknown one a 422."""
    batch_id, items = _processed(live, sources)
    item = items[0]
    assert [(d["ratio"], d["format"]) for d in item["derivatives"]] == [
        (r, f) for r in RATIOS for f in FORMATS
    ]
    base = f"/v1/batches/{batch_id}/items/{item['id']}/derivatives/1x1"
    for derivative in item["derivatives"][: len(FORMATS)]:
        name = derivative["format"]
        response = live.client.get(f"{base}?format={name}")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == f"image/{name}"
        with Image.open(io.BytesIO(response.content)) as image:
            assert image.format == PILLOW[name]
        assert len(response.content) == derivative["bytes"]
    default = live.client.get(base)
    assert default.headers["content-type"] == "image/webp"
    assert live.client.get(f"{base}?format=gif").status_code == 422
    jpeg_only = submit(live, sources[:1])
    process(live, jpeg_only["id"])
    (only,) = live.client.get(f"/v1/batches/{jpeg_only['id']}/items").json()["items"]
    missing = f"/v1/batches/{jpeg_only['id']}/items/{only['id']}/derivatives/1x1?format=avif"
    assert live.client.get(missing).status_code == 404


def test_the_contact_sheet_shows_each_ratio_once_with_every_formats_size(
    page: Any, live: LiveServer, sources: list[str]
) -> None:
    """One picture per ratio (the first format's), captioned with each format and its size in
    the batch's format order; the batch's output line names the formats."""
    batch_id, items = _processed(live, sources)
    open_with_token(page, f"{live.url}/batches/{batch_id}")
    page.wait_for_function(
        "n => document.querySelectorAll('#sheet img.derivative[src^=\"blob:\"]').length === n",
        arg=len(RATIOS) * len(items),
    )
    for item in items:
        card = page.locator(f"li.card[data-item-id='{item['id']}']")
        assert card.locator("figure.derivative-figure").count() == len(RATIOS)
        assert card.locator("svg.boxes rect").count() == len(RATIOS)
        for ratio in RATIOS:
            entries = card.locator(f"figure[data-ratio='{ratio}'] ul.formats li")
            shown = entries.evaluate_all(
                "els => els.map(e => [e.dataset.format, Number(e.dataset.bytes), e.textContent])"
            )
            expected = [d for d in item["derivatives"] if d["ratio"] == ratio]
            assert [(f, b) for f, b, _ in shown] == [(d["format"], d["bytes"]) for d in expected]
            assert [text.split()[0] for _, _, text in shown] == ["WebP", "JPEG", "AVIF"]
    page.get_by_text("WEBP, JPEG, AVIF").wait_for()

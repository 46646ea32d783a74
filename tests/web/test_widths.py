"""Several widths per ratio (a srcset) through the live server and the operator page: the
derivative endpoint serves each width (`?width=`, default the batch's first) and the contact
sheet names each width's size beside its format (docs/api.md)."""

from __future__ import annotations

import hashlib
import io
from typing import Any

from PIL import Image

from tests.web.conftest import RATIOS, LiveServer, process, submit
from tests.web.test_media import assert_problem
from tests.web.test_pages import open_with_token

WIDTHS = [64, 32]


def _processed(live: LiveServer, sources: list[str]) -> tuple[str, dict[str, Any]]:
    batch = submit(live, sources[:1], widths=WIDTHS, max_side=1200)
    assert process(live, batch["id"])["state"] == "succeeded"
    (item,) = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    return batch["id"], item


def test_each_width_is_served_and_the_first_by_default(
    live: LiveServer, sources: list[str]
) -> None:
    """`?width=` picks the derivative asked at that width (its stored bytes); none means the
    batch's first width; a width the batch did not ask for is a 404 naming it, one out of
    range a 422 problem."""
    batch_id, item = _processed(live, sources)
    assert [(d["ratio"], d["requested_width"]) for d in item["derivatives"]] == [
        (r, w) for r in RATIOS for w in WIDTHS
    ]
    base = f"/v1/batches/{batch_id}/items/{item['id']}/derivatives/1x1"
    for derivative in item["derivatives"][: len(WIDTHS)]:
        response = live.client.get(base, params={"width": derivative["requested_width"]})
        assert response.status_code == 200, response.text
        assert hashlib.sha256(response.content).hexdigest() == derivative["sha256"]
        with Image.open(io.BytesIO(response.content)) as image:
            assert image.size == (derivative["width"], derivative["height"])
    first = hashlib.sha256(live.client.get(base).content).hexdigest()
    assert first == item["derivatives"][0]["sha256"]
    problem = assert_problem(live.client.get(base, params={"width": 48}), 404)
    assert "at width 48" in problem["detail"]
    assert_problem(live.client.get(base, params={"width": 5}), 422)


def test_the_contact_sheet_names_each_widths_size(
    page: Any, live: LiveServer, sources: list[str]
) -> None:
    """With several widths, each ratio's caption lists every derivative with its size in
    pixels, in the batch's width order, and the picture shown is the first width's."""
    batch_id, item = _processed(live, sources)
    open_with_token(page, f"{live.url}/batches/{batch_id}")
    page.wait_for_function(
        "n => document.querySelectorAll('#sheet img.derivative[src^=\"blob:\"]').length === n",
        arg=len(RATIOS),
    )
    for ratio in RATIOS:
        figure = page.locator(f"li.card[data-item-id='{item['id']}'] figure[data-ratio='{ratio}']")
        texts = figure.locator("ul.formats li").all_text_contents()
        expected = [d for d in item["derivatives"] if d["ratio"] == ratio]
        assert [text.split()[:2] for text in texts] == [
            ["JPEG", f"{d['width']}×{d['height']}"] for d in expected
        ]
        size = figure.locator("img.derivative").evaluate(
            "img => [img.naturalWidth, img.naturalHeight]"
        )
        assert size == [expected[0]["width"], expected[0]["height"]]

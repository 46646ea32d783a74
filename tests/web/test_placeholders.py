"""Pictures on the contact sheet in headless Chromium: until a picture arrives it is a neutral
box of the size it will have (the source's aspect ratio from the item's preview record, a
derivative's from its width and height), so nothing moves when it comes; a picture the server
cannot give says why in its place, with a Retry button when the server was only busy (503)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ProcessedBatch, enter_token, submit

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

NEUTRAL = "rgb(217, 219, 224)"
THUMB_BOX_PX = 240
DERIVATIVE_HEIGHT_PX = 88
SIZE_TOLERANCE_PX = 1.5


def open_sheet(page: Any, url: str) -> None:
    """Open a batch page, give the token, wait for its cards."""
    page.goto(url)
    enter_token(page)
    page.locator("#sheet li.card").first.wait_for()


def all_settled(page: Any) -> None:
    """Wait until every picture of the sheet is shown or has failed."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('#sheet figure')].every("
        "f => f.dataset.image === 'shown' || f.dataset.image === 'failed')"
    )


def test_pictures_are_sized_neutral_boxes_until_they_arrive(
    page: Any, processed: ProcessedBatch
) -> None:
    """With the pictures held back, each source is a neutral box with its source's aspect
    ratio fitted into 240 px and each waiting derivative a neutral box of its own ratio, with no
    picture in them; once let through, each picture fills its box exactly."""
    held: list[Any] = []
    released = False

    def hold(route: Any) -> None:
        if released:
            route.continue_()
        else:
            held.append(route)

    # Derivatives are held too: one arriving while the boxes are measured would leave the
    # "loading" set under the loop's feet.
    page.route(re.compile(r"/source-thumbnail|/derivatives/"), hold)
    open_sheet(page, f"{processed.live.url}/batches/{processed.id}")
    page.wait_for_function("() => document.querySelectorAll('figure.source').length === 7")
    before: dict[str, dict[str, float]] = {}
    for item in processed.items:
        figure = page.locator(f"li.card[data-item-id='{item['id']}'] figure.source")
        assert figure.get_attribute("data-image") == "loading"
        frame = figure.locator(".frame")
        assert frame.evaluate("e => getComputedStyle(e).backgroundColor") == NEUTRAL
        assert figure.locator("img.thumb").is_hidden()
        box = frame.bounding_box()
        preview = item["preview"]
        if preview is None:  # the broken source: never rendered, its size unknown
            assert (box["width"], box["height"]) == (THUMB_BOX_PX, THUMB_BOX_PX * 3 / 4)
            continue
        width, height = preview["source_width"], preview["source_height"]
        scale = min(THUMB_BOX_PX / width, THUMB_BOX_PX / height, 1.0)
        assert abs(box["width"] - width * scale) <= SIZE_TOLERANCE_PX, item["ref"]
        assert abs(box["height"] - height * scale) <= SIZE_TOLERANCE_PX, item["ref"]
        before[item["id"]] = box
    waiting = page.locator("figure.derivative-figure[data-image='loading']")
    assert waiting.count() > 0
    for n in range(waiting.count()):
        figure = waiting.nth(n)
        box = figure.locator(".picture").bounding_box()
        width, height = (int(v) for v in figure.locator("img").evaluate("e => [e.width, e.height]"))
        assert abs(box["height"] - DERIVATIVE_HEIGHT_PX) <= SIZE_TOLERANCE_PX
        assert abs(box["width"] - DERIVATIVE_HEIGHT_PX * width / height) <= SIZE_TOLERANCE_PX
        assert (
            figure.locator(".picture").evaluate("e => getComputedStyle(e).backgroundColor")
            == NEUTRAL
        )
    released = True
    for route in held:
        route.continue_()
    all_settled(page)
    for item_id, box in before.items():
        figure = page.locator(f"li.card[data-item-id='{item_id}'] figure.source")
        assert figure.get_attribute("data-image") == "shown"
        shown = figure.locator("img.thumb").bounding_box()
        assert abs(shown["width"] - box["width"]) <= SIZE_TOLERANCE_PX
        assert abs(shown["height"] - box["height"]) <= SIZE_TOLERANCE_PX


def test_a_busy_picture_offers_retry_and_a_missing_one_says_why(
    page: Any, processed: ProcessedBatch, source_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a batch no worker rendered yet, while the server's decode memory is taken, thumbnails
    answer 503 busy: each card says so with a Retry button, which shows the picture once the
    memory is free. A source deleted meanwhile (404) and a derivative missing from the store
    say why, without a Retry button."""
    live = processed.live
    monkeypatch.setattr("batchcrop.api.media.THUMBNAIL_QUEUE_SECONDS", 0.2)
    waiting = submit(live, [i["source"] for i in processed.items[:2]])
    items = live.client.get(f"/v1/batches/{waiting['id']}/items").json()["items"]
    (source_root / Path(items[1]["source"]).name).unlink()
    budget = live.app.decode_budget
    with budget.reserve(budget.capacity_bytes):
        open_sheet(page, f"{live.url}/batches/{waiting['id']}")
        all_settled(page)
    busy = page.locator(f"li.card[data-item-id='{items[0]['id']}'] figure.source")
    gone = page.locator(f"li.card[data-item-id='{items[1]['id']}'] figure.source")
    assert busy.get_attribute("data-image") == "failed"
    assert (
        busy.locator(".image-problem").inner_text() == "Source not shown yet: the server is busy."
    )
    assert (
        gone.locator(".image-problem").inner_text()
        == "Source not shown: the source of this item is no longer there"
    )
    assert gone.locator("button.retry").is_hidden()
    busy.get_by_role("button", name="Retry source of sku-0").click()
    page.wait_for_function("f => f.dataset.image === 'shown'", arg=busy.element_handle())
    assert busy.locator(".image-problem").is_hidden()
    assert busy.locator("img.thumb").evaluate("e => e.naturalWidth") > 0

    item = processed.items[0]
    key = next(d["key"] for d in item["derivatives"] if d["ratio"] == "16:9")
    (Path(live.app.settings.store.removeprefix("file://")) / key).unlink()
    page.goto(f"{live.url}/batches/{processed.id}")
    page.locator("#sheet li.card").first.wait_for()
    all_settled(page)
    missing = page.locator(
        f"li.card[data-item-id='{item['id']}'] figure.derivative-figure[data-ratio='16:9']"
    )
    assert missing.get_attribute("data-image") == "failed"
    assert (
        missing.locator(".image-problem").inner_text()
    ) == "16:9 derivative not shown: the derivative's object is missing from the store"
    assert missing.locator("button.retry").is_hidden()

"""The operator page fits the screen: at phone width (390 px) and on desktops (1280, 1600 px)
no page scrolls sideways, even with very long labels, refs, sources and callback addresses,
and the long texts stay readable in full (wrapped, or shortened with the whole text in a
tooltip)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.api.live import LiveServer, running
from tests.web.conftest import TOKEN, enter_token, process, save_artifact, submit

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

WIDTHS_PX = (390, 1280, 1600)
VIEWPORT_HEIGHT_PX = 900
LONG_LABEL = "import-" + "x" * 193
LONG_FOLDER = "catalogue-" + "y" * 120
CALLBACK_HOST = "hooks.example.com"
LONG_CALLBACK_URL = f"https://{CALLBACK_HOST}/callbacks/" + "z" * 300


def long_ref(n: int) -> str:
    """A 256-character ref without a space (the API's longest)."""
    head = f"sku-{n}-"
    return head + "r" * (256 - len(head))


@pytest.fixture
def long_batch(
    make_app: Any, source_root: Path, sources: list[str]
) -> Iterator[tuple[LiveServer, dict[str, Any], list[dict[str, Any]]]]:
    """A live server and a batch of long strings a real worker processed: a 200-character
    label, 256-character refs, sources in a folder with a 130-character name, and a callback
    address of 330 characters (no secret is set, so it stays queued)."""
    folder = source_root / LONG_FOLDER
    folder.mkdir()
    long_sources = []
    for source in sources:
        target = folder / ("photo-" + "w" * 100 + "-" + Path(source).name)
        shutil.copyfile(source, target)
        long_sources.append(str(target))
    app = make_app(callback_hosts=(CALLBACK_HOST,))
    with running(app, token=TOKEN) as live:
        body = {
            "items": [{"source": s, "ref": long_ref(n)} for n, s in enumerate(long_sources)],
            "ratios": ["1:1", "16:9", "3:4", "21:9"],
            "max_side": 96,
            "label": LONG_LABEL,
            "callback_url": LONG_CALLBACK_URL,
        }
        response = live.client.post("/v1/batches", json=body)
        assert response.status_code == 201, response.text
        status = process(live, response.json()["id"])
        items = live.client.get(f"/v1/batches/{status['id']}/items").json()["items"]
        yield live, status, items


def overflow(page: Any) -> dict[str, Any]:
    """The document's scroll width against the viewport's, and the widest elements that stick
    out past the right edge (to say what overflows when the test fails)."""
    result: dict[str, Any] = page.evaluate(
        """() => {
          const width = window.innerWidth;
          const out = [...document.querySelectorAll('body *')]
            .filter((e) => e.getBoundingClientRect().right > width + 0.5)
            .map((e) => `${e.tagName.toLowerCase()}.${e.className} `
              + Math.round(e.getBoundingClientRect().right))
            .slice(0, 8);
          return { scroll: document.documentElement.scrollWidth, inner: width, out };
        }"""
    )
    return result


def settled(page: Any) -> None:
    """Wait until every image of the page has loaded or given up (its placeholder shown)."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('#sheet figure')].every("
        "f => f.dataset.image === 'shown' || f.dataset.image === 'failed')"
    )


def test_no_page_scrolls_sideways_at_phone_and_desktop_widths(
    page: Any, long_batch: tuple[LiveServer, dict[str, Any], list[dict[str, Any]]]
) -> None:
    """The token form, and the index, batch, item and not-found pages, at 390, 1280 and 1600 px
    wide: the document is never wider than the window, and the long label, ref, source and
    callback address are on the page in full."""
    live, status, items = long_batch
    longest = next(i for i in items if i["state"] == "succeeded")
    pages = {
        "index": ("/", "#batches tbody tr"),
        "batch": (f"/batches/{status['id']}", "#sheet li.card"),
        "item": (f"/batches/{status['id']}/items/{longest['id']}", "#timeline tbody tr"),
        "not-found": ("/batches/not-an-id", "h1"),
    }
    for width in WIDTHS_PX:  # the token form, before any data
        page.set_viewport_size({"width": width, "height": VIEWPORT_HEIGHT_PX})
        page.goto(live.url + "/")
        page.get_by_label("Remember on this browser").wait_for()
        measured = overflow(page)
        assert measured["scroll"] <= measured["inner"], ("token form", width, measured)
    enter_token(page)
    page.locator("#content").wait_for(state="visible")
    for width in WIDTHS_PX:
        page.set_viewport_size({"width": width, "height": VIEWPORT_HEIGHT_PX})
        for name, (path, ready) in pages.items():
            page.goto(live.url + path)
            page.locator(ready).first.wait_for()
            if name in ("batch", "item"):
                settled(page)
            measured = overflow(page)
            assert measured["scroll"] <= measured["inner"], (name, width, measured)
            text = page.locator("main").inner_text().replace("\n", "")
            if name == "index":
                assert LONG_LABEL in text
            if name == "batch":
                assert LONG_LABEL in text
                assert LONG_CALLBACK_URL in text
            if name == "item":
                assert longest["ref"] in text
                assert longest["source"] in text
            save_artifact(page, f"layout-{name}-{width}.png")


def test_the_recrop_editor_fits_a_phone_with_a_large_source(
    page: Any, live: LiveServer, source_root: Path
) -> None:
    """A 1600 x 1000 source on the item page at 390 px: the re-crop editor's picture is
    fitted to the window (no sideways scroll) and its overlay covers it exactly."""
    large = source_root / "large.jpg"
    Image.new("RGB", (1600, 1000), (120, 80, 60)).save(large)
    batch = submit(live, [str(large)])
    process(live, batch["id"])
    (item,) = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    page.set_viewport_size({"width": 390, "height": VIEWPORT_HEIGHT_PX})
    page.goto(f"{live.url}/batches/{batch['id']}/items/{item['id']}")
    enter_token(page)
    image = page.locator("img.recrop-image")
    image.wait_for()
    page.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=image.element_handle())
    measured = overflow(page)
    assert measured["scroll"] <= measured["inner"], measured
    picture = image.bounding_box()
    cover = page.locator("svg.recrop-overlay").bounding_box()
    assert picture["x"] + picture["width"] <= 390
    assert abs(picture["width"] - cover["width"]) < 1
    assert abs(picture["height"] - cover["height"]) < 1
    save_artifact(page, "recrop-390.png")

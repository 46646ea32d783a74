"""Finding things on the operator page in headless Chromium: the index's state filter and
search, the contact sheet's state and ratio filters, jumps to a ref and pages of a 10,000-item
batch, every view in the URL (bookmarkable, Back and Forward), live relative times, and stale
notices that clear themselves."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.api.live import LiveServer
from tests.web.conftest import RATIOS, ProcessedBatch, submit
from tests.web.test_pages import open_with_token

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

BIG_BATCH_ITEMS = 10_000
PAGE_ITEMS = 24
ITEMS_PAGE_LIMIT_MAX = 100


def query_of(page: Any) -> dict[str, list[str]]:
    """The current URL's query parameters."""
    return parse_qs(urlparse(page.url).query)


def shown_batches(page: Any) -> list[str]:
    """Ids of the batches in the index table, top to bottom."""
    rows = page.locator("#batches tbody tr")
    ids: list[str] = rows.evaluate_all("rows => rows.map(r => r.dataset.batchId)")
    return ids


def wait_for_batches(page: Any, expected: list[str]) -> None:
    """Wait until the index table shows exactly these batches."""
    page.wait_for_function(
        "ids => JSON.stringify([...document.querySelectorAll('#batches tbody tr')]"
        ".map(r => r.dataset.batchId)) === JSON.stringify(ids)",
        arg=expected,
    )


def test_index_filters_and_searches_with_the_url(
    page: Any, live: LiveServer, sources: list[str]
) -> None:
    """The index shows each batch's label, item count, ratios and formats; the state filter
    and the search (label, ref, source) narrow it, live in the URL, and Back, Forward and a
    bookmarked URL show the same lists again."""
    autumn = submit(live, sources[:3], label="Autumn import", formats=["jpeg", "webp"])
    spring = submit(live, sources[3:4], label="spring import")
    live.client.post(f"/v1/batches/{spring['id']}/cancel")
    open_with_token(page, live.url + "/")
    wait_for_batches(page, [spring["id"], autumn["id"]])
    row = page.locator(f"tr[data-batch-id='{autumn['id']}']")
    assert row.locator("td.label").inner_text() == "Autumn import"
    assert row.locator("td.total").inner_text() == "3"
    assert row.locator("td.output").inner_text() == f"{', '.join(RATIOS)} · JPEG, WEBP"

    page.get_by_label("State").select_option("abandoned")
    page.get_by_role("button", name="Find").click()
    wait_for_batches(page, [spring["id"]])
    assert query_of(page) == {"state": ["abandoned"]}

    page.get_by_label("State").select_option("")
    page.get_by_label("Search").fill("autumn")
    page.get_by_role("button", name="Find").click()
    wait_for_batches(page, [autumn["id"]])
    assert query_of(page) == {"q": ["autumn"]}

    page.go_back()
    wait_for_batches(page, [spring["id"]])
    assert page.get_by_label("State").input_value() == "abandoned"
    page.go_forward()
    wait_for_batches(page, [autumn["id"]])
    assert page.get_by_label("Search").input_value() == "autumn"

    page.get_by_label("Search").fill("sku-0")  # the first item's ref, in both batches
    page.get_by_role("button", name="Find").click()
    wait_for_batches(page, [spring["id"], autumn["id"]])

    page.goto(f"{live.url}/?q={sources[1]}")  # a bookmark: the token is kept for the tab
    wait_for_batches(page, [autumn["id"]])
    page.get_by_role("button", name="Show all").click()
    wait_for_batches(page, [spring["id"], autumn["id"]])
    assert urlparse(page.url).query == ""

    page.get_by_label("Search").fill("no such thing")
    page.get_by_role("button", name="Find").click()
    page.get_by_text("No batch matches.").wait_for()
    assert shown_batches(page) == []


def first_ref(page: Any) -> str:
    """The ref of the sheet's first card."""
    text: str = page.locator("#sheet li.card .ref").first.inner_text()
    return text


def wait_for_first_ref(page: Any, ref: str) -> None:
    """Wait until the sheet's first card is the item `ref`."""
    page.wait_for_function(
        "ref => document.querySelector('#sheet li.card .ref')?.textContent === ref", arg=ref
    )


def test_sheet_of_a_10000_item_batch_filters_pages_and_jumps(
    page: Any, live: LiveServer, sources: list[str]
) -> None:
    """A 10,000-item batch's page fetches one page of items at a time; the sheet filters by
    state, jumps to a ref and pages on from it, every view in the URL: Back and Forward and a
    bookmarked URL show it again, and an unknown ref is said so without leaving the view."""
    body = {
        "items": [{"source": sources[n % 3], "ref": f"sku-{n}"} for n in range(BIG_BATCH_ITEMS)],
        "ratios": RATIOS,
    }
    response = live.client.post("/v1/batches", json=body, timeout=120)
    assert response.status_code == 201, response.text
    batch_id = response.json()["id"]
    for claim in live.app.leases.claim("test-worker", 2, group_ids=[batch_id]):
        live.app.leases.fail(claim, "invalid_image")
    limits: list[int] = []
    page.on(
        "request",
        lambda request: (
            limits.append(int(parse_qs(urlparse(request.url).query)["limit"][0]))
            if re.search(r"/v1/batches/[^/]+/items\?", request.url)
            else None
        ),
    )

    open_with_token(page, f"{live.url}/batches/{batch_id}")
    page.locator("#sheet li.card").nth(PAGE_ITEMS - 1).wait_for()
    assert page.locator("#sheet li.card").count() == PAGE_ITEMS
    assert page.locator("#sheet-page").inner_text() == f"Items 1 to 24 of {BIG_BATCH_ITEMS}"

    page.get_by_label("Items in state").select_option("failed")
    page.get_by_role("button", name="Show", exact=True).click()
    page.wait_for_function("() => document.querySelectorAll('#sheet li.card').length === 2")
    assert {"failed"} == set(
        page.locator("#sheet li.card").evaluate_all("cards => cards.map(c => c.dataset.state)")
    )
    assert query_of(page) == {"state": ["failed"]}
    assert page.locator("#sheet-page").inner_text() == "Items 1 to 2 of 2"
    page.go_back()
    page.locator("#sheet li.card").nth(PAGE_ITEMS - 1).wait_for()
    assert page.get_by_label("Items in state").input_value() == ""

    page.get_by_label("Jump to ref").fill("sku-9000")
    page.get_by_role("button", name="Go to ref").click()
    wait_for_first_ref(page, "sku-9000")
    assert query_of(page) == {"ref": ["sku-9000"]}
    page.get_by_role("button", name="Next page").click()
    wait_for_first_ref(page, "sku-9024")
    bookmark = page.url
    assert "cursor" in query_of(page)
    page.get_by_role("button", name="Previous page").click()
    wait_for_first_ref(page, "sku-9000")
    page.go_back()
    wait_for_first_ref(page, "sku-9024")
    page.go_back()
    wait_for_first_ref(page, "sku-9000")
    page.go_forward()
    wait_for_first_ref(page, "sku-9024")

    page.get_by_label("Jump to ref").fill("sku-nope")
    page.get_by_role("button", name="Go to ref").click()
    page.get_by_text("No item with ref sku-nope.").wait_for()
    assert page.url == bookmark
    assert first_ref(page) == "sku-9024"

    page.goto(bookmark)
    wait_for_first_ref(page, "sku-9024")
    page.get_by_role("button", name="First page").click()
    wait_for_first_ref(page, "sku-0")
    assert limits
    assert max(limits) <= ITEMS_PAGE_LIMIT_MAX


def test_sheet_ratio_filter_shows_one_ratio(page: Any, processed: ProcessedBatch) -> None:
    """With a ratio chosen, every card shows only that ratio's derivative and crop box."""
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}")
    page.locator("#sheet li.card").first.wait_for()
    page.get_by_label("Crops of ratio").select_option("16:9")
    page.get_by_role("button", name="Show", exact=True).click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('#sheet figure.derivative-figure')]"
        ".every(f => f.dataset.ratio === '16:9')"
        " && document.querySelectorAll('#sheet figure.derivative-figure').length > 0"
    )
    page.wait_for_function("() => document.querySelectorAll('#sheet svg.boxes rect').length > 0")
    boxes = page.locator("#sheet svg.boxes rect").evaluate_all(
        "rects => rects.map(r => r.dataset.ratio)"
    )
    assert set(boxes) == {"16:9"}
    assert query_of(page) == {"ratio": ["16:9"]}


def test_times_tick_live_and_stale_notices_clear(
    page: Any, live: LiveServer, sources: list[str]
) -> None:
    """Times carry their absolute UTC time in `datetime` and `title` and a relative time that
    moves on by itself (the same element, not redrawn from the API); a failing poll says the
    data may be stale, and the notice goes away once polling works again."""
    batch = submit(live, sources[:2])
    open_with_token(page, f"{live.url}/batches/{batch['id']}")
    created = page.locator("#summary time").first
    created.wait_for()
    assert created.get_attribute("datetime") == batch["created_at"]
    title = created.get_attribute("title")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", title), title
    assert created.inner_text().startswith(title)
    created.evaluate("el => { el.dataset.probe = 'kept'; }")
    before = created.locator(".relative").inner_text()
    page.wait_for_function(
        "before => document.querySelector('#summary time .relative').textContent !== before",
        arg=before,
        timeout=20_000,
    )
    assert created.get_attribute("data-probe") == "kept"
    assert re.fullmatch(r"\((just now|\d+ s ago)\)", created.locator(".relative").inner_text())

    status_url = f"{live.url}/v1/batches/{batch['id']}"
    page.route(status_url, lambda route: route.abort())
    page.get_by_text("Live updates paused").wait_for(timeout=20_000)
    page.unroute(status_url)
    page.wait_for_function(
        "() => document.getElementById('notice').textContent === ''", timeout=20_000
    )

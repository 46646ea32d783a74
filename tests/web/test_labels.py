"""Batch labels on the operator page (docs/design.md §7, ADR 0012): the batches table has a
Label column and the batch page a Label term, both showing the submitter's text as text — markup
in a label is never interpreted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api.live import LiveServer
from tests.web.conftest import process, submit
from tests.web.test_pages import open_with_token

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

HOSTILE_LABEL = '<img src=x onerror="window.labelRan=1">autumn & <b>"import"</b>'


def test_labels_show_as_text_in_the_table_and_on_the_batch_page(
    page: Any, live: LiveServer, sources: list[str]
) -> None:
    labelled = submit(live, sources[:1], label=HOSTILE_LABEL)
    plain = submit(live, sources[1:2])
    assert (labelled["label"], plain["label"]) == (HOSTILE_LABEL, None)

    open_with_token(page, live.url + "/")
    assert page.get_by_role("columnheader", name="Label").is_visible()
    row = page.locator(f"tr[data-batch-id='{labelled['id']}']")
    row.wait_for()
    cell = row.locator("td.label")
    assert cell.inner_text() == HOSTILE_LABEL
    assert cell.locator("img, b").count() == 0
    plain_row = page.locator(f"tr[data-batch-id='{plain['id']}']")
    assert plain_row.locator("td.label").inner_text() == "—"

    page.goto(f"{live.url}/batches/{labelled['id']}")  # the token is kept for the session
    summary = page.locator("#summary")
    summary.get_by_text("Label", exact=True).wait_for()
    assert summary.locator("dt").first.inner_text() == "Label"
    assert summary.locator("dd").first.inner_text() == HOSTILE_LABEL
    assert summary.locator("img, b").count() == 0
    assert page.evaluate("window.labelRan") is None

    page.goto(f"{live.url}/batches/{plain['id']}")
    page.locator("#summary dt").first.wait_for()
    assert "Label" not in page.locator("#summary dt").all_inner_texts()


def test_items_without_a_ref_are_named_by_their_sources_file_name(
    page: Any, live: LiveServer, sources: list[str]
) -> None:
    """A folder submission has no refs: the contact sheet names each item by its source's file
    name (its card's caption and picture), never by its UUID."""
    body = {"items": [{"source": s} for s in sources[:2]], "ratios": ["1:1"], "max_side": 96}
    response = live.client.post("/v1/batches", json=body)
    assert response.status_code == 201, response.text
    batch = response.json()
    process(live, batch["id"])
    items = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    open_with_token(page, f"{live.url}/batches/{batch['id']}")
    for item in items:
        name = Path(item["source"]).name
        page.get_by_alt_text(f"Source image of {name}").first.wait_for()
    text = page.locator("#sheet").inner_text()
    assert not [item["id"] for item in items if item["id"] in text]

"""The operator page end to end in headless Chromium against a live server, on a batch a real
worker processed from generated images: the token flow, the batches table and its progress
bars, the contact sheet with its crop boxes, the timeline, requeue and cancel, and keyboard
access."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from tests.api.live import running
from tests.web.conftest import (
    RATIOS,
    TOKEN,
    ProcessedBatch,
    enter_token,
    process,
    save_artifact,
    submit,
)

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

TAB_PRESSES_MAX = 60
SEGMENT_OF_STATE = {
    "succeeded": "succeeded",
    "failed": "failed",
    "abandoned": "abandoned",
    "in_progress": "in_progress",
    "queued": "waiting",
    "retryable": "waiting",
}


def focused_name(page: Any) -> str:
    """The focused element's id, else its aria-label, else its text."""
    name: str = page.evaluate(
        "() => { const e = document.activeElement;"
        " return e.id || e.getAttribute('aria-label') || e.textContent.trim(); }"
    )
    return name


def tab_to(page: Any, name: str) -> None:
    """Press Tab until the element called `name` (see `focused_name`) has the focus."""
    for _ in range(TAB_PRESSES_MAX):
        page.keyboard.press("Tab")
        if focused_name(page) == name:
            return
    pytest.fail(f"Tab never reached {name}")


def open_with_token(page: Any, url: str) -> None:
    """Open `url`, answer the token form, and wait until the page shows its data."""
    page.goto(url)
    enter_token(page)
    page.locator("#content").wait_for(state="visible")


def segments(bar: Any) -> dict[str, int]:
    """The progress bar's segments as {segment name: count}."""
    return {
        s.get_attribute("data-state"): int(s.get_attribute("data-count"))
        for s in bar.locator(".seg").all()
    }


def expected_segments(counts: dict[str, int]) -> dict[str, int]:
    """What the bar should show for the API's counts: queued and retryable share a segment."""
    wanted: dict[str, int] = {}
    for state, n in counts.items():
        if n:
            wanted[SEGMENT_OF_STATE[state]] = wanted.get(SEGMENT_OF_STATE[state], 0) + n
    return wanted


def test_without_the_token_no_data_is_shown(page: Any, processed: ProcessedBatch) -> None:
    """Every page asks for the token and shows no batch, item or image until it is given; a
    wrong token is refused the same way; the right one loads the data."""
    item = processed.items[0]
    for path in ("/", f"/batches/{processed.id}", f"/batches/{processed.id}/items/{item['id']}"):
        page.goto(processed.live.url + path)
        page.get_by_label("API token").wait_for(state="visible")
        assert page.locator("#content").is_hidden()
        body = page.locator("body").inner_text()
        assert "sku-" not in body
        assert processed.id[:8] not in body.replace(processed.id, "")
        assert page.locator("img[src^='blob:']").count() == 0
    enter_token(page, "not-the-token")
    page.get_by_text("The API token was not accepted").wait_for()
    assert page.locator("#content").is_hidden()
    enter_token(page)
    page.locator("#content").wait_for(state="visible")
    page.locator("#timeline tbody tr").first.wait_for()
    assert page.evaluate("sessionStorage.getItem('batchcrop.apiToken')") == TOKEN


def test_batches_table_shows_the_batch_with_matching_progress(
    page: Any, processed: ProcessedBatch
) -> None:
    """The index lists the real batch with its state, failures by category, and a progress bar
    whose segments equal the API's counts and whose widths are proportional to them."""
    open_with_token(page, processed.live.url + "/")
    row = page.locator(f"tr[data-batch-id='{processed.id}']")
    row.wait_for()
    assert row.get_attribute("data-state") == "failed"
    assert "invalid_image: 1" in row.locator("td.failures").inner_text()
    bar = row.locator(".bar")
    assert expected_segments(processed.status["counts"]) == segments(bar)
    inner_width = bar.evaluate("el => el.clientWidth")
    for segment in bar.locator(".seg").all():
        share = int(segment.get_attribute("data-count")) / processed.status["total"]
        assert abs(segment.bounding_box()["width"] - share * inner_width) <= 1.0
    label = bar.get_attribute("aria-label")
    assert f"{processed.status['total']} items" in label
    assert "1 failed" in label
    save_artifact(page, "index.png")
    row.get_by_role("link").click()
    page.wait_for_url(re.compile(f"/batches/{processed.id}$"))


def test_contact_sheet_draws_each_crop_box_on_its_source(
    page: Any, processed: ProcessedBatch
) -> None:
    """Each succeeded item shows its source thumbnail with one box per ratio whose geometry is
    the item's crop_box in oriented source pixels, scaled onto the thumbnail, beside every
    derivative image; the broken item shows why it has no picture."""
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}")
    cards = page.locator("#sheet li.card")
    cards.first.wait_for()
    assert len(processed.items) == cards.count()
    page.wait_for_function(
        "n => document.querySelectorAll('#sheet img.derivative[src^=\"blob:\"]').length === n",
        arg=len(RATIOS) * (len(processed.items) - 1),
    )
    for item in processed.items:
        card = page.locator(f"li.card[data-item-id='{item['id']}']")
        if item["state"] != "succeeded":
            card.get_by_text("Source not shown").wait_for()
            continue
        overlay = card.locator("svg.boxes")
        thumb = card.locator("img.thumb")
        page.wait_for_function(
            "el => el.complete && el.naturalWidth > 0", arg=thumb.element_handle()
        )
        page.wait_for_function(
            "el => el.querySelectorAll('rect').length > 0", arg=overlay.element_handle()
        )
        source_w, source_h = (int(v) for v in overlay.get_attribute("viewBox").split()[2:])
        shown, drawn = thumb.bounding_box(), overlay.bounding_box()
        assert abs(shown["width"] - drawn["width"]) < 1
        assert abs(shown["height"] - drawn["height"]) < 1
        scale = shown["width"] / source_w
        assert abs(shown["height"] / source_h - scale) < 0.02
        for derivative in item["derivatives"]:
            rect = overlay.locator(f"rect[data-ratio='{derivative['ratio']}']")
            left, top, right, bottom = derivative["crop_box"]
            box = rect.bounding_box()
            # The outline (2 px, centred on the edge) widens the painted box by a pixel or two.
            assert abs(box["x"] - (drawn["x"] + left * scale)) <= 2
            assert abs(box["y"] - (drawn["y"] + top * scale)) <= 2
            assert abs(box["width"] - (right - left) * scale) <= 3
            assert abs(box["height"] - (bottom - top) * scale) <= 3
        alts = card.locator("img.derivative").evaluate_all("els => els.map(e => e.alt)")
        assert sorted(
            f"{d['ratio']} derivative of {item['ref']}" for d in item["derivatives"]
        ) == sorted(a.split(",")[0] for a in alts)
    rotated = next(i for i in processed.items if i["ref"] == "sku-5")
    viewbox = page.locator(f"li.card[data-item-id='{rotated['id']}'] svg.boxes")
    assert viewbox.get_attribute("viewBox") == "0 0 120 240"
    save_artifact(page, "batch.png")


def test_contact_sheet_pages_with_the_items_cursor(page: Any, processed: ProcessedBatch) -> None:
    """With three items a page, the sheet walks forward and back through every item once."""
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}?per_page=3")
    seen: list[str] = []
    while True:
        page.locator("#sheet li.card").first.wait_for()
        ids = page.locator("#sheet li.card").evaluate_all("els => els.map(e => e.dataset.itemId)")
        seen.extend(ids)
        next_button = page.get_by_role("button", name="Next page")
        if next_button.is_disabled():
            break
        next_button.click()
        page.wait_for_function(
            "first => document.querySelector('#sheet li.card')?.dataset.itemId !== first",
            arg=ids[0],
        )
    assert [i["id"] for i in processed.items] == seen
    page.get_by_role("button", name="Previous page").click()
    page.get_by_text("Items 4 to 6 of 7").wait_for()


def test_item_timeline_lists_every_transition(page: Any, processed: ProcessedBatch) -> None:
    """The item page shows its creation (at the batch's creation: it logs no event), then each
    event of the item in order: attempt, transition, worker, lease token and reason, as the
    events endpoint has them."""
    item = next(i for i in processed.items if i["ref"] == "sku-6")
    events = processed.live.client.get(
        f"/v1/batches/{processed.id}/events", params={"item": item["id"]}
    ).json()["events"]
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}/items/{item['id']}")
    rows = page.locator("#timeline tbody tr")
    assert len(events) + 1 == rows.count()
    assert "new → queued" in " ".join(rows.first.inner_text().split())
    for event, row in zip(events, rows.all()[1:], strict=True):
        text = row.inner_text()
        assert str(event["attempt"]) in text
        assert event["to_state"].replace("_", " ") in text
        for field in ("worker_id", "lease_token", "reason"):
            if event[field]:
                assert event[field] in text
    assert "invalid_image" in page.locator("#summary").inner_text()
    save_artifact(page, "item.png")


def test_requeue_click_changes_the_state(page: Any, processed: ProcessedBatch) -> None:
    """Dismissing the confirmation changes nothing; accepting it requeues the failed item:
    the API and the page both show the batch queued again, with a new progress bar."""
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}")
    requeue = page.get_by_role("button", name="Requeue failed and abandoned items")
    page.once("dialog", lambda dialog: dialog.dismiss())
    requeue.click()
    page.get_by_text("Nothing was changed.").wait_for()
    assert processed.live.client.get(f"/v1/batches/{processed.id}").json()["state"] == "failed"
    page.once("dialog", lambda dialog: dialog.accept())
    requeue.click()
    page.get_by_text("Requeued. The batch is now in progress.").wait_for()
    status = processed.live.client.get(f"/v1/batches/{processed.id}").json()
    assert (
        status["state"],
        status["counts"]["queued"],
        status["counts"]["failed"],
    ) == ("in_progress", 1, 0)
    assert expected_segments(status["counts"]) == segments(page.locator("#progress .bar"))
    broken = next(i for i in processed.items if i["ref"] == "sku-6")
    page.locator(f"li.card[data-item-id='{broken['id']}'][data-state='queued']").wait_for()
    assert page.locator("#problem-items").is_hidden()


def test_cancel_asks_first_then_cancels(page: Any, live: Any, sources: list[str]) -> None:
    """On an unprocessed batch, the keyboard reaches Cancel; Enter asks for a confirmation and,
    once given, the unclaimed items are abandoned `cancelled` and the page shows it."""
    batch = submit(live, sources[:3])
    open_with_token(page, f"{live.url}/batches/{batch['id']}")
    page.locator("#sheet li.card").first.wait_for()
    page.locator("body").focus()
    tab_to(page, "cancel")
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")
    page.get_by_text("Cancel requested.").wait_for()
    page.locator("#summary").get_by_text("abandoned").first.wait_for()
    status = live.client.get(f"/v1/batches/{batch['id']}").json()
    assert (status["state"], status["failures"]) == ("abandoned", {"cancelled": 3})
    assert page.get_by_role("button", name="Cancel batch").is_disabled()


def test_pause_resume_and_priority_from_the_page(page: Any, live: Any, sources: list[str]) -> None:
    """Pause asks first, then the batch is paused and the button offers Resume; a new priority
    set from its field reaches the batch."""
    batch = submit(live, sources[:2])
    open_with_token(page, f"{live.url}/batches/{batch['id']}")
    page.locator("#sheet li.card").first.wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Pause batch").click()
    page.get_by_text("Paused.").wait_for()
    page.get_by_role("button", name="Resume batch").wait_for()
    assert live.client.get(f"/v1/batches/{batch['id']}").json()["paused"] is True
    page.locator("#priority").fill("4")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Set priority").click()
    page.get_by_text("Priority set to 4.").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Resume batch").click()
    page.get_by_text("Resumed.").wait_for()
    status = live.client.get(f"/v1/batches/{batch['id']}").json()
    assert (status["paused"], status["priority"]) == (False, 4)


def test_keyboard_reaches_every_action(page: Any, processed: ProcessedBatch) -> None:
    """Tabbing from the top of the batch page reaches the deadline field, both action buttons,
    a per-item requeue and the pager, each with a visible focus outline; Enter on the focused
    requeue button opens its confirmation."""
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}?per_page=3")
    page.locator("#sheet li.card").first.wait_for()
    page.locator("body").focus()
    reached: list[str] = []
    for _ in range(TAB_PRESSES_MAX):
        page.keyboard.press("Tab")
        name = focused_name(page)
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert outline != "none", name
        reached.append(name)
        if name == "requeue":
            break
    assert reached.index("deadline-hours") < reached.index("requeue")
    seen_dialog: list[str] = []

    def dismiss(dialog: Any) -> None:
        seen_dialog.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.keyboard.press("Enter")
    page.get_by_text("Nothing was changed.").wait_for()
    assert seen_dialog == ["Requeue the 1 failed and abandoned items of this batch?"]
    # Cancel is disabled on this finished batch, so Tab skips it (its own test uses the keys).
    for name in ("Requeue sku-6", "Timeline of sku-0", "sheet-next"):
        tab_to(page, name)


AUDIT_SCRIPT = (Path(__file__).parent / "audit.js").read_text()


def test_pages_pass_the_accessibility_audit(page: Any, processed: ProcessedBatch) -> None:
    """On each page with its data loaded: every image has alt text, every field a label, every
    button and link a name, one h1 and no skipped heading level, and all text meets WCAG AA
    contrast against its background."""
    item = next(i for i in processed.items if i["ref"] == "sku-6")
    open_with_token(page, processed.live.url + "/")
    page.locator("#batches tbody tr").first.wait_for()
    assert page.evaluate(AUDIT_SCRIPT) == []
    page.goto(f"{processed.live.url}/batches/{processed.id}")
    page.locator("#sheet li.card").first.wait_for()
    page.get_by_text("Source not shown").wait_for()
    assert page.evaluate(AUDIT_SCRIPT) == []
    page.goto(f"{processed.live.url}/batches/{processed.id}/items/{item['id']}")
    page.locator("#timeline tbody tr").first.wait_for()
    assert page.evaluate(AUDIT_SCRIPT) == []
    page.evaluate("sessionStorage.clear()")
    page.reload()
    page.get_by_label("API token").wait_for()
    assert page.evaluate(AUDIT_SCRIPT) == []


def test_index_follows_a_running_batch_with_etags(page: Any, live: Any, sources: list[str]) -> None:
    """The index updates a batch's row while a worker runs it, without a reload: it polls the
    batch with If-None-Match (answered 304 while nothing moved), no faster than Retry-After,
    and stops polling once the batch is terminal."""
    batch = submit(live, sources[:-1])
    polls: list[tuple[float, str | None, int]] = []

    def record(response: Any) -> None:
        # When the browser sent the request (seconds): the test thread runs the worker between
        # Playwright calls, so responses can reach this handler in bunches.
        if response.url.endswith(f"/v1/batches/{batch['id']}"):
            polls.append(
                (
                    response.request.timing["startTime"] / 1000,
                    response.request.headers.get("if-none-match"),
                    response.status,
                )
            )

    page.on("response", record)
    open_with_token(page, live.url + "/")
    row = page.locator(f"tr[data-batch-id='{batch['id']}']")
    assert row.get_attribute("data-state") == "queued"
    page.wait_for_timeout(2500)  # a few polls of an unchanged batch: 304s
    final = process(live, batch["id"])
    page.locator(f"tr[data-batch-id='{batch['id']}'][data-state='succeeded']").wait_for(
        timeout=20_000
    )
    bar = page.locator(f"tr[data-batch-id='{batch['id']}'] .bar")
    assert {"succeeded": final["total"]} == segments(bar)
    assert any(etag and status == 304 for _, etag, status in polls), polls
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(polls)]
    assert min(gaps) >= 0.9, polls  # Retry-After is at least 1 s
    count = len(polls)
    page.wait_for_timeout(2500)
    assert count == len(polls)  # terminal: no Retry-After, no more polls


def test_forget_token_hides_the_data_again(page: Any, processed: ProcessedBatch) -> None:
    """ "Forget token" removes the token from the tab: after the reload the form is back and the
    batch is not shown."""
    open_with_token(page, processed.live.url + "/")
    page.locator(f"tr[data-batch-id='{processed.id}']").wait_for()
    page.get_by_role("button", name="Forget token").click()
    page.get_by_label("API token").wait_for(state="visible")
    assert page.evaluate("sessionStorage.getItem('batchcrop.apiToken')") is None
    assert page.locator("#content").is_hidden()
    assert page.locator(f"tr[data-batch-id='{processed.id}']").count() == 0


def test_without_a_configured_token_the_page_loads_directly(
    page: Any, make_app: Any, sources: list[str]
) -> None:
    """A loopback server without BATCHCROP_API_TOKEN needs no token: the page never asks."""
    with running(make_app(api_token=None)) as open_server:
        batch = submit(open_server, sources[:2])
        page.goto(f"{open_server.url}/batches/{batch['id']}")
        page.locator("#sheet li.card").nth(1).wait_for()
        assert page.get_by_label("API token").is_hidden()
        assert page.get_by_role("button", name="Forget token").is_hidden()


def test_failed_items_show_why_as_text(page: Any, processed: ProcessedBatch) -> None:
    """The failed item's message (what the decoder said) is in the failed-items table, in the
    item's summary and on its failed transition; a message holding markup is shown as text,
    never as elements."""
    broken = next(i for i in processed.items if i["state"] == "failed")
    message = broken["error_message"]
    assert message.startswith("cannot identify image file")
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}")
    row = page.locator(f"#problem-items tr[data-item-id='{broken['id']}']")
    row.wait_for()
    assert message == row.locator("td.message").inner_text()

    # A message is stored as its ender gave it: markup in it must stay text on the page.
    marked = submit(processed.live, [broken["source"]])
    (claim,) = processed.live.app.leases.claim("test-worker", 1, group_ids=[marked["id"]])
    markup = "<img src=x onerror=alert(1)> <b>bold</b>"
    processed.live.app.leases.fail(claim, "invalid_image", message=markup)
    page.goto(f"{processed.live.url}/batches/{marked['id']}/items/{claim.item_id}")
    page.locator("#timeline tbody tr").nth(2).wait_for()
    assert markup in page.locator("#summary").inner_text()
    failed_row = page.locator("#timeline tbody tr").nth(2)
    assert markup == failed_row.locator("td.message").inner_text()
    assert page.locator("#summary img, #summary b, #timeline img, #timeline b").count() == 0

    page.goto(f"{processed.live.url}/batches/{processed.id}/items/{broken['id']}")
    page.locator("#timeline tbody tr").first.wait_for()
    assert message in page.locator("#summary").inner_text()
    messages = [m.inner_text() for m in page.locator("#timeline td.message").all()]
    assert message == messages[-1]
    save_artifact(page, "item-failed.png")

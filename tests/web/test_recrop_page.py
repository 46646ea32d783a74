"""The re-crop editor and the contact sheet's derivatives in headless Chromium: a focus box
drawn with the pointer or moved with the keyboard, each ratio's previewed window, the re-crop
applied and rendered by a real worker, and a derivative enlarged and its crop box highlighted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.conftest import RATIOS, ProcessedBatch, process, save_artifact
from tests.web.test_pages import open_with_token

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

TAB_PRESSES_MAX = 60
KEY_STEP_SHARE = 0.02  # recrop.js: an arrow key moves the box by this share of the long side


def _item(processed: ProcessedBatch, ref: str) -> dict[str, Any]:
    return next(i for i in processed.items if i["ref"] == ref)


def _open_editor(page: Any, processed: ProcessedBatch, item: dict[str, Any]) -> None:
    """Open the item's page and wait until the editor shows its source and first preview."""
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}/items/{item['id']}")
    image = page.locator("img.recrop-image")
    page.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=image.element_handle())
    page.locator("#recrop-windows li").first.wait_for()


def _previewed(page: Any, focus: str) -> dict[str, list[int]]:
    """Wait for the preview of the box `focus` (`l,t,r,b`); its windows by ratio."""
    page.locator(f"#recrop-windows[data-focus='{focus}']").wait_for()
    assert len(RATIOS) == page.locator("svg.recrop-overlay rect.preview").count()
    return {
        li.get_attribute("data-ratio"): [
            int(v) for v in li.get_attribute("data-crop-box").split(",")
        ]
        for li in page.locator("#recrop-windows li").all()
    }


def _windows(processed: ProcessedBatch, item: dict[str, Any], focus: str) -> dict[str, list[int]]:
    answer = processed.live.client.get(
        f"/v1/batches/{processed.id}/items/{item['id']}/windows", params={"focus": focus}
    ).json()
    return {w["ratio"]: w["crop_box"] for w in answer["windows"]}


def test_drag_a_box_preview_apply_and_see_the_new_derivatives(
    page: Any, processed: ProcessedBatch
) -> None:
    """A box dragged on the source is previewed with the API's windows; applying it queues the
    item; once a worker has rendered it the page shows new derivatives (new keys) whose crop
    boxes are the previewed windows, and the timeline shows the re-crop with its box."""
    item = _item(processed, "sku-0")
    old_keys = {d["key"] for d in item["derivatives"]}
    _open_editor(page, processed, item)
    area = page.locator("svg.recrop-overlay").bounding_box()
    page.mouse.move(area["x"] + area["width"] * 0.08, area["y"] + area["height"] * 0.2)
    page.mouse.down()
    page.mouse.move(area["x"] + area["width"] * 0.3, area["y"] + area["height"] * 0.7, steps=6)
    page.mouse.up()
    focus = page.locator("rect.focus-box").get_attribute("data-box")
    box = [int(v) for v in focus.split(",")]
    assert box[0] < box[2] <= 0.35 * 320
    assert box[1] < box[3] <= 0.75 * 200

    previewed = _previewed(page, focus)

    assert _windows(processed, item, focus) == previewed
    save_artifact(page, "recrop.png")
    page.get_by_role("button", name="Apply re-crop").click()
    page.get_by_text("Re-crop pending").wait_for()
    pending = processed.live.client.get(f"/v1/batches/{processed.id}/items/{item['id']}").json()
    assert (pending["state"], pending["focus_box"]) == ("queued", box)

    process(processed.live, processed.id)

    page.locator("#item-state .badge", has_text="succeeded").wait_for(timeout=30_000)
    figures = page.locator("#sheet figure.derivative-figure")
    page.wait_for_function(
        "old => [...document.querySelectorAll('#sheet figure.derivative-figure')]"
        ".every(f => !old.includes(f.dataset.key))",
        arg=sorted(old_keys),
    )
    redone = processed.live.client.get(f"/v1/batches/{processed.id}/items/{item['id']}").json()
    assert {d["key"] for d in redone["derivatives"]} == {
        f.get_attribute("data-key") for f in figures.all()
    }
    assert not old_keys & {d["key"] for d in redone["derivatives"]}
    assert previewed == {d["ratio"]: d["crop_box"] for d in redone["derivatives"]}
    timeline = page.locator("#timeline tbody").inner_text()
    assert f"recrop focus box {focus}" in timeline


def test_keyboard_moves_resizes_and_applies_the_box(page: Any, processed: ProcessedBatch) -> None:
    """Tab reaches the focus box; arrows move it, Shift+arrows resize it, each change is
    previewed, and Enter applies the re-crop with the box as shown."""
    item = _item(processed, "sku-1")  # 200 x 300
    _open_editor(page, processed, item)
    page.locator("body").focus()
    for _ in range(TAB_PRESSES_MAX):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('focus-box')"):
            break
    else:
        pytest.fail("Tab never reached the focus box")
    left, top, right, bottom = (
        int(v) for v in page.locator("rect.focus-box").get_attribute("data-box").split(",")
    )
    step = round(300 * KEY_STEP_SHARE)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Shift+ArrowDown")
    page.keyboard.press("Shift+ArrowLeft")
    expected = [left + 2 * step, top - step, right + step, bottom]
    focus = ",".join(map(str, expected))
    assert focus == page.locator("rect.focus-box").get_attribute("data-box")
    assert f"Focus box: {expected[0]},{expected[1]} to" in page.locator("#recrop-box").inner_text()
    assert _windows(processed, item, focus) == _previewed(page, focus)

    page.keyboard.press("Enter")

    page.get_by_text("Re-crop pending").wait_for()
    pending = processed.live.client.get(f"/v1/batches/{processed.id}/items/{item['id']}").json()
    assert (pending["state"], pending["focus_box"]) == ("queued", expected)
    assert page.get_by_role("button", name="Apply re-crop").is_disabled()


def test_a_derivative_enlarges_and_highlights_its_crop_box(
    page: Any, processed: ProcessedBatch
) -> None:
    """Hovering or focusing a derivative highlights its ratio's crop box on the source; clicking
    it (or Enter) opens it enlarged in a dialog that Esc closes, giving the focus back; each
    re-croppable card links to its item's re-crop editor."""
    item = _item(processed, "sku-0")
    open_with_token(page, f"{processed.live.url}/batches/{processed.id}")
    card = page.locator(f"li.card[data-item-id='{item['id']}']")
    opener = card.locator("figure[data-ratio='16:9'] button.enlarge")
    page.wait_for_function("el => !el.disabled", arg=opener.element_handle())
    box = card.locator("svg.boxes rect[data-ratio='16:9']")
    other = card.locator("svg.boxes rect[data-ratio='1:1']")
    opener.hover()
    page.wait_for_function("el => el.classList.contains('highlight')", arg=box.element_handle())
    assert "highlight" not in (other.get_attribute("class") or "")
    page.mouse.move(0, 0)
    page.wait_for_function("el => !el.classList.contains('highlight')", arg=box.element_handle())

    opener.click()
    dialog = page.locator("dialog#enlarged")
    dialog.wait_for(state="visible")
    assert dialog.locator("img").get_attribute("src").startswith("blob:")
    assert "16:9 derivative of sku-0" in dialog.inner_text()
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == (
        "Enlarge the 16:9 derivative of sku-0"
    )
    page.wait_for_function("el => el.classList.contains('highlight')", arg=box.element_handle())
    page.keyboard.press("Enter")
    dialog.wait_for(state="visible")
    dialog.get_by_role("button", name="Close").click()
    dialog.wait_for(state="hidden")
    broken = _item(processed, "sku-6")  # failed invalid_image: re-croppable, no derivatives
    assert page.get_by_role("link", name="Re-crop sku-6").count() == 1
    assert page.locator(f"li.card[data-item-id='{broken['id']}'] button.enlarge").count() == 0
    card.get_by_role("link", name="Re-crop sku-0").click()
    page.locator("img.recrop-image").wait_for()
    assert page.url.endswith(f"/items/{item['id']}#recrop-heading")


def test_two_operators_re_cropping_one_item_the_second_is_told_why_not(
    page: Any, browser: Any, processed: ProcessedBatch
) -> None:
    """Two operators have the same item's editor open; the first applies a box, then the
    second (whose page still shows the item succeeded) applies another: the API refuses it
    (409), the second page says why and keeps its box, and the item keeps the first box."""
    item = _item(processed, "sku-2")
    other_context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        other = other_context.new_page()
        other.set_default_timeout(15_000)
        _open_editor(page, processed, item)
        _open_editor(other, processed, item)
        boxes = []
        for tab, key in ((page, "ArrowRight"), (other, "ArrowDown")):
            tab.locator("rect.focus-box").focus()
            tab.keyboard.press(key)
            boxes.append(tab.locator("rect.focus-box").get_attribute("data-box"))
            _previewed(tab, boxes[-1])
        assert boxes[0] != boxes[1]

        page.get_by_role("button", name="Apply re-crop").click()
        page.get_by_text("Re-crop pending").wait_for()
        other.get_by_role("button", name="Apply re-crop").click()

        refusal = other.locator("#recrop-message", has_text="Not re-cropped")
        refusal.wait_for()
        save_artifact(other, "recrop-refused.png")
        assert boxes[1] == other.locator("rect.focus-box").get_attribute("data-box")
        pending = processed.live.client.get(f"/v1/batches/{processed.id}/items/{item['id']}").json()
        assert (pending["state"], ",".join(map(str, pending["focus_box"]))) == (
            "queued",
            boxes[0],
        )
        events = processed.live.client.get(
            f"/v1/batches/{processed.id}/events", params={"item": item["id"]}
        ).json()["events"]
        assert sum(e["reason"] == "recrop" for e in events) == 1
    finally:
        other_context.close()

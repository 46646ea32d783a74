"""The contact sheet shows padded and trimmed outputs as they are (docs/design.md §6, fit): a
padded derivative's box is drawn with the frame its padding makes around the picture, a trimmed
item's trimmed box is drawn on its source, and the caption says the output is padded. Real
server, real worker, headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.conftest import enter_token, process, save_artifact, submit

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _frame(derivative: dict[str, Any]) -> tuple[float, float, float, float]:
    """The padded output's extent in source pixels, from its crop box and padding."""
    left, top, right, bottom = derivative["crop_box"]
    pad_left, pad_top, pad_right, pad_bottom = derivative["padding"]
    scale_x = (right - left) / (derivative["width"] - pad_left - pad_right)
    scale_y = (bottom - top) / (derivative["height"] - pad_top - pad_bottom)
    return (
        left - pad_left * scale_x,
        top - pad_top * scale_y,
        right + pad_right * scale_x,
        bottom + pad_bottom * scale_y,
    )


def test_contact_sheet_draws_padded_frames_and_the_trimmed_box(
    page: Any, live: Any, sources: list[str]
) -> None:
    """Under `pad` with trim, each padded ratio has a dashed frame rect reaching past the crop
    box by its padding, the trimmed box is drawn, and the caption says `padded`."""
    batch = submit(live, sources, fit="pad", trim=12)
    process(live, batch["id"])
    items = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    page.goto(f"{live.url}/batches/{batch['id']}")
    enter_token(page)
    page.locator("#content").wait_for(state="visible")
    page.locator("#sheet li.card").first.wait_for()
    checked = 0
    for item in (i for i in items if i["state"] == "succeeded"):
        overlay = page.locator(f"li.card[data-item-id='{item['id']}'] svg.boxes")
        page.wait_for_function(
            "el => el.querySelectorAll('rect').length > 0", arg=overlay.element_handle()
        )
        trim_box = item["derivatives"][0]["trim_box"]
        trim = overlay.locator("rect.trim-box")
        assert [round(float(trim.get_attribute(a))) for a in ("x", "y")] == trim_box[:2]
        for derivative in item["derivatives"]:
            if derivative["padding"] == [0, 0, 0, 0]:
                continue  # the picture already had the ratio: nothing to pad
            frame = overlay.locator(f"rect.padded-frame[data-ratio='{derivative['ratio']}']")
            x, y, width, height = (
                float(frame.get_attribute(a)) for a in ("x", "y", "width", "height")
            )
            left, top, right, bottom = _frame(derivative)
            assert abs(x - left) < 1
            assert abs(y - top) < 1
            assert abs(width - (right - left)) < 1
            assert abs(height - (bottom - top)) < 1
            crop = derivative["crop_box"]
            reaches = [x < crop[0], y < crop[1], x + width > crop[2], y + height > crop[3]]
            assert any(reaches)
            checked += 1
        captions = page.locator(f"li.card[data-item-id='{item['id']}'] figure.derivative-figure")
        assert "padded" in " ".join(captions.all_inner_texts())
    assert checked > 0
    save_artifact(page, "batch-padded.png")

"""The window preview: the crop boxes a render would report, computed without rendering."""

from __future__ import annotations

import random

import pytest
from PIL import Image

from batchcrop.crop import MemoryBudget, RenderSpec, render
from batchcrop.crop.crop_boxes import preview_windows
from batchcrop.crop.decode import decode_rgb, decoded_size, open_image
from batchcrop.crop.errors import InvalidFocus
from tests.crop.images import STORE_AS, encode, scene

RATIOS = ["1:1", "16:9", "3:4", "4:3", "9:16", "21:9", "2:1"]


def _stored(image: Image.Image, orientation: int, fmt: str = "JPEG") -> bytes:
    """`image` stored under EXIF `orientation` (the upright picture is `image`)."""
    turn = STORE_AS[orientation]
    stored = image if turn is None else image.transpose(turn)
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(stored, fmt, exif=exif.tobytes())


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
@pytest.mark.parametrize(
    ("size", "max_side"), [((1601, 977), 200), ((613, 1211), 90), ((333, 257), 400)]
)
def test_preview_equals_the_rendered_crop_boxes(
    orientation: int, size: tuple[int, int], max_side: int
) -> None:
    """For random focus boxes (and none), each ratio's previewed box is the rendered crop box."""
    rng = random.Random(f"{orientation}{size}{max_side}")
    width, height = size
    data = _stored(
        scene(width, height, (width // 5, height // 3, width // 2, height // 2)), orientation
    )
    spec = RenderSpec.from_input({"ratios": RATIOS, "max_side": max_side})
    focuses = [None]
    for _ in range(3):
        left, top = rng.randrange(width - 20), rng.randrange(height - 20)
        focuses.append(
            (left, top, rng.randrange(left + 1, width + 50), rng.randrange(top + 1, height))
        )
    for focus in focuses:
        previewed = preview_windows(data, spec, focus=focus)
        rendered = render(data, spec, focus=focus)
        assert [(str(r.ratio), r.crop_box) for r in rendered] == [
            (str(ratio), box) for ratio, box in previewed.crop_boxes
        ]
        assert (width, height) == previewed.size


def test_preview_reports_the_clipped_focus_and_refuses_one_outside() -> None:
    """A box reaching past the picture is clipped, as the render clips it; one wholly outside
    is `InvalidFocus`."""
    data = encode(scene(300, 200, None), "PNG")
    spec = RenderSpec.from_input({"ratios": ["1:1"], "max_side": 64})
    assert preview_windows(data, spec, focus=(250, 100, 900, 900)).focus == (250, 100, 300, 200)
    with pytest.raises(InvalidFocus):
        preview_windows(data, spec, focus=(300, 0, 400, 50))


def test_preview_holds_the_budget_while_it_decodes() -> None:
    """With a budget too small for the saliency decode the preview is refused before decoding."""
    data = encode(scene(2000, 1500, None), "PNG")
    spec = RenderSpec.from_input({"ratios": ["1:1"], "max_side": 64})
    with pytest.raises(Exception, match="decode memory budget"):
        preview_windows(data, spec, budget=MemoryBudget(1 << 20))


@pytest.mark.parametrize("orientation", [1, 6])
@pytest.mark.parametrize("size", [(1000, 750), (1001, 751), (17, 2003), (4099, 33)])
def test_decoded_size_is_what_the_decode_gives(orientation: int, size: tuple[int, int]) -> None:
    """Read from the headers alone, the decoded size equals the real decode's at every factor."""
    data = _stored(scene(*size, None), orientation)
    for factor in (1, 2, 4, 8):
        predicted = decoded_size(open_image(data, 10**8), factor)
        assert predicted == decode_rgb(open_image(data, 10**8), factor).size

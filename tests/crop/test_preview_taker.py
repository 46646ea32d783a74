"""The stored preview taken from a render's own decode: the same bytes as `source_preview`
makes, and no second decode when the render decodes at the preview's reduction (a default
render always does)."""

from __future__ import annotations

import hashlib

import pytest

from batchcrop.crop import PreviewTaker, Ratio, RenderSpec, render, source_preview
from batchcrop.crop.spec import MAX_SIDE_PX_DEFAULT
from tests.crop.images import encode, scene

RATIOS = tuple(Ratio.parse(text) for text in ("1:1", "16:9"))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    ("fmt", "size", "max_side", "taken"),
    [
        ("PNG", (1600, 1000), 500, True),  # no DCT scaling: every render's decode is whole
        ("JPEG", (4000, 2500), MAX_SIDE_PX_DEFAULT, True),  # the default render's 1/2 decode
        ("JPEG", (4000, 2500), 400, False),  # this render decodes at 1/8, the preview at 1/2
        ("JPEG", (4000, 2500), 3000, False),  # and this one whole
        ("JPEG", (500, 300), 300, True),  # smaller than the preview: both whole
    ],
)
def test_the_preview_is_taken_from_the_render_when_it_decodes_alike(
    fmt: str, size: tuple[int, int], max_side: int, taken: bool
) -> None:
    """The taker keeps a preview from the render exactly when the render decodes at the
    preview's reduction, and whichever way it is made the preview is byte for byte
    `source_preview(source)`."""
    data = encode(scene(*size, (size[0] // 3, size[1] // 4, size[0] // 2, size[1] // 2)), fmt)
    taker = PreviewTaker(data)
    render(data, RenderSpec(RATIOS, max_side=max_side), on_decode=taker)
    preview = taker.preview(data)
    expected = source_preview(data)
    assert taken == (taker.taken is not None)
    assert _sha(expected.data) == _sha(preview.data)
    assert (expected.width, expected.height, expected.source_width, expected.source_height) == (
        preview.width,
        preview.height,
        preview.source_width,
        preview.source_height,
    )
    assert max(preview.width, preview.height) == min(640, max(size))


def test_the_render_is_unchanged_by_the_taker() -> None:
    """Handing the render's decode to the taker leaves every output's bytes as they were."""
    data = encode(scene(1600, 1000, (500, 200, 900, 600)), "PNG")
    spec = RenderSpec(RATIOS, max_side=800)
    alone = [_sha(r.data) for r in render(data, spec)]
    taker = PreviewTaker(data)
    assert alone == [_sha(r.data) for r in render(data, spec, on_decode=taker)]
    assert taker.taken is not None

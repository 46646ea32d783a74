"""The committed sample photos (the README quickstart renders them) all render."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchcrop.crop import Ratio, RenderSpec, render
from tests.crop.images import decode

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples"
SAMPLE_MAX_BYTES = 60 * 1024
SPEC = RenderSpec(tuple(Ratio.parse(t) for t in ("1:1", "4:3", "16:9", "3:4")))
SAMPLES = sorted(path.name for path in SAMPLES_DIR.iterdir() if not path.name.startswith("."))


def test_there_are_samples() -> None:
    """At least six samples are committed."""
    assert len(SAMPLES) >= 6


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_renders_every_ratio(name: str) -> None:
    """Each sample is small and renders all four default ratios into whole JPEGs."""
    data = (SAMPLES_DIR / name).read_bytes()
    assert len(data) <= SAMPLE_MAX_BYTES
    renditions = render(data, SPEC)
    assert [r.ratio for r in renditions] == list(SPEC.ratios)
    for rendition in renditions:
        assert decode(rendition.data).size == (rendition.width, rendition.height)


def test_rotated_sample_is_upright() -> None:
    """The EXIF-rotated phone shot renders in portrait orientation (600 wide, 900 tall)."""
    (square, *_rest, tall) = render((SAMPLES_DIR / "phone-rotated.jpg").read_bytes(), SPEC)
    assert square.crop_box[2] - square.crop_box[0] == 600
    assert tall.crop_box[3] - tall.crop_box[1] == 800


def test_alpha_sample_has_white_background() -> None:
    """The logo's transparent corners (black underneath) render white."""
    (square, *_rest) = render((SAMPLES_DIR / "logo-alpha.png").read_bytes(), SPEC)
    corner = decode(square.data).getpixel((2, 2))
    assert isinstance(corner, tuple)
    assert min(corner) > 245

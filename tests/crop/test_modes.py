"""Every input format and pixel mode comes out as the right colours."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from batchcrop.crop import Ratio, RenderSpec, UnsupportedImage, render
from batchcrop.crop.decode import decode_rgb, open_image, reduction
from tests.crop.images import cmyk_profile_to_lab, decode, encode, mean_rgb, scene

SPEC = RenderSpec((Ratio(1, 1),), max_side=32)
CENTRE = (8, 8, 24, 24)
CORNER = (0, 0, 4, 4)


def rendered_colour(data: bytes, box: tuple[int, int, int, int] = CENTRE) -> tuple[float, ...]:
    """Mean colour over `box` of the 1:1, 32-pixel rendition of `data`."""
    (rendition,) = render(data, SPEC)
    return mean_rgb(decode(rendition.data), box)


def assert_close(
    expected: tuple[float, ...], actual: tuple[float, ...], tolerance: float = 6.0
) -> None:
    """Colours match within `tolerance` per channel (JPEG rounding)."""
    assert max(abs(e - a) for e, a in zip(expected, actual, strict=True)) <= tolerance, actual


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("JPEG", {"quality": 95}),
        ("JPEG", {"quality": 95, "progressive": True}),
        ("PNG", {}),
        ("WEBP", {"lossless": True}),
        ("TIFF", {}),
        ("TIFF", {"compression": "tiff_lzw"}),
        ("BMP", {}),
    ],
)
def test_rgb_formats(fmt: str, options: dict[str, object]) -> None:
    """An RGB picture in each accepted format renders with its colour."""
    data = encode(Image.new("RGB", (60, 40), (30, 90, 200)), fmt, **options)
    assert_close((30, 90, 200), rendered_colour(data))


def test_grayscale() -> None:
    """8-bit grayscale keeps its level."""
    data = encode(Image.new("L", (60, 40), 100), "JPEG", quality=95)
    assert_close((100, 100, 100), rendered_colour(data))


@pytest.mark.parametrize(
    ("mode", "fmt", "value"),
    [("L", "JPEG", 90), ("L", "PNG", 90), ("LA", "PNG", (90, 255)), ("1", "PNG", 1)],
)
def test_grey_sources_give_one_channel_jpegs(mode: str, fmt: str, value: object) -> None:
    """Grey in, grey out: one channel is a third of the samples to store, and what a viewer
    shows is the same."""
    picture = Image.effect_noise((300, 200), 40).convert(mode) if mode == "L" else None
    picture = picture or Image.new(mode, (300, 200), value)  # type: ignore[arg-type]
    colour_spec = RenderSpec(ratios=(Ratio(16, 9),), max_side=200)
    (grey,) = render(encode(picture, fmt), colour_spec)
    assert decode(grey.data).mode == "L"
    (colour,) = render(encode(picture.convert("RGB"), fmt), colour_spec)
    assert decode(colour.data).mode == "RGB"
    assert grey.crop_box == colour.crop_box
    assert len(grey.data) < len(colour.data)


def test_bilevel() -> None:
    """A 1-bit image renders black and white, not garbage."""
    image = Image.new("1", (60, 40), 1)
    assert_close((255, 255, 255), rendered_colour(encode(image, "PNG")))


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_sixteen_bit_grayscale_is_not_white(fmt: str) -> None:
    """16-bit grayscale at half scale renders mid-gray (clipping at 255 would make it white)."""
    image = Image.fromarray(np.full((40, 60), 32768, dtype=np.uint16))
    data = encode(image, fmt)
    assert Image.open(io.BytesIO(data)).mode.startswith("I")
    assert_close((128, 128, 128), rendered_colour(data))


def test_rgba_flattened_onto_white_not_hidden_black() -> None:
    """Fully transparent pixels stored as black render white; opaque ones keep their colour."""
    pixels = np.zeros((40, 40, 4), dtype=np.uint8)
    pixels[10:30, 10:30] = (0, 160, 0, 255)
    data = encode(Image.fromarray(pixels), "PNG")
    assert_close((255, 255, 255), rendered_colour(data, CORNER))
    assert_close((0, 160, 0), rendered_colour(data, (13, 13, 19, 19)), tolerance=10)


def test_half_transparent_blends_with_white() -> None:
    """50 % transparent red over white is pink."""
    data = encode(Image.new("RGBA", (40, 40), (255, 0, 0, 128)), "PNG")
    assert_close((255, 127, 127), rendered_colour(data))


def test_gray_alpha() -> None:
    """LA with zero alpha over black renders white."""
    data = encode(Image.new("LA", (40, 40), (0, 0)), "PNG")
    assert_close((255, 255, 255), rendered_colour(data))


def test_palette() -> None:
    """A palette image renders its palette colour."""
    image = Image.new("RGB", (40, 40), (220, 120, 20)).quantize(4)
    assert_close((220, 120, 20), rendered_colour(encode(image, "PNG")))


def test_palette_transparency() -> None:
    """A palette index marked transparent renders white even if its colour is black."""
    image = Image.new("P", (40, 40), 0)
    image.putpalette([0, 0, 0, 0, 0, 255] + [0] * 762)
    image.paste(1, (10, 10, 30, 30))
    data = encode(image, "PNG", transparency=0)
    assert_close((255, 255, 255), rendered_colour(data, CORNER))
    assert_close((0, 0, 255), rendered_colour(data, (13, 13, 19, 19)), tolerance=12)


def test_webp_with_alpha() -> None:
    """WebP with alpha is flattened onto white too."""
    data = encode(Image.new("RGBA", (40, 40), (0, 0, 0, 0)), "WEBP", lossless=True)
    assert_close((255, 255, 255), rendered_colour(data))


def test_gif_first_frame() -> None:
    """An animated GIF renders its first frame."""
    frames = [Image.new("RGB", (40, 40), colour) for colour in ((200, 0, 0), (0, 0, 200))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    assert_close((200, 0, 0), rendered_colour(data), tolerance=10)


def test_cmyk_without_profile() -> None:
    """Untagged CMYK cyan ink converts naively to cyan."""
    data = encode(Image.new("CMYK", (40, 40), (255, 0, 0, 0)), "JPEG", quality=95)
    assert_close((0, 255, 255), rendered_colour(data))


def test_cmyk_with_icc_profile_uses_it() -> None:
    """CMYK with an embedded profile goes through it to sRGB (this profile prints cyan as red)."""
    icc = cmyk_profile_to_lab((50.0, 70.0, 50.0))
    data = encode(Image.new("CMYK", (40, 40), (255, 0, 0, 0)), "JPEG", quality=95, icc_profile=icc)
    red, green, blue = rendered_colour(data)
    assert red > 180
    assert max(green, blue) < 60


def test_progressive_jpeg_decodes_at_reduced_scale() -> None:
    """A progressive JPEG is DCT-scaled on decode to the smallest size covering the request
    (1/4 and 1/8 with a margin of 1.5 for detail)."""
    data = encode(scene(1600, 1200, (700, 500, 900, 700)), "JPEG", progressive=True)
    opened = open_image(data, 10**8)
    assert decode_rgb(opened, reduction(opened, 0.24)).size == (800, 600)
    opened = open_image(data, 10**8)
    assert decode_rgb(opened, reduction(opened, 0.16)).size == (400, 300)
    opened = open_image(data, 10**8)
    assert decode_rgb(opened, reduction(opened, 0.24, margin=1.0)).size == (400, 300)
    (rendition,) = render(data, RenderSpec((Ratio(1, 1),), max_side=200))
    assert decode(rendition.data).size == (200, 200)


def test_cmyk_tiff() -> None:
    """CMYK TIFFs convert too (magenta ink renders magenta)."""
    data = encode(Image.new("CMYK", (40, 40), (0, 255, 0, 0)), "TIFF")
    assert_close((255, 0, 255), rendered_colour(data))


def test_thirty_two_bit_integer_grayscale() -> None:
    """Mode I pixels are read as 16-bit levels (40000 of 65535 is 156 of 255)."""
    data = encode(Image.fromarray(np.full((40, 60), 40000, dtype=np.int32)), "TIFF")
    assert_close((156, 156, 156), rendered_colour(data))


def test_float_pixels_are_unsupported() -> None:
    """Floating-point TIFFs have no agreed range and are refused as unsupported."""
    data = encode(Image.fromarray(np.full((40, 60), 0.5, dtype=np.float32)), "TIFF")
    with pytest.raises(UnsupportedImage):
        render(data, SPEC)


def test_mpo_camera_jpeg() -> None:
    """A multi-picture (MPO) camera JPEG renders its first picture."""
    first = Image.new("RGB", (60, 40), (200, 30, 30))
    second = Image.new("RGB", (60, 40), (30, 30, 200))
    data = encode(first, "MPO", save_all=True, append_images=[second])
    assert_close((200, 30, 30), rendered_colour(data), tolerance=10)


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("PNG", {}), ("WEBP", {}), ("TIFF", {}), ("TIFF", {"compression": "tiff_lzw"})],
)
def test_orientation_outside_jpeg(fmt: str, options: dict[str, object]) -> None:
    """EXIF orientation is honoured once in PNG, WebP and TIFF too (6: stored sideways)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    image = Image.new("RGB", (300, 200), (90, 90, 90))
    data = encode(image, fmt, exif=exif.tobytes(), **options)
    (rendition,) = render(data, RenderSpec((Ratio(1, 1),), max_side=64))
    assert rendition.crop_box[2:] == (200, rendition.crop_box[1] + 200)
    assert rendition.crop_box[3] <= 300

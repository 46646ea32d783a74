"""Bad and hostile files end in the right error class, never in a partial or wrong picture."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from batchcrop.crop import (
    MAX_SOURCE_PIXELS,
    ImageTooLarge,
    InvalidImage,
    Ratio,
    RenderSpec,
    UnsupportedImage,
    render,
)
from batchcrop.crop.errors import CropError
from batchcrop.errors import Category, PermanentItemError, public_message
from tests.crop.images import encode, scene

SPEC = RenderSpec((Ratio(1, 1), Ratio(16, 9)), max_side=64)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims `width` by `height` followed by one empty IDAT and IEND."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")


def psd_header(width: int, height: int) -> bytes:
    """A minimal Photoshop file: header, empty sections, raw RGB data."""
    header = b"8BPS" + struct.pack(">H6xHIIHH", 1, 3, height, width, 8, 3)
    return header + struct.pack(">III", 0, 0, 0) + struct.pack(">H", 0) + bytes(width * height * 3)


def jpeg() -> bytes:
    """A valid 400x300 JPEG with content."""
    return encode(scene(400, 300, (100, 100, 200, 200)), "JPEG", quality=90)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"hello, world\n",
        b"<!DOCTYPE html><html><body><img src=x></body></html>",
        b"\x00" * 1000,
        b"\xff\xd8\xff\xe0garbage",
        b"\x89PNG\r\n\x1a\n",
    ],
    ids=["empty", "text", "html", "zeros", "jpeg-magic-only", "png-magic-only"],
)
def test_not_an_image(data: bytes) -> None:
    """Empty files, text, HTML and bare magic numbers are invalid images."""
    with pytest.raises(InvalidImage) as caught:
        render(data, SPEC)
    assert caught.value.category == Category.INVALID_IMAGE


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_truncated_jpeg_is_never_a_partial_picture(keep: float) -> None:
    """A JPEG cut short raises InvalidImage instead of rendering a grey-bottomed picture."""
    data = jpeg()
    with pytest.raises(InvalidImage):
        render(data[: int(len(data) * keep)], SPEC)


@pytest.mark.parametrize("progressive", [False, True])
def test_truncated_jpeg_at_reduced_scale(progressive: bool) -> None:
    """Truncation is caught on the DCT-scaled decode path too."""
    data = encode(scene(1600, 1200, (600, 500, 900, 700)), "JPEG", progressive=progressive)
    with pytest.raises(InvalidImage):
        render(data[: len(data) // 2], RenderSpec((Ratio(1, 1),), max_side=100))


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "WEBP", "TIFF", "BMP"])
def test_truncated_other_formats(fmt: str) -> None:
    """Truncated PNG, GIF, WebP, TIFF and BMP files raise InvalidImage."""
    data = encode(scene(300, 200, (100, 50, 160, 110)), fmt)
    with pytest.raises(InvalidImage):
        render(data[: len(data) * 2 // 3], SPEC)


def test_corrupt_png_header_checksum() -> None:
    """A PNG whose header chunk fails its CRC raises InvalidImage."""
    data = bytearray(encode(scene(100, 80, None), "PNG"))
    data[29] ^= 0xFF  # last byte of the IHDR CRC
    with pytest.raises(InvalidImage):
        render(bytes(data), SPEC)


@pytest.mark.parametrize(
    "size", [(9_000, 9_000), (10_000, 10_000), (20_000, 20_000), (2**31 - 1, 2**31 - 1)]
)
def test_bomb_dimensions_refused_before_decoding(size: tuple[int, int]) -> None:
    """Headers claiming our limit, Pillow's warning or its hard limit all raise ImageTooLarge."""
    with pytest.raises(ImageTooLarge) as caught:
        render(png_header_only(*size), SPEC)
    assert caught.value.category == Category.IMAGE_TOO_LARGE


def test_max_pixels_is_honoured() -> None:
    """A caller's lower pixel limit refuses an ordinary image over it, and admits it at it."""
    data = jpeg()
    with pytest.raises(ImageTooLarge):
        render(data, SPEC, max_pixels=400 * 300 - 1)
    assert len(render(data, SPEC, max_pixels=400 * 300)) == 2


def test_default_limit_is_below_pillow_warning() -> None:
    """Our default limit is what callers hit, not Pillow's DecompressionBombWarning."""
    assert Image.MAX_IMAGE_PIXELS is not None
    assert MAX_SOURCE_PIXELS <= Image.MAX_IMAGE_PIXELS


@pytest.mark.parametrize(
    "data",
    [
        b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>',
        b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>',
        b"\xef\xbb\xbf  <svg/>",
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n",
        b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic",
        b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf",
        b"\x00\x00\x00\x20ftypavis\x00\x00\x00\x00avisavifmsf1miafMA1B",
        b"\x00\x00\x00\x18ftypmiaf\x00\x00\x00\x00miafavif",
    ],
    ids=["svg", "svg-xml", "svg-bom", "pdf", "heic", "avif", "avif-sequence", "avif-compatible"],
)
def test_unsupported_formats_named(data: bytes) -> None:
    """SVG, PDF, HEIC and AVIF (still or a sequence, named as the major or a compatible brand)
    are unsupported images, not invalid ones."""
    with pytest.raises(UnsupportedImage) as caught:
        render(data, SPEC)
    assert caught.value.category == Category.UNSUPPORTED_IMAGE


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic",
        b"\x00\x00\x00\x20ftypavis\x00\x00\x00\x00avisavifmsf1miafMA1B",
    ],
    ids=["heic", "avif-sequence"],
)
def test_the_heif_message_survives_the_public_sanitiser(data: bytes) -> None:
    """What operators read for a HEIF or AVIF source names the formats (a "HEIF/AVIF" was
    redacted as a path: "<path> images are not supported")."""
    with pytest.raises(UnsupportedImage) as caught:
        render(data, SPEC)
    assert public_message(str(caught.value)) == "HEIF and AVIF images are not supported"


def _vips_tiff(interpretation: str, values: list[float], cast: str | None = None) -> bytes:
    """A small TIFF as libvips writes it, in layouts Pillow does not decode."""
    import pyvips  # noqa: PLC0415  (loads libvips: only these tests need it)

    picture = (pyvips.Image.black(8, 8, bands=3) + values).copy(interpretation=interpretation)
    if cast == "labs":
        picture = picture.Lab2LabS()
    data: bytes = picture.tiffsave_buffer()
    return data


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: _vips_tiff("lab", [50, 0, 0], "labs"), "CIELab TIFF images of 16-bit signed"),
        (lambda: _vips_tiff("lab", [50, 0, 0]), "CIELab TIFF images of 32-bit floating-point"),
        (lambda: _vips_tiff("srgb", [0.5, 0.5, 0.5]), "RGB TIFF images of 32-bit floating-point"),
    ],
    ids=["cielab-16-bit", "cielab-float", "rgb-float"],
)
def test_tiff_layouts_pillow_cannot_decode_are_unsupported(
    make: Callable[[], bytes], said: str
) -> None:
    """A well-formed TIFF in a pixel layout Pillow does not decode (libvips' 16-bit and float
    CIELab, float RGB) is `unsupported_image` naming the layout, not "not a recognised image"."""
    with pytest.raises(UnsupportedImage) as caught:
        render(make(), SPEC)
    assert said in (public_message(str(caught.value)) or "")


def test_psd_is_unsupported() -> None:
    """A Photoshop file Pillow could open is refused as unsupported."""
    with pytest.raises(UnsupportedImage, match="PSD"):
        render(psd_header(8, 8), SPEC)


@pytest.mark.parametrize("fmt", ["ICO", "PPM", "TGA", "PCX"])
def test_other_pillow_formats_are_unsupported(fmt: str) -> None:
    """Formats Pillow reads but the product does not take are unsupported images."""
    data = encode(Image.new("RGB", (16, 16), (1, 2, 3)), fmt)
    with pytest.raises(UnsupportedImage):
        render(data, SPEC)


def test_errors_are_permanent_item_errors() -> None:
    """Every crop error is a PermanentItemError, so the worker fails the item without retrying."""
    for error in (InvalidImage, ImageTooLarge, UnsupportedImage):
        assert issubclass(error, CropError)
        assert issubclass(error, PermanentItemError)


# Pillow only warns about a corrupt EXIF block; the product runs with default warning filters.
@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")
def test_corrupt_exif_does_not_lose_the_picture() -> None:
    """A JPEG whose EXIF block is garbage still renders, as stored (400x300, not rotated)."""
    data = jpeg()
    app1 = b"Exif\x00\x00" + b"MM\x00\x2a\x00\x00\xff\xff"
    segment = b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1
    square, wide = render(data[:2] + segment + data[2:], SPEC)
    assert (square.crop_box[2] - square.crop_box[0], square.crop_box[3]) == (300, 300)
    assert (wide.crop_box[0], wide.crop_box[2]) == (0, 400)


FUZZ_BASE = scene(120, 80, (30, 20, 70, 60))
FUZZ_SOURCES = {
    "jpeg": encode(FUZZ_BASE, "JPEG"),
    "progressive": encode(FUZZ_BASE, "JPEG", progressive=True),
    "png": encode(FUZZ_BASE, "PNG"),
    "gif": encode(FUZZ_BASE, "GIF"),
    "webp": encode(FUZZ_BASE, "WEBP"),
    "tiff": encode(FUZZ_BASE, "TIFF"),
    "bmp": encode(FUZZ_BASE, "BMP"),
}


# Pillow only warns about damaged metadata; the product runs with default warning filters.
@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(sorted(FUZZ_SOURCES)),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=8),
    keep=st.floats(0.05, 1.0),
)
def test_damaged_files_fail_cleanly(name: str, edits: list[tuple[float, int]], keep: float) -> None:
    """Randomly damaged or cut files either render whole outputs or raise a CropError."""
    data = bytearray(FUZZ_SOURCES[name])
    for where, value in edits:
        data[int(where * len(data))] = value
    try:
        renditions = render(bytes(data[: max(1, int(len(data) * keep))]), SPEC)
    except CropError:
        return
    assert [r.ratio for r in renditions] == list(SPEC.ratios)

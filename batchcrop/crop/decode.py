"""Open an image safely, then decode it once, oriented and in 8-bit sRGB-ish RGB.

`open_image` reads only headers: it refuses non-images, formats we do not take, decompression
bombs and CPU bombs (`structure`) before a single pixel is decoded. `decode_rgb` decodes at the
smallest JPEG DCT scale that still covers what the caller needs, applies EXIF orientation and
converts every mode to RGB. Both are pure functions of their inputs and safe to call from many
threads at once: they touch no Pillow global (`ImageFile.LOAD_TRUNCATED_IMAGES` stays False, so
a truncated file is an error, never a partial picture).
"""

from __future__ import annotations

import io
import math
import struct
import zlib
from dataclasses import dataclass
from functools import cache

from PIL import ExifTags, Image, UnidentifiedImageError

from batchcrop.crop.colour import BACKGROUND_RGB, to_rgb
from batchcrop.crop.errors import ImageTooLarge, InvalidImage, UnsupportedImage
from batchcrop.crop.structure import refuse_scan_bombs

ACCEPTED_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "TIFF", "BMP")
"""Pillow format names we open. Pillow's JPEG opener also yields "MPO" for many camera JPEGs."""

_SNIFF_BYTES = 1024

# Errors Pillow and its codecs raise on corrupt or truncated data (SyntaxError is Pillow's
# "not a valid X file" from several plugins; struct/zlib errors escape from header parsing).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error, zlib.error)
_BOMB_ERRORS = (Image.DecompressionBombError, Image.DecompressionBombWarning)

# EXIF orientation value ⇒ the transpose that displays the image upright.
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SWAPS_AXES = frozenset({5, 6, 7, 8})
_DCT_FORMATS = frozenset({"JPEG", "MPO"})
DCT_FACTORS = (1, 2, 4, 8)
"""The reductions a JPEG's DCT decodes at (`reduction`)."""
_BYTES_PER_PIXEL = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}
_WEBP_DECODER_BYTES_PER_PIXEL = 12
_RESAMPLER_COPY_BYTES_PER_PIXEL = 3
# Encoder buffers, the saliency copy and libjpeg's working memory (outputs and canvases are
# counted by the render's plan).
_COST_OVERHEAD_BYTES = 16 << 20


@dataclass(frozen=True)
class OpenedImage:
    """An image whose headers were read and checked; no pixels decoded yet.

    `size` is the upright (EXIF-oriented) width and height in source pixels. The object owns an
    open Pillow image: decode it once, from one thread.
    """

    image: Image.Image
    orientation: int
    size: tuple[int, int]


def open_image(data: bytes, max_pixels: int, *, structure_checked: bool = False) -> OpenedImage:
    """Identify `data` and check its dimensions and structure (`structure`, skipped when
    `structure_checked`: an earlier open of the same bytes did it); raise a `CropError`
    subclass if unusable."""
    if not data:
        raise InvalidImage("empty file (0 bytes)")
    _refuse_known_unsupported(data[:_SNIFF_BYTES])
    try:
        image = Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS)
    except _BOMB_ERRORS as exc:
        raise ImageTooLarge("image dimensions exceed the decompression limit") from exc
    except UnidentifiedImageError as exc:
        _refuse_unreadable_tiff(data)
        _refuse_other_pillow_format(data)
        raise InvalidImage("cannot identify image file: not a recognised image format") from exc
    except _DECODE_ERRORS as exc:
        raise InvalidImage(f"corrupt image header: {_said(exc)}") from exc
    width, height = image.size
    if width * height > max_pixels:
        image.close()
        raise ImageTooLarge(f"{width}x{height} exceeds {max_pixels} pixels")
    if image.format in _DCT_FORMATS and not structure_checked:
        try:
            refuse_scan_bombs(data)
        except InvalidImage:
            image.close()
            raise
    # Recent Pillow orients TIFFs itself (upright size at open, transpose on load).
    orientation = 1 if image.format == "TIFF" and _pillow_orients_tiff() else _orientation(image)
    if orientation in _SWAPS_AXES:
        width, height = height, width
    return OpenedImage(image=image, orientation=orientation, size=(width, height))


COARSE_REDUCTION_MARGIN = 1.5
"""A 1/4 or 1/8 DCT reduction is used only when it decodes at least this many pixels per output
pixel: below that its coarse, blocky scaling aliases, and no sharpening undoes it (ADR 0003)."""


def reduction(
    opened: OpenedImage,
    scale: float,
    margin: float = COARSE_REDUCTION_MARGIN,
    stored: tuple[int, int] | None = None,
) -> int:
    """The DCT reduction (1, 2, 4 or 8) a decode at `scale` uses: for a JPEG the largest whose
    result still covers `scale` of the source (as Pillow's `draft` picks it), 1/4 and 1/8 only
    with `margin` to spare (1.0 where sharpness does not matter); 1 otherwise. `stored` is the
    image's stored size read before a decode (whose draft changes the opened image's size)."""
    image = opened.image
    if scale >= 1.0 or image.format not in _DCT_FORMATS:
        return 1
    stored_w, stored_h = stored or image.size
    wanted = (max(1, math.ceil(stored_w * scale)), max(1, math.ceil(stored_h * scale)))
    room = min(stored_w // wanted[0], stored_h // wanted[1])  # whole reductions that cover
    spare = min(stored_w / wanted[0], stored_h / wanted[1])
    return next(f for f in (8, 4, 2, 1) if f <= room and (f < 4 or f <= spare / margin))


def decode_cost(opened: OpenedImage, factor: int) -> int:
    """An upper estimate, in bytes, of the memory `decode_rgb(opened, factor)` and the render
    after it hold at their peak; reads no pixel.

    Pillow keeps 1 byte per pixel for 1/L/P, 2 for 16-bit grey and 4 for every other mode (RGB
    included). Alive together: the decoded image, its RGB conversion unless it is RGB already
    (the strip-wise conversions add only a few MiB), the upright copy when EXIF turns it, one
    byte per pixel for the resampling's intermediates, and the larger of a progressive JPEG's
    or WebP's own decoder buffers (freed once the pixels are decoded) and the packed copy of
    the pixels libvips resamples afterwards (three bytes per pixel, `resample.resize_canvas`).
    """
    image = opened.image
    pixels = -(-image.width // factor) * -(-image.height // factor)
    stored = _BYTES_PER_PIXEL.get(image.mode, 4)
    converted = 0 if image.mode == "RGB" else 4
    turned = 4 if opened.orientation in _TRANSPOSE else 0
    decoder = 0
    if image.format in _DCT_FORMATS and image.info.get("progressive"):
        # A progressive JPEG keeps every DCT coefficient (2 bytes per component per source
        # pixel, at full resolution whatever the reduction) until its last scan.
        decoder = image.width * image.height * 2 * len(image.getbands())
    elif image.format == "WEBP":
        # libwebp decodes into its own full-size buffers before Pillow copies the pixels.
        decoder = image.width * image.height * _WEBP_DECODER_BYTES_PER_PIXEL
    later = max(decoder, pixels * _RESAMPLER_COPY_BYTES_PER_PIXEL)
    return pixels * (stored + converted + turned + 1) + later + _COST_OVERHEAD_BYTES


def decoded_size(opened: OpenedImage, factor: int) -> tuple[int, int]:
    """The upright size `decode_rgb(opened, factor)` returns, read from the headers alone.

    A JPEG asked for 1/`factor` of its stored size decodes at the DCT scale Pillow's `draft`
    picks for that request (the largest of 8, 4, 2, 1 its integer ratio allows), each side
    rounded up as libjpeg does; other formats decode whole.
    """
    image = opened.image
    if factor <= 1 or image.format not in _DCT_FORMATS:
        return opened.size
    width, height = image.size
    ratio = min(width // max(1, width // factor), height // max(1, height // factor))
    scale = next(s for s in (8, 4, 2, 1) if ratio >= s)
    size = (-(-width // scale), -(-height // scale))
    return (size[1], size[0]) if opened.orientation in _SWAPS_AXES else size


def decode_rgb(
    opened: OpenedImage,
    factor: int,
    *,
    keep_alpha: bool = False,
    background: tuple[int, int, int] = BACKGROUND_RGB,
) -> Image.Image:
    """Decode once, reduced `factor` times by the JPEG's DCT (see `reduction`; other formats
    decode whole), upright, as mode RGB (transparency flattened onto `background`; RGBA with
    `keep_alpha` when the image has transparency: `colour.to_rgb`).

    An `OpenedImage` decodes once: open the bytes again for another factor. Raise
    `InvalidImage` for truncated/corrupt data and `UnsupportedImage` for a mode that has no
    faithful RGB conversion.
    """
    image = opened.image
    if factor > 1 and image.format in _DCT_FORMATS:
        # Asking for exactly 1/factor of the stored size makes draft() choose `factor`.
        image.draft(image.mode, (image.width // factor, image.height // factor))
    try:
        image.load()
    except _BOMB_ERRORS as exc:
        raise ImageTooLarge("image dimensions exceed the decompression limit") from exc
    except _DECODE_ERRORS as exc:
        raise InvalidImage(f"corrupt or truncated image data: {_said(exc)}") from exc
    rgb = to_rgb(image, keep_alpha=keep_alpha, background=background)
    transpose = _TRANSPOSE.get(opened.orientation)
    return rgb if transpose is None else rgb.transpose(transpose)


def _said(exc: BaseException) -> str:
    """What a decoder said (e.g. "image file is truncated (3 bytes not processed)"), or its
    class name when it said nothing; made safe to show by `batchcrop.errors.public_message`."""
    return str(exc) or type(exc).__name__


def _orientation(image: Image.Image) -> int:
    """The EXIF orientation 1..8; 1 when absent, out of range or unreadable.

    Reads no pixel: a PNG's `getexif()` decodes the whole image to look for an eXIf chunk after
    the image data, so for PNG only a chunk before it (where writers put it) counts.
    """
    if image.format == "PNG" and "exif" not in image.info:
        return 1
    try:
        value = image.getexif().get(ExifTags.Base.Orientation, 1)
    except _DECODE_ERRORS:
        # A broken EXIF block should not lose an otherwise good picture: show it as stored.
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


@cache
def _pillow_orients_tiff() -> bool:
    """Whether this Pillow applies a TIFF's orientation tag itself, probed once on a 2x1 TIFF."""
    buffer = io.BytesIO()
    Image.new("L", (2, 1)).save(buffer, format="TIFF", tiffinfo={ExifTags.Base.Orientation: 6})
    with Image.open(buffer) as probe:
        return probe.size == (1, 2)


def _refuse_known_unsupported(head: bytes) -> None:
    """Name the common non-raster or unsupported formats Pillow would call 'unidentified'."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith(b"%pdf-"):
        raise UnsupportedImage("PDF documents are not supported")
    if text.startswith(b"<svg") or (text.startswith(b"<?xml") and b"<svg" in text):
        raise UnsupportedImage("SVG images are not supported")
    if _is_heif(head):
        # No slash: the message is shown through `public_message`, which reads "A/B" as a path.
        raise UnsupportedImage("HEIF and AVIF images are not supported")


HEIF_BRANDS = frozenset(
    {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"}
    | {b"avif", b"avis", b"avio"}
)
"""ISO BMFF brands of HEIF still images and sequences (HEVC) and AVIF (`avis`: a sequence)."""


def _is_heif(head: bytes) -> bool:
    """Whether `head` starts with an ISO BMFF `ftyp` box whose major or any compatible brand is
    a HEIF or AVIF one (an AVIF sequence may name `avis` first, `avif` only among the rest)."""
    if head[4:8] != b"ftyp":
        return False
    size = int.from_bytes(head[:4], "big")
    brands = [head[8:12], *(head[at : at + 4] for at in range(16, min(size, len(head)) - 3, 4))]
    return any(brand in HEIF_BRANDS for brand in brands)


_TIFF_BYTE_ORDERS = {b"II*\x00": "<", b"MM\x00*": ">"}
_TIFF_PHOTOMETRIC = 262
_TIFF_BITS_PER_SAMPLE = 258
_TIFF_SAMPLE_FORMAT = 339
_TIFF_VALUE_BYTES = {3: 2, 4: 4}
"""Bytes per value of the TIFF field types these tags use (SHORT, LONG)."""
_TIFF_SPACES = {
    0: "grey",
    1: "grey",
    2: "RGB",
    3: "palette",
    4: "mask",
    5: "CMYK",
    6: "YCbCr",
    8: "CIELab",
    9: "ICC Lab",
    10: "ITU Lab",
}
_TIFF_SAMPLE_KINDS = {1: "unsigned", 2: "signed", 3: "floating-point"}


def _tiff_fields(data: bytes) -> dict[int, int]:
    """The first value of each SHORT or LONG field of a TIFF's first directory; {} when the
    header or the directory does not read. Parsed here rather than by Pillow, whose directory
    reader warns (a process-wide side effect) on the broken files this must also survive."""
    order = _TIFF_BYTE_ORDERS.get(data[:4])
    if order is None:
        return {}
    fields: dict[int, int] = {}
    try:
        (offset,) = struct.unpack_from(order + "I", data, 4)
        (count,) = struct.unpack_from(order + "H", data, offset)
        for entry in range(offset + 2, offset + 2 + 12 * count, 12):
            tag, kind, values, inline = struct.unpack_from(order + "HHI4s", data, entry)
            size = _TIFF_VALUE_BYTES.get(kind)
            if size is None or values == 0:
                continue
            where = inline if values * size <= 4 else data[struct.unpack(order + "I", inline)[0] :]
            fields[tag] = struct.unpack_from(order + ("H" if size == 2 else "I"), where)[0]
    except struct.error:
        return {}
    return fields


def _refuse_unreadable_tiff(data: bytes) -> None:
    """Raise UnsupportedImage for a TIFF whose first directory reads but whose pixel layout
    Pillow does not decode (16-bit or floating-point CIELab as libvips writes it, ICC Lab,
    32-bit float RGB ...): a valid picture in a layout we do not take, not a broken file."""
    fields = _tiff_fields(data)
    if _TIFF_PHOTOMETRIC not in fields:
        return  # not a TIFF, or not even its first directory reads: an invalid image
    photometric = fields[_TIFF_PHOTOMETRIC]
    space = _TIFF_SPACES.get(photometric, f"photometric {photometric}")
    kind = _TIFF_SAMPLE_KINDS.get(fields.get(_TIFF_SAMPLE_FORMAT, 1), "unknown")
    bits = fields.get(_TIFF_BITS_PER_SAMPLE, 1)
    raise UnsupportedImage(f"{space} TIFF images of {bits}-bit {kind} samples are not supported")


def _refuse_other_pillow_format(data: bytes) -> None:
    """Raise UnsupportedImage if Pillow knows the format (PSD, ICO, TGA ...) but we refuse it."""
    try:
        with Image.open(io.BytesIO(data)) as other:
            name = other.format or "this format"
    except (*_BOMB_ERRORS, *_DECODE_ERRORS):
        return
    raise UnsupportedImage(f"{name} images are not supported")

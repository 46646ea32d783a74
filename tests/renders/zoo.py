"""The image zoo: one small picture per format, mode and quirk a render handles differently."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image

from tests.crop.images import adobe_rgb_profile, encode, scene


def _photo() -> Image.Image:
    return scene(360, 240, (200, 60, 300, 200), seed=7)


def _rgba() -> bytes:
    picture = _photo().convert("RGBA")
    alpha = np.zeros((240, 360), dtype=np.uint8)
    alpha[20:220, 40:320] = 255
    picture.putalpha(Image.fromarray(alpha))
    return encode(picture, "PNG")


def _rotated() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° clockwise to display
    return encode(_photo(), "JPEG", quality=90, exif=exif.tobytes())


def _grey16() -> bytes:
    levels = np.linspace(0, 65535, 360 * 240, dtype=np.uint16).reshape(240, 360)
    return encode(Image.fromarray(levels), "PNG")


ZOO: dict[str, Callable[[], bytes]] = {
    "jpeg": lambda: encode(_photo(), "JPEG", quality=90),
    "jpeg-progressive": lambda: encode(_photo(), "JPEG", quality=90, progressive=True),
    "jpeg-grey": lambda: encode(_photo().convert("L"), "JPEG", quality=90),
    "jpeg-cmyk": lambda: encode(_photo().convert("CMYK"), "JPEG", quality=90),
    "jpeg-exif-rotated": _rotated,
    "jpeg-adobe-rgb": lambda: encode(_photo(), "JPEG", quality=90, icc_profile=adobe_rgb_profile()),
    "png-rgb": lambda: encode(_photo(), "PNG"),
    "png-rgba": _rgba,
    "png-palette": lambda: encode(_photo().quantize(64), "PNG"),
    "png-grey16": _grey16,
    "gif": lambda: encode(_photo().quantize(32), "GIF"),
    "webp": lambda: encode(_photo(), "WEBP", quality=90),
    "tiff": lambda: encode(_photo(), "TIFF"),
    "bmp": lambda: encode(_photo(), "BMP"),
}
"""Name ⇒ a function making that source's bytes."""

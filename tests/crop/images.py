"""Generated test images: scenes with a subject at a known place, encoded in any format/mode."""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

Box = tuple[int, int, int, int]

# Orientation ⇒ the transpose that turns the upright picture into what a camera stores under that
# EXIF orientation: the inverse of what a viewer (PIL.ImageOps.exif_transpose) applies.
STORE_AS: dict[int, Image.Transpose | None] = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}

SUBJECT_RGB = (200, 40, 40)
STRIPE_RGB = (250, 220, 60)
BACKGROUND_RGB = (120, 130, 125)


def scene(width: int, height: int, subject: Box | None, *, seed: int = 0) -> Image.Image:
    """A muted, slightly noisy background with an optional striped red subject filling `subject`."""
    rng = np.random.default_rng(seed)
    base = np.empty((height, width, 3), dtype=np.float32)
    base[...] = BACKGROUND_RGB
    base += np.linspace(-12.0, 12.0, width, dtype=np.float32)[None, :, None]
    base += rng.normal(0.0, 4.0, size=base.shape).astype(np.float32)
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    if subject is not None:
        draw_subject(image, subject)
    return image


def draw_subject(image: Image.Image, box: Box) -> None:
    """Paint a red rectangle with yellow stripes (colour, contrast and edges) into `box`."""
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = box
    draw.rectangle((left, top, right - 1, bottom - 1), fill=SUBJECT_RGB)
    stripe = max(1, (right - left) // 6)
    for x in range(left + stripe, right - stripe, 2 * stripe):
        draw.rectangle(
            (x, top + stripe, min(x + stripe, right) - 1, bottom - stripe - 1), fill=STRIPE_RGB
        )


def encode(image: Image.Image, fmt: str, **options: Any) -> bytes:
    """Encode `image` with Pillow into bytes of format `fmt`."""
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def decode(data: bytes) -> Image.Image:
    """Decode rendered bytes fully (and check they are a whole JPEG)."""
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.format == "JPEG"
    return image


def contains(outer: Box, inner: Box) -> bool:
    """Whether box `inner` lies entirely inside box `outer` (right/bottom exclusive)."""
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and inner[2] <= outer[2]
        and inner[3] <= outer[3]
    )


def mean_rgb(image: Image.Image, box: Box) -> tuple[float, float, float]:
    """Mean RGB of `image` over `box`."""
    pixels = np.asarray(image.convert("RGB").crop(box), dtype=np.float64)
    red, green, blue = pixels.reshape(-1, 3).mean(axis=0)
    return float(red), float(green), float(blue)


def within_one_pixel(width: int, height: int, ratio_w: int, ratio_h: int) -> bool:
    """Whether width:height equals ratio_w:ratio_h within one pixel on the short side."""
    if ratio_w >= ratio_h:
        return abs(height - width * ratio_h / ratio_w) <= 1.0
    return abs(width - height * ratio_w / ratio_h) <= 1.0


def cmyk_profile_to_lab(lab: tuple[float, float, float]) -> bytes:
    """A minimal ICC v2 CMYK printer profile: paper is white, black ink black, any other ink `lab`.

    Its only job is to prove a profile is honoured: the naive conversion of full cyan ink is
    cyan, this profile says it is `lab`.
    """
    lightness, a_star, b_star = lab
    lab16 = (
        round(lightness * 0xFF00 / 100),
        round((a_star + 128) * 256),
        round((b_star + 128) * 256),
    )
    lut = b"mft2" + bytes(4) + bytes([4, 3, 2, 0])
    identity = [1, 0, 0, 0, 1, 0, 0, 0, 1]
    lut += b"".join(struct.pack(">i", value << 16) for value in identity)
    lut += struct.pack(">HH", 2, 2)
    lut += struct.pack(">8H", *([0, 0xFFFF] * 4))
    white, black = (0xFF00, 0x8000, 0x8000), (0, 0x8000, 0x8000)
    # Grid corners in order (c, m, y, k) with k fastest: odd indices carry black ink.
    corners = [white if index == 0 else black if index % 2 else lab16 for index in range(16)]
    lut += struct.pack(">48H", *(value for corner in corners for value in corner))
    lut += struct.pack(">6H", *([0, 0xFFFF] * 3))
    name = b"test CMYK\x00"
    desc = (
        b"desc" + bytes(4) + struct.pack(">I", len(name)) + name + bytes(8) + bytes(3) + bytes(67)
    )
    d50 = b"".join(struct.pack(">i", round(value * 65536)) for value in (0.9642, 1.0, 0.8249))
    wtpt = b"XYZ " + bytes(4) + d50
    tags = [(b"desc", desc), (b"wtpt", wtpt), (b"A2B0", lut)]
    offset = 128 + 4 + 12 * len(tags)
    table, body = struct.pack(">I", len(tags)), b""
    for signature, data in tags:
        padded = data + bytes(-len(data) % 4)
        table += signature + struct.pack(">II", offset + len(body), len(data))
        body += padded
    size = offset + len(body)
    header = struct.pack(">I", size) + bytes(4) + struct.pack(">I", 0x02100000)
    header += b"prtr" + b"CMYK" + b"Lab " + bytes(12) + b"acsp" + bytes(24)
    header += struct.pack(">I", 0) + d50 + bytes(4) + bytes(44)
    assert len(header) == 128
    return header + table + body


# Adobe RGB (1998) primaries adapted to D50 (the profile connection space), as ICC profiles list
# them, and its gamma; the grey profile is a dot-gain-like gamma on the D50 white.
ADOBE_RGB_D50 = (
    (0.6097, 0.3111, 0.0195),
    (0.2053, 0.6257, 0.0609),
    (0.1492, 0.0632, 0.7446),
)
ADOBE_RGB_GAMMA = 563 / 256  # 2.19921875, as the profile stores it
_D50 = (0.9642, 1.0, 0.8249)


def _xyz(values: tuple[float, float, float]) -> bytes:
    return b"XYZ " + bytes(4) + b"".join(struct.pack(">i", round(v * 65536)) for v in values)


def _curve(gamma: float) -> bytes:
    return b"curv" + bytes(4) + struct.pack(">IH", 1, round(gamma * 256))


def _profile(colour_space: bytes, name: bytes, tags: list[tuple[bytes, bytes]]) -> bytes:
    text = name + b"\x00"
    desc = b"desc" + bytes(4) + struct.pack(">I", len(text)) + text + bytes(8) + bytes(3 + 67)
    tags = [(b"desc", desc), (b"wtpt", _xyz(_D50)), *tags]
    offset = 128 + 4 + 12 * len(tags)
    table, body = struct.pack(">I", len(tags)), b""
    for signature, data in tags:
        table += signature + struct.pack(">II", offset + len(body), len(data))
        body += data + bytes(-len(data) % 4)
    header = struct.pack(">I", offset + len(body)) + bytes(4) + struct.pack(">I", 0x02100000)
    header += b"mntr" + colour_space + b"XYZ " + bytes(12) + b"acsp" + bytes(24)
    header += struct.pack(">I", 0) + _xyz(_D50)[8:] + bytes(4) + bytes(44)
    return header + table + body


def adobe_rgb_profile() -> bytes:
    """A matrix/TRC ICC v2 profile with Adobe RGB (1998)'s primaries and gamma."""
    red, green, blue = (_xyz(colorant) for colorant in ADOBE_RGB_D50)
    tags = [(b"rXYZ", red), (b"gXYZ", green), (b"bXYZ", blue)]
    tags += [(signature, _curve(ADOBE_RGB_GAMMA)) for signature in (b"rTRC", b"gTRC", b"bTRC")]
    return _profile(b"RGB ", b"Adobe RGB (1998) test", tags)


def grey_profile(gamma: float) -> bytes:
    """A grey ICC v2 profile with a pure gamma tone curve (gamma 1.0: linear light)."""
    return _profile(b"GRAY", b"grey test", [(b"kTRC", _curve(gamma))])

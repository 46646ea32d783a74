"""Source images for the chaos harness and the hostile-input tests, generated, never stored.

`clean_jpeg(n)` is a small distinct photo-like JPEG; `hostile()` is the corpus of bad and odd
files, each with the outcome the product must give it: `failed` with a named category, or
`succeeded` where the file is a legitimately renderable picture.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageDraw

CLEAN_SIZES_PX = ((320, 240), (240, 320), (400, 225), (256, 256))


@dataclass(frozen=True)
class Hostile:
    """One hostile file: its name (extension included), bytes and expected item outcome."""

    name: str
    data: bytes
    state: str
    category: str | None = None


def _scene(width: int, height: int, seed: int) -> Image.Image:
    rng = random.Random(seed)
    image = Image.new("RGB", (width, height), (rng.randrange(30, 120),) * 3)
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = rng.randrange(width), rng.randrange(height)
        r = rng.randrange(4, 20)
        colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        draw.ellipse((x - r, y - r, x + r, y + r), fill=colour)
    cx, cy = rng.randrange(width // 5, 4 * width // 5), rng.randrange(height // 5, 4 * height // 5)
    draw.ellipse((cx - 24, cy - 24, cx + 24, cy + 24), fill=(230, 40 + seed % 200, 50))
    return image


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def clean_jpeg(n: int) -> bytes:
    """The `n`-th clean source: a small JPEG, distinct bytes for every `n`."""
    width, height = CLEAN_SIZES_PX[n % len(CLEAN_SIZES_PX)]
    return _encode(_scene(width, height, n), "JPEG", quality=85)


def noise_jpeg(width: int, height: int, seed: int = 0) -> bytes:
    """A JPEG of random noise: large for its size in pixels (JPEG compresses noise badly)."""
    noise = random.Random(seed).randbytes(width * height * 3)
    return _encode(Image.frombytes("RGB", (width, height), noise), "JPEG", quality=95)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    crc = struct.pack(">I", zlib.crc32(kind + body))
    return struct.pack(">I", len(body)) + kind + body + crc


def png_bomb(width: int, height: int) -> bytes:
    """A tiny PNG declaring `width` x `height` 8-bit grey pixels, all zero (compresses ~1000:1)."""
    row = b"\x00" + b"\x00" * width
    compressor = zlib.compressobj(9)
    body = b"".join(compressor.compress(row) for _ in range(min(height, 64)))
    body += compressor.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunks = _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", body) + _png_chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def jpeg_huge_dimensions() -> bytes:
    """A real JPEG whose SOF marker was rewritten to claim 65,000 x 65,000 pixels."""
    data = bytearray(clean_jpeg(1))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, 65000, 65000)
    return bytes(data)


def jpeg_huge_exif() -> bytes:
    """A JPEG carrying a ~60 KB EXIF block: hundreds of tags, a long comment, nested IFDs."""
    exif = Image.Exif()
    exif[0x010E] = "x" * 50_000  # ImageDescription
    exif[0x0131] = "batchcrop chaos corpus"  # Software
    exif[0x0112] = 6  # Orientation: rotate
    gps = {1: "N", 2: (1.0, 2.0, 3.0), 3: "E", 4: (4.0, 5.0, 6.0)}
    exif[0x8825] = gps
    return _encode(_scene(320, 240, 7), "JPEG", quality=85, exif=exif.tobytes())


def jpeg_bad_orientation() -> bytes:
    """A JPEG whose EXIF orientation is out of range (9999)."""
    exif = Image.Exif()
    exif[0x0112] = 9999
    return _encode(_scene(240, 320, 8), "JPEG", quality=85, exif=exif.tobytes())


def cmyk_jpeg() -> bytes:
    """A CMYK JPEG without an ICC profile."""
    return _encode(_scene(300, 200, 9).convert("CMYK"), "JPEG", quality=85)


def animated(fmt: str) -> bytes:
    """An animated GIF or WebP of three frames."""
    frames = [_scene(160, 120, 20 + n) for n in range(3)]
    if fmt == "GIF":
        frames = [f.convert("P") for f in frames]
    return _encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100, loop=0)


def psd() -> bytes:
    """A minimal Photoshop file (a real image format the product does not take)."""
    width, height = 8, 8
    header = b"8BPS" + struct.pack(">H6xHIIHH", 1, 3, height, width, 8, 3)
    return header + struct.pack(">IIIH", 0, 0, 0, 0) + bytes(width * height * 3)


def _generators() -> list[Callable[[], Hostile]]:
    jpeg = clean_jpeg(3)
    return [
        lambda: Hostile("zero-byte.jpg", b"", "failed", "invalid_image"),
        lambda: Hostile("truncated.jpg", jpeg[: len(jpeg) // 3], "failed", "invalid_image"),
        lambda: Hostile("html-as.jpg", b"<html><body>no</body></html>", "failed", "invalid_image"),
        lambda: Hostile("garbage.png", random.Random(5).randbytes(4096), "failed", "invalid_image"),
        lambda: Hostile("png-named.jpg", _encode(_scene(200, 150, 4), "PNG"), "succeeded"),
        lambda: Hostile("jpeg-named.gif", clean_jpeg(5), "succeeded"),
        lambda: Hostile("bomb.png", png_bomb(20_000, 20_000), "failed", "image_too_large"),
        lambda: Hostile("huge.jpg", jpeg_huge_dimensions(), "failed", "image_too_large"),
        # 30 MP under the pixel cap, about 100 KB on disk, but some 300 MiB to decode as RGBA:
        # more than the hostile runs' 256 MiB decode budget (`HOSTILE_DECODE_MEMORY_MIB`).
        lambda: Hostile("memory-bomb.png", png_rgba(6000, 5000), "failed", "image_too_large"),
        lambda: Hostile("huge-exif.jpg", jpeg_huge_exif(), "succeeded"),
        lambda: Hostile("bad-orientation.jpg", jpeg_bad_orientation(), "succeeded"),
        lambda: Hostile("cmyk.jpg", cmyk_jpeg(), "succeeded"),
        lambda: Hostile("animated.gif", animated("GIF"), "succeeded"),
        lambda: Hostile("animated.webp", animated("WEBP"), "succeeded"),
        lambda: Hostile("photoshop.tif", psd(), "failed", "unsupported_image"),
        lambda: Hostile(
            "doc.jpg", b"%PDF-1.7\n1 0 obj <<>> endobj\n", "failed", "unsupported_image"
        ),
    ]


HOSTILE_DECODE_MEMORY_MIB = 256
"""The decode memory budget (`--decode-memory-mib`) runs over the hostile corpus use."""


def png_rgba(width: int, height: int) -> bytes:
    """A real, plain RGBA PNG: tiny on disk, width x height x 4 bytes once decoded."""
    buffer = io.BytesIO()
    Image.new("RGBA", (width, height), (30, 60, 90, 200)).save(buffer, format="PNG")
    return buffer.getvalue()


def hostile() -> list[Hostile]:
    """The whole hostile corpus, in a stable order."""
    return [make() for make in _generators()]

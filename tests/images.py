"""Generated test images: a plain background with a bright subject at a known place."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw

from tests.crop.images import STORE_AS


def photo(
    width: int = 800,
    height: int = 600,
    *,
    subject: tuple[int, int] = (600, 200),
    seed: int = 0,
    fmt: str = "JPEG",
) -> bytes:
    """A photo-like image: a gradient background and a saturated disc around `subject`."""
    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    draw = ImageDraw.Draw(image)
    x, y = subject
    r = max(8, min(width, height) // 10)
    draw.ellipse((x - r, y - r, x + r, y + r), fill=(220, 40 + seed % 200, 60))
    draw.rectangle((x - r // 3, y - r // 3, x + r // 3, y + r // 3), fill=(20, 200, 240))
    out = io.BytesIO()
    image.save(out, fmt, quality=90) if fmt == "JPEG" else image.save(out, fmt)
    return out.getvalue()


def write_photos(folder: Path, count: int, *, size: tuple[int, int] = (800, 600)) -> list[Path]:
    """`count` distinct JPEGs in `folder` (distinct bytes, so distinct derivative keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(count):
        path = folder / f"photo-{n:03d}.jpg"
        w, h = size
        path.write_bytes(photo(w, h, subject=(w // 4 + (n * 37) % (w // 2), h // 3), seed=n))
        paths.append(path)
    return paths


def write_corrupt(folder: Path) -> list[Path]:
    """Files with image extensions that are not decodable images."""
    folder.mkdir(parents=True, exist_ok=True)
    text = folder / "not-an-image.jpg"
    text.write_bytes(b"<html><body>this is not a picture</body></html>")
    truncated = folder / "truncated.jpg"
    truncated.write_bytes(photo(400, 300)[:700])
    return [text, truncated]


def busy_corner(
    width: int = 960,
    height: int = 640,
    *,
    busy: tuple[int, int, int, int] = (40, 40, 240, 240),
    orientation: int = 1,
) -> bytes:
    """A plain grey JPEG with a busy striped object in `busy` (upright pixels), where saliency
    puts every window, stored rotated with that EXIF orientation (upright size width x height)."""
    image = Image.new("RGB", (width, height), (150, 150, 150))
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = busy
    draw.rectangle((left, top, right - 1, bottom - 1), fill=(200, 40, 40))
    stripe = max(1, (right - left) // 6)
    for x in range(left + stripe, right - stripe, 2 * stripe):
        draw.rectangle((x, top + stripe, x + stripe - 1, bottom - stripe - 1), fill=(250, 220, 60))
    options: dict[str, object] = {"quality": 95}
    if orientation != 1:
        transpose = STORE_AS[orientation]
        assert transpose is not None
        image = image.transpose(transpose)
        exif = Image.Exif()
        exif[0x0112] = orientation
        options["exif"] = exif.tobytes()
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()

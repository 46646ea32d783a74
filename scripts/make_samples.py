"""Generate the sample photos in `samples/` (run from the repository root; output is committed).

Six small, photo-like synthetic pictures covering what the quickstart should show: a subject off
centre, a tall and a panoramic frame, a PNG logo whose transparent pixels hide black, an
EXIF-rotated
phone shot and a product on a plain background. Deterministic for a given Pillow/numpy.

    .venv/bin/python scripts/make_samples.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"
JPEG_QUALITY = 80
EXIF_ORIENTATION_TAG = 0x0112
ROTATE_90_CW_ORIENTATION = 6

Box = tuple[int, int, int, int]


def landscape(width: int, height: int, horizon: float, seed: int) -> Image.Image:
    """Sky over ground with soft light variation and a little grain."""
    rng = np.random.default_rng(seed)
    rows = np.arange(height, dtype=np.float32)[:, None, None]
    split = int(height * horizon)
    sky = np.array([105, 150, 210], np.float32) + np.array([80, 55, 15], np.float32) * np.clip(
        rows / max(split, 1), 0, 1
    )
    ground = np.array([170, 155, 110], np.float32) - np.array([50, 45, 30], np.float32) * np.clip(
        (rows - split) / max(height - split, 1), 0, 1
    )
    pixels = np.where(rows < split, sky, ground)
    light = rng.normal(0.0, 6.0, (9, 12, 1)).astype(np.float32) + 128
    soft = Image.fromarray(np.clip(light[..., 0], 0, 255).astype(np.uint8)).resize(
        (width, height), Image.Resampling.BICUBIC
    )
    pixels = pixels + (np.asarray(soft, np.float32)[..., None] - 128)
    pixels += rng.normal(0.0, 1.5, (height, width, 1)).astype(np.float32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def person(draw: ImageDraw.ImageDraw, box: Box, shirt: tuple[int, int, int]) -> None:
    """A simple standing figure filling `box`."""
    left, top, right, bottom = box
    width, height = right - left, bottom - top
    head = width // 3
    middle = left + width // 2
    draw.ellipse((middle - head // 2, top, middle + head // 2, top + head), fill=(226, 178, 146))
    waist = top + head + (height - head) // 2
    draw.rounded_rectangle((left, top + head + 4, right, waist), radius=width // 6, fill=shirt)
    draw.rectangle((left + width // 5, waist, right - width // 5, bottom), fill=(45, 50, 70))


def beach_portrait() -> None:
    """Landscape 3:2 with a person on the right third."""
    image = landscape(1200, 800, 0.5, seed=1)
    person(ImageDraw.Draw(image), (800, 330, 920, 620), (220, 60, 50))
    image.save(SAMPLES_DIR / "beach-portrait.jpg", quality=JPEG_QUALITY)


def tall_lighthouse() -> None:
    """A tall frame with a red-and-white tower near the top."""
    image = landscape(600, 1100, 0.7, seed=2)
    draw = ImageDraw.Draw(image)
    for index, top in enumerate(range(120, 560, 55)):
        colour = (200, 40, 40) if index % 2 == 0 else (240, 240, 235)
        draw.rectangle((270, top, 330, top + 55), fill=colour)
    draw.polygon([(260, 120), (340, 120), (300, 70)], fill=(40, 40, 40))
    image.save(SAMPLES_DIR / "tall-lighthouse.jpg", quality=JPEG_QUALITY, progressive=True)


def panorama_boat() -> None:
    """A 4:1 panorama of sea with a small sailing boat near the left."""
    image = landscape(1600, 400, 0.55, seed=3)
    draw = ImageDraw.Draw(image)
    draw.polygon([(220, 250), (330, 250), (310, 275), (240, 275)], fill=(120, 60, 30))
    draw.polygon([(270, 245), (270, 150), (320, 245)], fill=(245, 245, 240))
    image.save(SAMPLES_DIR / "panorama-boat.jpg", quality=JPEG_QUALITY)


def logo_alpha() -> None:
    """A PNG logo on a transparent background whose hidden colour is black."""
    pixels = np.zeros((500, 500, 4), dtype=np.uint8)
    logo = Image.fromarray(pixels)
    draw = ImageDraw.Draw(logo)
    draw.ellipse((120, 120, 380, 380), fill=(30, 110, 200, 255))
    draw.rectangle((200, 200, 300, 300), fill=(250, 200, 40, 255))
    logo.save(SAMPLES_DIR / "logo-alpha.png", optimize=True)


def rotated_phone_shot() -> None:
    """A portrait shot stored sideways with EXIF orientation 6, as phones do."""
    upright = landscape(600, 900, 0.45, seed=4)
    person(ImageDraw.Draw(upright), (240, 300, 360, 600), (40, 150, 80))
    stored = upright.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[EXIF_ORIENTATION_TAG] = ROTATE_90_CW_ORIENTATION
    stored.save(SAMPLES_DIR / "phone-rotated.jpg", quality=JPEG_QUALITY, exif=exif.tobytes())


def product_plain() -> None:
    """A small product on a plain studio background, off centre."""
    image = Image.new("RGB", (1000, 700), (244, 243, 240))
    draw = ImageDraw.Draw(image)
    draw.ellipse((640, 520, 820, 560), fill=(225, 224, 220))
    draw.rounded_rectangle((670, 380, 790, 540), radius=18, fill=(190, 40, 90))
    draw.rectangle((705, 340, 755, 380), fill=(60, 60, 60))
    image.save(SAMPLES_DIR / "product-plain.webp", quality=JPEG_QUALITY)


def main() -> None:
    """Write every sample and print its size."""
    SAMPLES_DIR.mkdir(exist_ok=True)
    for make in (
        beach_portrait,
        tall_lighthouse,
        panorama_boat,
        logo_alpha,
        rotated_phone_shot,
        product_plain,
    ):
        make()
    for path in sorted(SAMPLES_DIR.iterdir()):
        print(f"{path.name:24} {path.stat().st_size / 1024:6.1f} KB")


if __name__ == "__main__":
    main()

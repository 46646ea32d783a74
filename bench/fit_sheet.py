"""Contact sheet of real product pictures under each fit: crop, pad and auto, side by side.

One row per picture of `tests/crop/product_photos.py` (products on transparency, white and black)
and per fit; each row shows the source (its measured product box in green, and the trimmed box in
orange when `--trim` is given) and its 1:1, 16:9 and 9:16 derivatives as `render` makes them,
padding and all, each captioned with the fit used. A padded output shows its padding truly: it
is the derivative's own pixels, not a drawing.

    .venv/bin/python bench/fit_sheet.py OUT.jpg [--height 150] [--trim 16]

Needs the `test` extra (the packages that ship the pictures).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchcrop.crop import RenderSpec, render
from tests.crop.product_photos import ProductPhoto, products

FITS = ("crop", "pad", "auto")
RATIOS = ("1:1", "16:9", "9:16")
PRODUCT_RGB = (40, 230, 60)
TRIM_RGB = (255, 140, 0)
SHEET_RGB = (128, 128, 128)
CAPTION_RGB = (16, 16, 16)
MARGIN_PX = 12
CAPTION_PX = 18
SHEET_QUALITY = 80


def _scaled(image: Image.Image, height: int) -> Image.Image:
    width = max(1, round(image.width * height / image.height))
    return image.resize((width, height), Image.Resampling.LANCZOS)


def row(
    photo: ProductPhoto, fit: str, height: int, trim: int, font: ImageFont.ImageFont
) -> Image.Image:
    """The source with its boxes, then each ratio's derivative, captioned."""
    spec = RenderSpec.from_input({"ratios": list(RATIOS), "fit": fit, "trim": trim})
    renditions = render(photo.data, spec)
    with Image.open(io.BytesIO(photo.data)) as opened:
        rgba = opened.convert("RGBA")
    source = Image.new("RGB", rgba.size, (255, 255, 255))
    source.paste(rgba.convert("RGB"), (0, 0), rgba.getchannel("A"))
    draw = ImageDraw.Draw(source)
    draw.rectangle(
        [v - (i // 2) for i, v in enumerate(photo.product)], outline=PRODUCT_RGB, width=2
    )
    trim_box = renditions[0].trim_box
    if trim_box is not None:
        draw.rectangle([v - (i // 2) for i, v in enumerate(trim_box)], outline=TRIM_RGB, width=2)
    tiles = [(_scaled(source, height), f"{photo.name} ({fit})")]
    for rendition in renditions:
        with Image.open(io.BytesIO(rendition.data)) as made:
            tiles.append(
                (_scaled(made.convert("RGB"), height), f"{rendition.ratio} {rendition.fit}")
            )
    width = sum(tile.width for tile, _ in tiles) + MARGIN_PX * (len(tiles) + 1)
    canvas = Image.new("RGB", (width, height + CAPTION_PX + MARGIN_PX), SHEET_RGB)
    pen = ImageDraw.Draw(canvas)
    x = MARGIN_PX
    for tile, caption in tiles:
        canvas.paste(tile, (x, MARGIN_PX // 2))
        pen.text((x, height + MARGIN_PX // 2 + 2), caption, fill=CAPTION_RGB, font=font)
        x += tile.width + MARGIN_PX
    return canvas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--height", type=int, default=150)
    parser.add_argument("--trim", type=int, default=0)
    args = parser.parse_args()
    font = ImageFont.load_default()
    rows = [row(p, fit, args.height, args.trim, font) for p in products() for fit in FITS]
    sheet = Image.new("RGB", (max(r.width for r in rows), sum(r.height for r in rows)), SHEET_RGB)
    y = 0
    for made in rows:
        sheet.paste(made, (0, y))
        y += made.height
    sheet.save(args.out, quality=SHEET_QUALITY, optimize=True)
    print(f"{args.out}: {sheet.width}x{sheet.height}, {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()

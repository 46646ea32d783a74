"""Contact sheet of the real-photo test set, for a person to check the hand-marked boxes by eye.

Lays out every photo from tests/crop/real_photos.py at one height, with its face boxes in green and
its whole-person boxes in orange, and a caption (name, source size, counts) under each. Boxes are
typed in by hand, so looking at them drawn is the only real check that they sit on the faces.

    .venv/bin/python bench/real_sheet.py OUT.png [--height 360] [--columns 3]

Needs the `test` extra (the packages that ship the photos).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.crop.real_photos import RealPhoto, photos

FACE_RGB = (40, 230, 60)
PERSON_RGB = (255, 140, 0)
SHEET_RGB = (32, 32, 32)
CAPTION_RGB = (235, 235, 235)
MARGIN_PX = 16
CAPTION_PX = 44


def tile(
    photo: RealPhoto, height: int, font: ImageFont.ImageFont | ImageFont.FreeTypeFont
) -> Image.Image:
    """The photo scaled to `height`, boxes drawn over it, captioned underneath."""
    with Image.open(io.BytesIO(photo.data)) as source:
        upright = ImageOps.exif_transpose(source).convert("RGB")
    scale = height / upright.height
    picture = upright.resize((round(upright.width * scale), height), Image.Resampling.LANCZOS)
    out = Image.new("RGB", (picture.width, height + CAPTION_PX), SHEET_RGB)
    out.paste(picture, (0, 0))
    draw = ImageDraw.Draw(out)
    line = max(2, round(height / 180))
    for boxes, colour in ((photo.people, PERSON_RGB), (photo.faces, FACE_RGB)):
        for left, top, right, bottom in boxes:
            draw.rectangle(
                (left * scale, top * scale, right * scale - 1, bottom * scale - 1),
                outline=colour,
                width=line,
            )
    width, source_height = photo.size
    counts = f"faces {len(photo.faces)}, people {len(photo.people)}"
    caption = f"{photo.name}\n{width}x{source_height}, {counts}"
    draw.multiline_text((4, height + 4), caption, fill=CAPTION_RGB, font=font, spacing=2)
    return out


def sheet(height: int, columns: int) -> Image.Image:
    """All photos' tiles in rows of `columns`, left-aligned, on a dark background."""
    font = ImageFont.load_default(size=16)
    tiles = [tile(photo, height, font) for photo in photos()]
    rows = [tiles[start : start + columns] for start in range(0, len(tiles), columns)]
    width = MARGIN_PX + max(sum(t.width + MARGIN_PX for t in row) for row in rows)
    total = MARGIN_PX + len(rows) * (height + CAPTION_PX + MARGIN_PX)
    out = Image.new("RGB", (width, total), SHEET_RGB)
    y = MARGIN_PX
    for row in rows:
        x = MARGIN_PX
        for item in row:
            out.paste(item, (x, y))
            x += item.width + MARGIN_PX
        y += height + CAPTION_PX + MARGIN_PX
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="PNG file to write")
    parser.add_argument("--height", type=int, default=360, help="tile height in pixels")
    parser.add_argument("--columns", type=int, default=3, help="tiles per row")
    args = parser.parse_args()
    image = sheet(args.height, args.columns)
    image.save(args.out, format="PNG")
    print(f"wrote {args.out} ({image.width}x{image.height}, {len(photos())} photos)")


if __name__ == "__main__":
    main()

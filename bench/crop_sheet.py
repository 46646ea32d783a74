"""Contact sheet of batchcrop's crops of the real-photo test set, for a person to judge by eye.

One row per photo: the crop of each ratio as rendered (1:1, 4:3, 16:9, 3:4 at 1200 px unless
told), at one height, with the hand-marked boxes drawn over it: faces in green and whole people
in orange when the crop keeps them whole, in red when it cuts them. The counts say whether a crop
keeps a face; only the picture says whether it is a crop an editor would take.

    .venv/bin/python bench/crop_sheet.py OUT.png [--height 200] [--ratios 1:1,4:3,16:9,3:4]

Needs the `test` extra (the packages that ship the photos).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchcrop.crop import Ratio, RenderSpec, render
from tests.crop.real_photos import RealPhoto, photos

FACE_RGB = (40, 230, 60)
PERSON_RGB = (255, 140, 0)
CUT_RGB = (255, 30, 30)
SHEET_RGB = (32, 32, 32)
CAPTION_RGB = (235, 235, 235)
MARGIN_PX = 12
CAPTION_PX = 22

Box = tuple[int, int, int, int]


def _cuts(crop: Box, box: Box) -> bool:
    """Whether the crop shows part of `box` but not all of it."""
    overlaps = box[0] < crop[2] and crop[0] < box[2] and box[1] < crop[3] and crop[1] < box[3]
    inside = crop[0] <= box[0] and crop[1] <= box[1] and box[2] <= crop[2] and box[3] <= crop[3]
    return overlaps and not inside


def row(photo: RealPhoto, spec: RenderSpec, height: int, font: ImageFont.ImageFont) -> Image.Image:
    """The photo's crops side by side, boxes drawn, captioned with name and ratio."""
    with Image.open(io.BytesIO(photo.data)) as source:
        upright = ImageOps.exif_transpose(source).convert("RGB")
    tiles = []
    for rendition in render(photo.data, spec):
        crop = rendition.crop_box
        scale = height / (crop[3] - crop[1])
        width = round((crop[2] - crop[0]) * scale)
        picture = upright.resize((width, height), Image.Resampling.LANCZOS, box=crop)
        tile = Image.new("RGB", (width, height + CAPTION_PX), SHEET_RGB)
        tile.paste(picture, (0, 0))
        draw = ImageDraw.Draw(tile)
        for boxes, colour in ((photo.people, PERSON_RGB), (photo.faces, FACE_RGB)):
            for box in boxes:
                shown = (
                    (box[0] - crop[0]) * scale,
                    (box[1] - crop[1]) * scale,
                    (box[2] - crop[0]) * scale - 1,
                    (box[3] - crop[1]) * scale - 1,
                )
                draw.rectangle(shown, outline=CUT_RGB if _cuts(crop, box) else colour, width=2)
        draw.text((3, height + 3), f"{photo.name} {rendition.ratio}", fill=CAPTION_RGB, font=font)
        tiles.append(tile)
    out = Image.new(
        "RGB", (sum(t.width + MARGIN_PX for t in tiles), height + CAPTION_PX), SHEET_RGB
    )
    x = 0
    for tile in tiles:
        out.paste(tile, (x, 0))
        x += tile.width + MARGIN_PX
    return out


def sheet(spec: RenderSpec, height: int) -> Image.Image:
    """Every photo's row, one under the other, on a dark background."""
    font = ImageFont.load_default(size=14)
    rows = [row(photo, spec, height, font) for photo in photos()]
    width = MARGIN_PX + max(r.width for r in rows)
    out = Image.new("RGB", (width, MARGIN_PX + len(rows) * (rows[0].height + MARGIN_PX)), SHEET_RGB)
    y = MARGIN_PX
    for item in rows:
        out.paste(item, (MARGIN_PX, y))
        y += item.height + MARGIN_PX
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="PNG file to write")
    parser.add_argument("--height", type=int, default=200, help="tile height in pixels")
    parser.add_argument("--ratios", default="1:1,4:3,16:9,3:4", help="ratios, comma-separated")
    args = parser.parse_args()
    spec = RenderSpec(tuple(Ratio.parse(text) for text in args.ratios.split(",")))
    image = sheet(spec, args.height)
    image.save(args.out, format="PNG")
    print(f"wrote {args.out} ({image.width}x{image.height}, {len(photos())} photos)")


if __name__ == "__main__":
    main()

"""Benchmark: the re-crop preview (`GET …/windows?focus=`) against the render it previews.

For generated photo-like sources (JPEG 12 MP and 24 MP, PNG 6 MP) and the default render
request (four ratios, max side 1200, JPEG), times `preview_windows` and `render` with the same
focus box, alternating per round, reports the median wall milliseconds and the memory each
reserves from the decode budget, and checks that the previewed crop boxes are the rendered ones.

    .venv/bin/python bench/windows.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from pathlib import Path

from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchcrop.crop import MIB, RenderSpec, render
from batchcrop.crop.crop_boxes import preview_windows
from batchcrop.crop.decode import decode_cost, open_image
from batchcrop.crop.faces import DETECTION_BYTES
from batchcrop.crop.planning import plan

SOURCES = (("JPEG 12 MP", (4000, 3000), "JPEG"), ("JPEG 24 MP", (6000, 4000), "JPEG"),
           ("PNG 6 MP", (3000, 2000), "PNG"))  # fmt: skip


def source(size: tuple[int, int], fmt: str, seed: int = 1) -> bytes:
    """A textured background with one bright subject off-centre, encoded as `fmt`."""
    rng = random.Random(seed)
    width, height = size
    image = Image.effect_noise(size, 40).convert("RGB")
    draw = ImageDraw.Draw(image)
    cx, cy = rng.randrange(width // 4, width // 2), rng.randrange(height // 3, 2 * height // 3)
    radius = min(size) // 6
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=(230, 40, 50))
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, quality=90)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spec = RenderSpec.from_input({})
    print("| source | preview ms | preview reserves | render ms | render reserves |")
    print("| --- | --- | --- | --- | --- |")
    for name, size, fmt in SOURCES:
        data = source(size, fmt)
        focus = (size[0] // 2, size[1] // 4, 3 * size[0] // 4, size[1] // 2)
        opened = open_image(data, 10**9)
        decodes = plan(opened, spec)
        reserves = decode_cost(opened, decodes.saliency_factor) + DETECTION_BYTES
        previews, renders = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            previewed = preview_windows(data, spec, focus=focus)
            previews.append(time.perf_counter() - started)
            started = time.perf_counter()
            rendered = render(data, spec, focus=focus)
            renders.append(time.perf_counter() - started)
            if [box for _, box in previewed.crop_boxes] != [r.crop_box for r in rendered]:
                raise SystemExit(f"{name}: the preview differs from the render")
        print(
            f"| {name} | {statistics.median(previews) * 1000:.0f} | {reserves / MIB:.0f} MiB "
            f"| {statistics.median(renders) * 1000:.0f} | {decodes.cost_bytes / MIB:.0f} MiB |"
        )


if __name__ == "__main__":
    main()

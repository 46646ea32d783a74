"""Benchmark: fine detail of our outputs against a full decode + Lanczos, and what keeping it costs.

For detailed 12 MP JPEGs (three generated scenes from bench/crop.py, two blurred-noise textures),
each output's Laplacian energy is divided by the reference's: the full-size decode cropped to the
same box, resized with Lanczos to the same size and encoded with the same JPEG settings. `gap`
is the rule tried for the decode: at least `gap` times the output scale (the engine's rule is
1.0: the largest DCT reduction still covering the output, 1/4 and 1/8 with a margin of 1.5,
then `resample.restore_detail`). Prints min and median ratio and the
median render time per image for each gap and max_side.

    .venv/bin/python bench/sharpness.py [--gaps 1.0,1.5,2.0] [--max-sides 800,1200,1800]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from crop import make_photo  # bench/crop.py's generated scenes

import batchcrop.crop.render  # noqa: F401 - loads the module patched below
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.crop.decode import OpenedImage, reduction

RATIOS = tuple(Ratio.parse(text) for text in ("1:1", "4:3", "16:9", "3:4"))
RENDER = sys.modules["batchcrop.crop.render"]  # the package re-exports the function by this name


def laplacian_energy(image: Image.Image) -> float:
    """Mean squared 4-neighbour Laplacian of the luma: how much fine detail there is."""
    luma = np.asarray(image.convert("L"), dtype=np.float64)
    lap = 4 * luma[1:-1, 1:-1] - luma[:-2, 1:-1] - luma[2:, 1:-1] - luma[1:-1, :-2] - luma[1:-1, 2:]
    return float((lap * lap).mean())


def sources() -> list[bytes]:
    """Five detailed 12 MP JPEGs at quality 90."""
    pictures = [make_photo(index)[0] for index in range(3)]
    for index, blur in ((3, 1.2), (4, 2.5)):
        rng = np.random.default_rng(index)
        noise = Image.fromarray((rng.random((3000, 4000)) * 255).astype(np.uint8))
        noise = noise.filter(ImageFilter.GaussianBlur(blur))
        flipped = noise.transpose(Image.Transpose.ROTATE_180)
        pictures.append(Image.merge("RGB", (noise, flipped, noise)))
    encoded = []
    for picture in pictures:
        buffer = io.BytesIO()
        picture.save(buffer, "JPEG", quality=90)
        encoded.append(buffer.getvalue())
    return encoded


def measure(data: list[bytes], gap: float, max_side: int) -> tuple[float, float, float]:
    """(min ratio, median ratio, median ms per image) with the decode rule `gap`."""

    def with_gap(opened: OpenedImage, scale: float, *margin: float) -> int:
        return reduction(opened, min(1.0, scale * gap), *margin)

    RENDER.reduction = with_gap
    spec = RenderSpec(RATIOS, max_side=max_side)
    ratios, times = [], []
    for source in data:
        full = Image.open(io.BytesIO(source))
        full.load()
        start = time.perf_counter()
        renditions = RENDER.render(source, spec)
        times.append((time.perf_counter() - start) * 1000)
        for rendition in renditions:
            ours = Image.open(io.BytesIO(rendition.data))
            reference = full.crop(rendition.crop_box).resize(ours.size, Image.Resampling.LANCZOS)
            buffer = io.BytesIO()
            reference.save(buffer, "JPEG", quality=spec.quality, subsampling="4:2:0")
            ratios.append(
                laplacian_energy(ours) / laplacian_energy(Image.open(io.BytesIO(buffer.getvalue())))
            )
    RENDER.reduction = reduction
    return min(ratios), statistics.median(ratios), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", default="1.0,1.5,2.0")
    parser.add_argument("--max-sides", default="800,1200,1800")
    args = parser.parse_args()
    data = sources()
    print(f"{'gap':>5} {'max_side':>8} {'min':>6} {'median':>7} {'ms/image':>9}")
    for gap in (float(text) for text in args.gaps.split(",")):
        for max_side in (int(text) for text in args.max_sides.split(",")):
            low, middle, ms = measure(data, gap, max_side)
            print(f"{gap:>5.1f} {max_side:>8} {low:>6.2f} {middle:>7.2f} {ms:>9.0f}")


if __name__ == "__main__":
    main()

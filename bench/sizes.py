"""Benchmark: several widths per ratio, against one, beside libvips `thumbnail` at the same widths.

On the same generated 12 MP JPEG sources in one process, rounds interleaved:

- **batchcrop, one width**: `render` with `widths=[1280]` (the four default ratios: 4 outputs);
- **batchcrop, three widths**: `render` with `widths=[320, 640, 1280]` (12 outputs; one decode
  per DCT reduction, the windows placed once);
- **libvips thumbnail, three widths**: for each ratio and width, `pyvips.Image.thumbnail_buffer(
  data, width, height=..., crop="attention")` + `jpegsave_buffer(Q=85)` (12 outputs; each call
  decodes the source again with shrink-on-load, as a script calling it per size does).

libvips runs on one thread (`VIPS_CONCURRENCY=1`), as a render does. Prints the median wall ms
per source for each, and three widths' cost as a multiple of one.

    .venv/bin/python bench/sizes.py [--sources 6] [--rounds 3]

Needs the `bench` extra (pyvips, pyvips-binary).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("VIPS_CONCURRENCY", "1")

import pyvips

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchcrop.crop import RATIOS_DEFAULT, Ratio, RenderSpec, render
from tests.crop.images import encode, scene

SOURCE_SIZE = (4000, 3000)
WIDTHS = (320, 640, 1280)
QUALITY = 85


def sources(count: int) -> list[bytes]:
    """`count` generated 12 MP JPEGs, each with its subject elsewhere."""
    width, height = SOURCE_SIZE
    made = []
    for seed in range(count):
        left = 200 + (seed * 577) % (width - 1400)
        top = 200 + (seed * 331) % (height - 1200)
        picture = scene(width, height, (left, top, left + 1000, top + 900), seed=seed)
        made.append(encode(picture, "JPEG", quality=90))
    return made


def batchcrop_widths(widths: tuple[int, ...]) -> Callable[[bytes], int]:
    spec = RenderSpec.from_input({"widths": list(widths)})

    def run(data: bytes) -> int:
        return len(render(data, spec))

    return run


def vips_widths(widths: tuple[int, ...]) -> Callable[[bytes], int]:
    ratios = [Ratio.parse(text) for text in RATIOS_DEFAULT]

    def run(data: bytes) -> int:
        outputs = 0
        for ratio in ratios:
            for width in widths:
                height = max(1, round(width * ratio.h / ratio.w))
                image = pyvips.Image.thumbnail_buffer(
                    data, width, height=height, crop="attention", size="down"
                )
                image.jpegsave_buffer(Q=QUALITY)
                outputs += 1
        return outputs

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = sources(args.sources)
    engines = {
        "batchcrop, one width (1280)": batchcrop_widths((1280,)),
        "batchcrop, three widths (320,640,1280)": batchcrop_widths(WIDTHS),
        "libvips thumbnail, three widths": vips_widths(WIDTHS),
    }
    times: dict[str, list[float]] = {name: [] for name in engines}
    outputs: dict[str, int] = {}
    for _ in range(args.rounds):
        for source in data:
            for name, engine in engines.items():
                started = time.perf_counter()
                outputs[name] = engine(source)
                times[name].append((time.perf_counter() - started) * 1000)
    print(f"{args.sources} sources {SOURCE_SIZE[0]}x{SOURCE_SIZE[1]} JPEG, {args.rounds} rounds")
    print(f"{'engine':42} {'outputs':>7} {'median ms':>10}")
    for name, measured in times.items():
        print(f"{name:42} {outputs[name]:>7} {statistics.median(measured):>10.1f}")
    one = statistics.median(times["batchcrop, one width (1280)"])
    three = statistics.median(times["batchcrop, three widths (320,640,1280)"])
    print(f"three widths / one width: {three / one:.2f}x")


if __name__ == "__main__":
    main()

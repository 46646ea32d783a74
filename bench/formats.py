"""Benchmark: output formats. Calibrates WebP's and AVIF's quality against JPEG's with SSIMULACRA2,
then prints bytes and encode time per format beside JPEG on the 12 MP and real-photo sets.

    .venv/bin/python bench/formats.py --calibrate          # the CALIBRATION table of encode.py
    .venv/bin/python bench/formats.py [--set synthetic|real] [--images 6] [--rounds 2]

Calibration: each real photograph (tests/crop/real_photos.py, upright, scaled to at most 800 px)
is encoded as JPEG at 50, 70, 85 and 95 and as WebP and AVIF on a grid of their own qualities;
SSIMULACRA2 (the `ssimulacra2` package, `bench` extra) scores each against the pixels encoded.
For each JPEG quality, the WebP and AVIF qualities whose mean score over the set equals JPEG's
are read off their mean-score curves (linear between grid points): equal visual quality, so
their bytes can be compared. The timing run renders each source with the default request
(1:1, 4:3, 16:9, 3:4 at 1200 px, quality 85) as JPEG only and as jpeg,webp,avif, and prints the
median time of each, their ratio, the bytes per format and each encoder's own time per output.
Needs the `bench` extra (ssimulacra2) for --calibrate only.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools

from batchcrop.crop import RenderSpec, render
from batchcrop.crop.decode import decode_rgb, open_image
from batchcrop.crop.encode import FORMATS, encode, encoder_quality
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from bench.crop import SPEC, generate

CALIBRATION_JPEG = (50, 70, 85, 95)
GRID = tuple(range(5, 101, 5))
CALIBRATION_SIDE_PX = 800
ALL_FORMATS = tuple(FORMATS)


def upright(data: bytes, side: int) -> Image.Image:
    """The photo as the engine decodes it (upright sRGB RGB), scaled to at most `side`."""
    image = decode_rgb(open_image(data, MAX_SOURCE_PIXELS), 1)
    image.thumbnail((side, side), Image.Resampling.LANCZOS)
    return image


def score(reference: bytes, encoded: bytes) -> float:
    """SSIMULACRA2 of `encoded` against the lossless `reference` (100 = identical)."""
    from ssimulacra2 import compute_ssimulacra2  # noqa: PLC0415 - the bench extra, calibration only

    return float(compute_ssimulacra2(io.BytesIO(reference), io.BytesIO(encoded)))


def encoded_at(image: Image.Image, name: str, setting: int) -> bytes:
    """`image` encoded with the format's own quality `setting` (not the JPEG scale)."""
    buffer = io.BytesIO()
    if name == "jpeg":
        return encode(image, "jpeg", setting)
    # The production settings but for the quality, which is what is being calibrated.
    from batchcrop.crop import encode as module  # noqa: PLC0415

    if name == "webp":
        image.save(buffer, format="WEBP", quality=setting, method=module.WEBP_METHOD)
    else:
        image.save(
            buffer,
            format="AVIF",
            quality=setting,
            speed=module.AVIF_SPEED,
            codec=module.AVIF_CODEC,
            max_threads=module.AVIF_THREADS,
            subsampling=module.AVIF_SUBSAMPLING,
        )
    return buffer.getvalue()


def setting_for(target: float, curve: dict[int, float]) -> float:
    """The (fractional) setting whose mean score reaches `target`, linear between grid points."""
    points = sorted(curve.items())
    for (q0, s0), (q1, s1) in itertools.pairwise(points):
        if s0 <= target <= s1 and s1 > s0:
            return q0 + (target - s0) * (q1 - q0) / (s1 - s0)
    return float(points[0][0] if target < points[0][1] else points[-1][0])


def calibrate() -> None:
    """Print the mean SSIMULACRA2 and bytes per format at each JPEG quality, and the table."""
    from tests.crop.real_photos import photos  # noqa: PLC0415 - the real set only

    images = [upright(photo.data, CALIBRATION_SIDE_PX) for photo in photos()]
    references = []
    for image in images:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        references.append(buffer.getvalue())
    print(f"{len(images)} real photographs, {[im.size for im in images]}", flush=True)
    jpeg = {
        q: statistics.mean(
            score(ref, encoded_at(im, "jpeg", q))
            for im, ref in zip(images, references, strict=True)
        )
        for q in CALIBRATION_JPEG
    }
    curves = {}
    for name in ("webp", "avif"):
        curves[name] = {
            q: statistics.mean(
                score(ref, encoded_at(im, name, q))
                for im, ref in zip(images, references, strict=True)
            )
            for q in GRID
        }
        print(name, {q: round(s, 1) for q, s in curves[name].items()}, flush=True)
    rows = []
    print("\nJPEG q  SSIMULACRA2   WebP q  AVIF q   bytes JPEG / WebP / AVIF (sum over the set)")
    for q, target in jpeg.items():
        webp_q = round(setting_for(target, curves["webp"]))
        avif_q = round(setting_for(target, curves["avif"]))
        sizes = [
            sum(len(encoded_at(im, name, setting)) for im in images)
            for name, setting in (("jpeg", q), ("webp", webp_q), ("avif", avif_q))
        ]
        checked = [
            statistics.mean(
                score(ref, encoded_at(im, name, setting))
                for im, ref in zip(images, references, strict=True)
            )
            for name, setting in (("webp", webp_q), ("avif", avif_q))
        ]
        rows.append((q, webp_q, avif_q))
        print(
            f"{q:6} {target:12.1f} {webp_q:8} {avif_q:7}   {sizes[0]:,} / {sizes[1]:,} "
            f"({sizes[1] / sizes[0]:.0%}) / {sizes[2]:,} ({sizes[2] / sizes[0]:.0%})"
            f"   [checked: WebP {checked[0]:.1f}, AVIF {checked[1]:.1f}]",
            flush=True,
        )
    table = ((1, 1, 1), *rows, (100, 100, 100))
    print(f"\nCALIBRATION = {table}")


def sources(kind: str, count: int) -> list[bytes]:
    """The 12 MP benchmark JPEGs (bench/crop.py) or the real photographs."""
    if kind == "real":
        from tests.crop.real_photos import photos  # noqa: PLC0415

        return [photo.data for photo in photos()]
    with tempfile.TemporaryDirectory(prefix="bench-formats-") as temp:
        generate(Path(temp), count)
        return [path.read_bytes() for path in sorted(Path(temp).glob("*.jpg"))]


def timing(kind: str, count: int, rounds: int) -> None:
    """Median render time JPEG-only vs all formats, bytes per format, encode ms per output."""
    datas = sources(kind, count)
    jpeg_only: RenderSpec = SPEC
    every = replace(SPEC, formats=ALL_FORMATS)
    render(datas[0], every)  # warm-up
    times: dict[str, list[float]] = {"jpeg": [], "all": []}
    sizes = dict.fromkeys(ALL_FORMATS, 0)
    encode_ms: dict[str, list[float]] = {name: [] for name in ALL_FORMATS}
    for data in datas:
        for label, spec in (("jpeg", jpeg_only), ("all", every)):
            best = min(_timed(data, spec) for _ in range(rounds))
            times[label].append(best)
        for rendition in render(data, every):
            sizes[rendition.format] += len(rendition.data)
        for rendition in render(data, jpeg_only):
            pixels = Image.open(io.BytesIO(rendition.data))
            pixels.load()
            for name in ALL_FORMATS:
                start = time.perf_counter()
                encode(pixels, name, SPEC.quality)
                encode_ms[name].append((time.perf_counter() - start) * 1000)
    outputs = len(datas) * len(SPEC.ratios)
    jpeg_ms, all_ms = statistics.median(times["jpeg"]), statistics.median(times["all"])
    print(f"{kind} set: {len(datas)} sources, {outputs} outputs per format, quality {SPEC.quality}")
    print(f"render, JPEG only:        {jpeg_ms:8.1f} ms median per source")
    print(
        f"render, jpeg,webp,avif:   {all_ms:8.1f} ms median per source  ({all_ms / jpeg_ms:.2f}x)"
    )
    print(f"{'format':8}{'setting':>9}{'bytes':>12}{'vs JPEG':>9}{'encode ms/output':>18}")
    for name in ALL_FORMATS:
        print(
            f"{name:8}{encoder_quality(name, SPEC.quality):>9}{sizes[name]:>12,}"
            f"{sizes[name] / sizes['jpeg']:>9.0%}{statistics.median(encode_ms[name]):>18.1f}"
        )


def _timed(data: bytes, spec: RenderSpec) -> float:
    start = time.perf_counter()
    render(data, spec)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    """Calibrate, or time and size the formats on one set."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--set", choices=("synthetic", "real"), default="synthetic")
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
    else:
        timing(args.set, args.images, args.rounds)


if __name__ == "__main__":
    main()

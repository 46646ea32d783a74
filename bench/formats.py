"""Benchmark: output formats. Calibrates WebP's and AVIF's quality against JPEG's with SSIMULACRA2,
then prints bytes and encode time per format beside JPEG on the 12 MP and real-photo sets.

    .venv/bin/python bench/formats.py --calibrate   # the CALIBRATION tables of encode.py
    .venv/bin/python bench/formats.py --classes     # bytes and scores per size class, as shipped
    .venv/bin/python bench/formats.py [--set synthetic|real] [--images 6] [--rounds 2]

Calibration, per output size class (encode.SIZE_CLASSES_PX; measured at 256, 512 and 1024 px):
each real photograph (tests/crop/real_photos.py, upright, scaled to the class's side when it is
at least 90 % that large) is encoded as JPEG at 70, 85 and 95 and as WebP and AVIF on a grid of
their own qualities; SSIMULACRA2 (the `ssimulacra2` package, `bench` extra) scores each against
the pixels encoded. For each JPEG quality the setting chosen is the one whose outputs are, on
the most photos, both no larger than the JPEG and within 1 point of its score or better (ties:
the median score nearer the JPEG's, then the fewer bytes); that is the promise a WebP or AVIF
output makes. `--classes` prints, for the shipped table at quality 85, the median bytes against
the JPEG, the median score difference and how many outputs keep the promise, per class. The
timing run renders each source with the default request (1:1, 4:3, 16:9, 3:4 at 1200 px,
quality 85) as JPEG only and as jpeg,webp,avif, and prints the median time of each, their
ratio, the bytes per format and each encoder's own time per output. Needs the `bench` extra
(ssimulacra2) for --calibrate and --classes only.
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

from batchcrop.crop import RenderSpec, render
from batchcrop.crop.decode import decode_rgb, open_image
from batchcrop.crop.encode import FORMATS, encoder_quality
from batchcrop.crop.matching import encode
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from bench.crop import SPEC, generate

CALIBRATION_JPEG = (70, 85, 95)
"""The rows measured; encode.CALIBRATION keeps its 50 row from the earlier single table."""
GRIDS = {"webp": tuple(range(50, 100, 5)), "avif": tuple(range(30, 95, 5))}
CLASS_SIDES_PX = (256, 512, 1024)
"""The side each size class (encode.SIZE_CLASSES_PX) is measured at."""
SCORE_TOLERANCE = 1.0
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


def _class_photos(side: int) -> list[tuple[Image.Image, bytes]]:
    """The real photos at most `side` px long (those at least 90 % that large), with their
    lossless reference encodings."""
    from tests.crop.real_photos import photos  # noqa: PLC0415 - the real set only

    chosen = []
    for photo in photos():
        if max(photo.size) < 0.9 * side:
            continue
        image = upright(photo.data, side)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        chosen.append((image, buffer.getvalue()))
    return chosen


def _kept_promise(jpeg: tuple[int, float], other: tuple[int, float]) -> bool:
    """No larger than the JPEG, and within SCORE_TOLERANCE of its score or better."""
    return other[0] <= jpeg[0] and other[1] >= jpeg[1] - SCORE_TOLERANCE


def _record(
    measured: list[dict[str, tuple[int, float]]], name: str, setting: int, jpeg_q: int
) -> tuple[int, float, float]:
    """How one setting ranks (higher is better): photos keeping the promise; then how far the
    median score falls short of the JPEG's less the tolerance (0 when it does not); then minus
    the median bytes ratio."""
    kept = sum(_kept_promise(r[f"jpeg{jpeg_q}"], r[f"{name}{setting}"]) for r in measured)
    diff = statistics.median(r[f"{name}{setting}"][1] - r[f"jpeg{jpeg_q}"][1] for r in measured)
    ratio = statistics.median(r[f"{name}{setting}"][0] / r[f"jpeg{jpeg_q}"][0] for r in measured)
    return kept, min(0.0, diff + SCORE_TOLERANCE), -ratio


def calibrate() -> None:
    """Print, per size class, each setting's record on the real set and the table chosen."""
    tables = []
    for klass, side in enumerate(CLASS_SIDES_PX):
        images = _class_photos(side)
        print(f"class {klass} ({side} px): {len(images)} photos", flush=True)
        measured = []
        for image, reference in images:
            row: dict[str, tuple[int, float]] = {}
            for q in CALIBRATION_JPEG:
                data = encoded_at(image, "jpeg", q)
                row[f"jpeg{q}"] = (len(data), score(reference, data))
            for name, grid in GRIDS.items():
                for q in grid:
                    data = encoded_at(image, name, q)
                    row[f"{name}{q}"] = (len(data), score(reference, data))
            measured.append(row)
        rows = []
        for q in CALIBRATION_JPEG:
            chosen = []
            for name, grid in GRIDS.items():
                best = max(grid, key=lambda setting: _record(measured, name, setting, q))
                kept, _, ratio = _record(measured, name, best, q)
                chosen.append(best)
                print(
                    f"  JPEG {q}: {name} {best}, promise kept on {kept}/{len(measured)}, "
                    f"median bytes {-ratio:.0%} of the JPEG's",
                    flush=True,
                )
            rows.append((q, *chosen))
        tables.append(((1, 1, 1), *rows, (100, 100, 100)))
    print(f"\nCALIBRATION = {tuple(tables)}")


def classes(quality: int) -> None:
    """Bytes and scores of the shipped settings against the JPEG, per size class."""
    print(f"quality {quality}: per class, median bytes / JPEG's, median score - JPEG's, promise")
    for klass, side in enumerate(CLASS_SIDES_PX):
        images = _class_photos(side)
        results: dict[str, list[tuple[float, float, bool]]] = {"webp": [], "avif": []}
        jpeg_scores = []
        for image, reference in images:
            jpeg_data = encode(image, "jpeg", quality)
            jpeg = (len(jpeg_data), score(reference, jpeg_data))
            jpeg_scores.append(jpeg[1])
            for name, rows in results.items():
                data = encode(image, name, quality)
                other = (len(data), score(reference, data))
                rows.append((other[0] / jpeg[0], other[1] - jpeg[1], _kept_promise(jpeg, other)))
        print(
            f"class {klass} ({side} px, {len(images)} photos, JPEG median score "
            f"{statistics.median(jpeg_scores):.1f})"
        )
        for name, rows in results.items():
            setting = encoder_quality(name, quality, side)
            print(
                f"  {name} q{setting}: bytes {statistics.median(r[0] for r in rows):.0%}, "
                f"score {statistics.median(r[1] for r in rows):+.1f}, "
                f"promise kept {sum(r[2] for r in rows)}/{len(rows)}",
                flush=True,
            )


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
    parser.add_argument("--classes", action="store_true")
    parser.add_argument("--set", choices=("synthetic", "real"), default="synthetic")
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
    elif args.classes:
        classes(SPEC.quality)
    else:
        timing(args.set, args.images, args.rounds)


if __name__ == "__main__":
    main()

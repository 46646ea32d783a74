"""Benchmark: batchcrop's crop engine vs libvips smartcrop (attention) vs smartcrop.py, one run.

Generates 12 MP JPEGs (baseline and progressive) with a subject at a known place, renders each
into 1:1, 4:3, 16:9 and 3:4 at 1200 px and quality 85 with every engine, and prints per engine:
median ms per image (and, for batchcrop, the face search's and the person prior's own median
ms, wall and CPU), peak RSS of the
engine's own process, and how many crops contain the whole subject. On the real set (`--set
real`: the test suite's photographs of people, each also EXIF-rotated) "kept" counts the crops
keeping every face among those whose window can hold them all ("faces kept"), and "subjects"
each marked face or person inside a crop that can hold it. Each engine runs in its own
subprocess, pinned to one thread (VIPS_CONCURRENCY=1, OMP/OPENBLAS/OpenCV threads 1) so the
comparison is per core; the images are generated in another subprocess so the parent stays
small (Linux children inherit the parent's ru_maxrss).

    .venv/bin/python bench/crop.py [--images 10] [--rounds 1] \
        [--engines ours,vips,vips-full,smartcrop]

Needs the `bench` extra: pyvips, pyvips-binary, smartcrop.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchcrop.crop import RATIOS_DEFAULT, Ratio, RenderSpec, render
from batchcrop.crop.geometry import needed_scale, output_size, window_size
from batchcrop.crop.spec import MAX_SIDE_PX_DEFAULT, QUALITY_DEFAULT

WIDTH_PX, HEIGHT_PX = 4000, 3000
MAX_SIDE_PX = MAX_SIDE_PX_DEFAULT
QUALITY = QUALITY_DEFAULT
SOURCE_QUALITY = 90
RATIOS = tuple(Ratio.parse(text) for text in RATIOS_DEFAULT)
SPEC = RenderSpec(RATIOS, max_side=MAX_SIDE_PX, quality=QUALITY)
ENGINES = ("ours", "vips", "vips-full", "smartcrop")
LABELS = {
    "ours": "batchcrop (Pillow)",
    "vips": "libvips attention, shrink-on-load",
    "vips-full": "libvips attention, full decode",
    "smartcrop": "smartcrop.py",
}
# Subject top-left corners as fractions of the free space: centre, thirds, edges and corners.
PLACES = [
    (0.5, 0.5),
    (0.15, 0.4),
    (0.85, 0.6),
    (0.0, 0.0),
    (1.0, 1.0),
    (1.0, 0.2),
    (0.3, 1.0),
    (0.7, 0.05),
    (0.0, 0.75),
    (0.55, 0.3),
]
SINGLE_THREAD_ENV = {
    "VIPS_CONCURRENCY": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENCV_FOR_THREADS_NUM": "1",
}

Box = tuple[int, int, int, int]


def make_photo(index: int) -> tuple[Image.Image, Box]:
    """A 12 MP photo-like scene: sky over ground, soft light blotches, pebbles, grain, a figure."""
    rng = np.random.default_rng(index)
    horizon = int(HEIGHT_PX * rng.uniform(0.35, 0.6))
    rows = np.arange(HEIGHT_PX, dtype=np.float32)[:, None, None]
    sky_top, sky_low = np.array([110, 150, 205], np.float32), np.array([190, 205, 220], np.float32)
    ground_near, ground_far = (
        np.array([85, 100, 60], np.float32),
        np.array([120, 130, 90], np.float32),
    )
    sky = sky_top + (sky_low - sky_top) * np.clip(rows / horizon, 0, 1)
    ground = ground_far + (ground_near - ground_far) * np.clip(
        (rows - horizon) / (HEIGHT_PX - horizon), 0, 1
    )
    base = np.where(rows < horizon, sky, ground)
    light = rng.normal(0.0, 10.0, (24, 32, 1)).astype(np.float32)
    tint = rng.normal(0.0, 3.0, (24, 32, 3)).astype(np.float32)
    blotches = Image.fromarray(np.clip(light + tint + 128, 0, 255).astype(np.uint8))
    smooth = np.asarray(blotches.resize((WIDTH_PX, HEIGHT_PX), Image.Resampling.BICUBIC))
    pixels = base + (smooth.astype(np.float32) - 128.0)
    pixels += rng.integers(-4, 5, (HEIGHT_PX, WIDTH_PX, 1), dtype=np.int8)
    photo = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(photo)
    for _ in range(60):
        x, y = int(rng.integers(0, WIDTH_PX)), int(rng.integers(horizon, HEIGHT_PX))
        radius = int(rng.integers(10, 45))
        grey = int(rng.integers(70, 130))
        draw.ellipse(
            (x - radius, y - radius // 2, x + radius, y + radius // 2),
            fill=(grey, grey - 5, grey - 15),
        )
    subject_w, subject_h = 520, 900
    fx, fy = PLACES[index % len(PLACES)]
    left = round(fx * (WIDTH_PX - subject_w))
    top = round(fy * (HEIGHT_PX - subject_h))
    subject = (left, top, left + subject_w, top + subject_h)
    draw_figure(draw, subject, rng)
    return photo, subject


def draw_figure(draw: ImageDraw.ImageDraw, box: Box, rng: np.random.Generator) -> None:
    """A person-like figure filling `box`: skin-toned head, patterned shirt, dark trousers."""
    left, top, right, bottom = box
    width, height = right - left, bottom - top
    head = width // 3
    centre = left + width // 2
    draw.ellipse((centre - head // 2, top, centre + head // 2, top + head), fill=(224, 172, 140))
    shirt_top, shirt_bottom = top + head, top + head + (height - head) // 2
    colour = tuple(int(c) for c in rng.integers(120, 255, 3))
    draw.rectangle((left, shirt_top, right - 1, shirt_bottom), fill=colour)
    for y in range(shirt_top + 20, shirt_bottom, 60):
        draw.rectangle((left, y, right - 1, y + 20), fill=(30, 30, 60))
    draw.rectangle(
        (left + width // 6, shirt_bottom, left + 5 * width // 6, bottom - 1), fill=(40, 40, 45)
    )


def generate_real(directory: Path) -> None:
    """Write the real-photo test set (tests/crop/real_photos.py), each also EXIF-rotated (6), and
    manifest.json with the faces marked by hand (upright source pixels)."""
    from tests.crop.real_photos import photos, rotated  # noqa: PLC0415 - the real set only

    manifest = []
    for photo in photos():
        for orientation in (1, 6):
            copy = photo if orientation == 1 else rotated(photo, orientation)
            path = directory / f"{photo.name}-{orientation}.img"
            path.write_bytes(copy.data)
            manifest.append(
                {
                    "file": path.name,
                    "faces": [list(face) for face in photo.faces],
                    "people": [list(person) for person in photo.people],
                }
            )
    (directory / "manifest.json").write_text(json.dumps(manifest))


def _fits(box: Box, inner: Box) -> bool:
    return inner[2] - inner[0] <= box[2] - box[0] and inner[3] - inner[1] <= box[3] - box[1]


def kept(boxes: list[Box], entry: dict[str, list[int] | list[list[int]]]) -> tuple[int, ...]:
    """(kept, counted) twice. Synthetic: the subject in every crop (and no second pair). Real:
    crops keeping every face among those whose window can hold all the faces, then subjects
    (each face and each marked person) inside among the crops that can hold each."""
    if "faces" not in entry:
        subject = tuple(entry["subject"])
        return sum(contains(box, subject) for box in boxes), len(boxes), 0, 0
    faces = [tuple(face) for face in entry["faces"] if isinstance(face, list)]
    subjects = faces + [tuple(person) for person in entry["people"] if isinstance(person, list)]
    all_faces = all_counted = subjects_kept = subjects_counted = 0
    for box in boxes:
        if faces:
            union = (
                min(f[0] for f in faces),
                min(f[1] for f in faces),
                max(f[2] for f in faces),
                max(f[3] for f in faces),
            )
            if _fits(box, union):
                all_counted += 1
                all_faces += all(contains(box, face) for face in faces)
        for subject in subjects:
            if _fits(box, subject):
                subjects_counted += 1
                subjects_kept += contains(box, subject)
    return all_faces, all_counted, subjects_kept, subjects_counted


def generate(directory: Path, count: int) -> None:
    """Write `count` JPEGs (odd ones progressive) and manifest.json with subject boxes."""
    manifest = []
    for index in range(count):
        photo, subject = make_photo(index)
        progressive = index % 2 == 1
        path = directory / f"photo-{index:02d}.jpg"
        photo.save(path, "JPEG", quality=SOURCE_QUALITY, progressive=progressive)
        manifest.append({"file": path.name, "subject": subject, "progressive": progressive})
    (directory / "manifest.json").write_text(json.dumps(manifest))


def contains(outer: Box, inner: Box) -> bool:
    """Whether `inner` lies entirely inside `outer`."""
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and inner[2] <= outer[2]
        and inner[3] <= outer[3]
    )


def run_ours(data: bytes) -> list[Box]:
    """This engine: returns the crop boxes (source pixels)."""
    return [rendition.crop_box for rendition in render(data, SPEC)]


def shrink_for(width: int, height: int) -> int:
    """The JPEG shrink-on-load factor covering every output, as our engine chooses it."""
    scale = max(needed_scale(window_size(ratio, width, height), MAX_SIDE_PX) for ratio in RATIOS)
    return next(factor for factor in (8, 4, 2, 1) if 1 / factor >= scale)


def make_vips(shrink_on_load: bool) -> Callable[[bytes], list[Box]]:
    """libvips: decode once (to memory), smartcrop attention per ratio, Lanczos resize, encode."""
    import pyvips  # noqa: PLC0415 - only this engine's subprocess loads libvips

    def run(data: bytes) -> list[Box]:
        probe = pyvips.Image.new_from_buffer(data, "")
        shrink = shrink_for(probe.width, probe.height) if shrink_on_load else 1
        options = {"shrink": shrink} if shrink > 1 else {}  # only JPEG loaders take shrink
        image = pyvips.Image.new_from_buffer(data, "", **options).autorot().copy_memory()
        boxes = []
        for ratio in RATIOS:
            win_w, win_h = window_size(ratio, image.width, image.height)
            crop = image.smartcrop(win_w, win_h, interesting="attention")
            out_w, _ = output_size(ratio, (win_w, win_h), MAX_SIDE_PX)
            crop.resize(out_w / win_w, kernel="lanczos3").jpegsave_buffer(
                Q=QUALITY, optimize_coding=True, interlace=False
            )
            left, top = -crop.xoffset, -crop.yoffset
            boxes.append(
                (left * shrink, top * shrink, (left + win_w) * shrink, (top + win_h) * shrink)
            )
        return boxes

    return run


def run_smartcrop(data: bytes) -> list[Box]:
    """smartcrop.py on a Pillow image decoded once at the same DCT scale as ours."""
    import smartcrop  # noqa: PLC0415 - only this engine's subprocess loads it

    cropper = smartcrop.SmartCrop()
    source = Image.open(io.BytesIO(data))
    full_w, full_h = source.size
    scale = max(needed_scale(window_size(ratio, full_w, full_h), MAX_SIDE_PX) for ratio in RATIOS)
    source.draft("RGB", (int(full_w * scale) + 1, int(full_h * scale) + 1))
    image = source.convert("RGB")
    factor = full_w / image.width
    boxes = []
    for ratio in RATIOS:
        win_w, win_h = window_size(ratio, image.width, image.height)
        out_w, out_h = output_size(ratio, (win_w, win_h), MAX_SIDE_PX)
        found = cropper.crop(image, out_w, out_h, min_scale=1.0)["top_crop"]
        box = (found["x"], found["y"], found["x"] + found["width"], found["y"] + found["height"])
        resized = image.resize((out_w, out_h), Image.Resampling.LANCZOS, box=box)
        resized.save(io.BytesIO(), "JPEG", quality=QUALITY, optimize=True)
        boxes.append(tuple(round(value * factor) for value in box))
    return boxes


def peak_rss_mb() -> tuple[float, float]:
    """(VmHWM, ru_maxrss) of this process in MB.

    ru_maxrss survives exec on Linux, so a child started by a big parent reports at least the
    parent's peak; VmHWM belongs to this process's own address space. Both are printed.
    """
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024, maxrss
    return maxrss, maxrss


def worker(engine: str, directory: Path) -> None:
    """Run one engine over every image in `directory`; print one JSON line of results."""
    manifest = json.loads((directory / "manifest.json").read_text())
    engines: dict[str, Callable[[bytes], list[Box]]] = {
        "ours": run_ours,
        "smartcrop": run_smartcrop,
    }
    if engine.startswith("vips"):
        engines[engine] = make_vips(shrink_on_load=engine == "vips")
    run = engines[engine]
    sources = [(directory / entry["file"]).read_bytes() for entry in manifest]
    run(sources[0])  # warm-up: imports, codec tables, first-call allocations
    wall, cpu, counts = [], [], [0, 0, 0, 0]
    for data, entry in zip(sources, manifest, strict=True):
        start, start_cpu = time.perf_counter(), time.process_time()
        boxes = run(data)
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        counts = [a + b for a, b in zip(counts, kept(boxes, entry), strict=True)]
    contained, total, subjects, subject_crops = counts
    hwm, maxrss = peak_rss_mb()
    result = {
        "median_ms": statistics.median(wall),
        "min_ms": min(wall),
        "max_ms": max(wall),
        "cpu_ms": statistics.median(cpu),
        "peak_rss_mb": hwm,
        "ru_maxrss_mb": maxrss,
        "contained": contained,
        "crops": total,
        "subjects": subjects,
        "subject_crops": subject_crops,
        "sources": len(sources),
    }
    if engine == "ours":
        result.update(detector_ms(sources))
    print(json.dumps(result))


def detector_ms(sources: list[bytes]) -> dict[str, float]:
    """Median ms of the face search alone (`find_faces`) on each source's saliency decode, and
    of the person prior alone (`find_people`) on those it searches (no face to keep), wall and
    CPU (best of two calls), and how many it searched."""
    from batchcrop.crop.decode import decode_rgb, open_image  # noqa: PLC0415
    from batchcrop.crop.faces import find_faces  # noqa: PLC0415
    from batchcrop.crop.people import find_people, searched  # noqa: PLC0415
    from batchcrop.crop.planning import saliency_reduction  # noqa: PLC0415

    times: dict[str, list[float]] = {"faces": [], "faces_cpu": [], "people": [], "people_cpu": []}
    for data in sources:
        opened = open_image(data, 10**9)
        picture = decode_rgb(opened, saliency_reduction(opened, SPEC.max_side))
        faces = find_faces(picture, opened.size)
        searches = [("faces", partial(find_faces, picture, opened.size))]
        if searched(faces):
            searches.append(("people", partial(find_people, picture, opened.size, faces)))
        for name, search in searches:
            wall = cpu = float("inf")
            for _ in range(2):
                start, start_cpu = time.perf_counter(), time.process_time()
                search()
                wall = min(wall, (time.perf_counter() - start) * 1000)
                cpu = min(cpu, (time.process_time() - start_cpu) * 1000)
            times[name].append(wall)
            times[f"{name}_cpu"].append(cpu)
    medians = {
        f"{name}_ms": statistics.median(values) if values else 0.0 for name, values in times.items()
    }
    return {**medians, "people_searched": len(times["people"])}


def main() -> None:
    """Generate the images, run every engine in its own subprocess, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the engines in turn this many times, keep each "
        "engine's fastest round (lessens the effect of other load on a shared machine)",
    )
    parser.add_argument(
        "--set",
        choices=("synthetic", "real"),
        default="synthetic",
        help="synthetic: generated 12 MP JPEGs with a known subject; real: the test suite's "
        "photographs of people (each also EXIF-rotated), kept = faces inside crops that can "
        "hold them",
    )
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--generate", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.dir)
        return
    if args.generate is not None:
        if args.set == "real":
            generate_real(args.dir)
        else:
            generate(args.dir, args.generate)
        return
    env = {**os.environ, **SINGLE_THREAD_ENV}
    with tempfile.TemporaryDirectory(prefix="bench-crop-") as temp:
        if args.set == "real":
            print("writing the real-photo set ...", flush=True)
        else:
            print(f"generating {args.images} {WIDTH_PX}x{HEIGHT_PX} JPEGs ...", flush=True)
        # In a subprocess, so this process stays small: children inherit its ru_maxrss.
        generator = [sys.executable, __file__, "--generate", str(args.images), "--dir", temp]
        generator += ["--set", args.set]
        subprocess.run(generator, env=env, check=True)
        results: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for engine in args.engines.split(","):
                command = [sys.executable, __file__, "--worker", engine, "--dir", temp]
                done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
                if done.returncode != 0:
                    print(f"{engine}: failed\n{done.stderr}", file=sys.stderr)
                    continue
                row = json.loads(done.stdout.strip().splitlines()[-1])
                if engine not in results or row["median_ms"] < results[engine]["median_ms"]:
                    results[engine] = row
    print_table(results, "faces kept" if args.set == "real" else "kept")


def print_table(results: dict[str, dict[str, float]], kept: str = "kept") -> None:
    """One row per engine (wall and CPU ms per source, peak RSS, what the crops kept under the
    heading `kept`, our median divided by the engine's), then the detectors' own times for
    batchcrop."""
    ours = results.get("ours", {}).get("median_ms")
    columns = (
        "median ms",
        "min-max ms",
        "CPU ms",
        "VmHWM MB",
        "ru_maxrss MB",
        kept,
        "subjects",
        "ours/it",
    )
    widths = (10, 12, 8, 10, 13, 11, 9, 8)
    print(f"{'engine':34}" + "".join(f"{c:>{w + 1}}" for c, w in zip(columns, widths, strict=True)))
    for engine, row in results.items():
        cells = (
            f"{row['median_ms']:.1f}",
            f"{row['min_ms']:.0f}-{row['max_ms']:.0f}",
            f"{row['cpu_ms']:.1f}",
            f"{row['peak_rss_mb']:.1f}",
            f"{row['ru_maxrss_mb']:.1f}",
            f"{row['contained']:.0f}/{row['crops']:.0f}",
            f"{row['subjects']:.0f}/{row['subject_crops']:.0f}" if row["subject_crops"] else "-",
            f"{ours / row['median_ms']:.2f}" if ours else "-",
        )
        line = "".join(f"{c:>{w + 1}}" for c, w in zip(cells, widths, strict=True))
        print(f"{LABELS[engine]:34}{line}")
    if "ours" in results:
        row = results["ours"]
        print(
            "batchcrop's detectors alone, median ms per source (wall / CPU): "
            f"faces {row['faces_ms']:.1f} / {row['faces_cpu_ms']:.1f}, "
            f"people {row['people_ms']:.1f} / {row['people_cpu_ms']:.1f} on the "
            f"{row['people_searched']:.0f} of {row['sources']:.0f} sources it searches (no face)"
        )


if __name__ == "__main__":
    main()

"""Benchmark: the operator page's source thumbnails, and a whole contact-sheet page.

Part 1 (always): the work behind `GET .../source-thumbnail?max_side=320` — batchcrop's
`batchcrop.crop.thumbnail` (Pillow, DCT-scaled decode, EXIF orientation, Lanczos, JPEG q80) against
libvips `thumbnail_buffer` (shrink-on-load, auto-rotate) + `jpegsave_buffer(Q=80)`, on the same
generated sources in one process, engines interleaved per round, libvips on one thread
(`VIPS_CONCURRENCY=1`). Prints median wall and CPU ms per image, per source kind.

Part 2 (`--page`): a contact-sheet page of 25 items x 4 ratios (125 images) in headless
Chromium against a live server: seconds from navigation until every image is shown, first with
a cold browser cache (every thumbnail decoded by the server), then again in a new tab (thumbnails
and derivatives from the browser cache, only the JSON fetched).

    .venv/bin/python bench/thumbnail.py [--sources 8] [--rounds 3] [--page]

Needs the `bench` extra (pyvips, pyvips-binary); `--page` also needs /usr/bin/chromium and the
`playwright` package (the `test` extra).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("VIPS_CONCURRENCY", "1")

import pyvips
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchcrop.api.media import THUMBNAIL_MAX_SIDE_PX_DEFAULT
from batchcrop.crop import RATIOS_DEFAULT, thumbnail

JPEG_SIZE = (4000, 3000)
PNG_SIZE = (3000, 2000)
QUALITY = 80
EXIF_ORIENTATION_TAG = 0x0112
SHEET_ITEMS = 25
SHEET_RATIOS = list(RATIOS_DEFAULT)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def scene(seed: int, size: tuple[int, int]) -> Image.Image:
    """A photo-like picture: graded background, grain, blotches and one subject."""
    rng = random.Random(seed)
    width, height = size
    small = Image.new("RGB", (width // 8, height // 8))
    draw = ImageDraw.Draw(small)
    for y in range(small.height):
        shade = 90 + 100 * y // small.height
        draw.line((0, y, small.width, y), fill=(shade // 2, shade * 2 // 3, shade))
    for _ in range(40):
        x, y = rng.randrange(small.width), rng.randrange(small.height)
        r = rng.randrange(5, 40)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(rng.randrange(256) for _ in "rgb"))
    image = small.resize(size, Image.Resampling.BILINEAR)
    noise = Image.effect_noise(size, 24).convert("RGB")
    return Image.blend(image, noise, 0.15)


def sources(count: int) -> list[tuple[str, bytes]]:
    """(kind, bytes): 12 MP JPEGs, half of them stored sideways with EXIF orientation 6, and
    every fourth a 6 MP PNG (which cannot be decoded at a reduced scale)."""
    made = []
    for n in range(count):
        buffer = io.BytesIO()
        if n % 4 == 3:
            scene(n, PNG_SIZE).save(buffer, format="PNG", compress_level=1)
            made.append(("png 6 MP", buffer.getvalue()))
            continue
        exif = Image.Exif()
        if n % 2:
            exif[EXIF_ORIENTATION_TAG] = 6
        scene(n, JPEG_SIZE).save(buffer, format="JPEG", quality=90, exif=exif.tobytes())
        made.append(("jpeg 12 MP", buffer.getvalue()))
    return made


def ours(data: bytes) -> tuple[bytes, tuple[int, int]]:
    jpeg = thumbnail(data, THUMBNAIL_MAX_SIDE_PX_DEFAULT).data
    with Image.open(io.BytesIO(jpeg)) as image:
        return jpeg, image.size


def vips(data: bytes) -> tuple[bytes, tuple[int, int]]:
    image = pyvips.Image.thumbnail_buffer(data, THUMBNAIL_MAX_SIDE_PX_DEFAULT, size="down")
    return image.jpegsave_buffer(Q=QUALITY), (image.width, image.height)


ENGINES: dict[str, Callable[[bytes], tuple[bytes, tuple[int, int]]]] = {
    "batchcrop (Pillow)": ours,
    "libvips thumbnail_buffer": vips,
}


def bench_thumbnails(made: list[tuple[str, bytes]], rounds: int) -> None:
    """Print median wall/CPU ms per image for each engine and kind, and check equal sizes."""
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for kind, data in made:
            sizes = set()
            for name, engine in ENGINES.items():
                started_wall, started_cpu = time.perf_counter(), time.process_time()
                _, size = engine(data)
                wall.setdefault((name, kind), []).append(
                    1000 * (time.perf_counter() - started_wall)
                )
                cpu.setdefault((name, kind), []).append(1000 * (time.process_time() - started_cpu))
                sizes.add(size)
            # Same upright orientation from both (a rounding pixel apart at most).
            widths, heights = zip(*sizes, strict=True)
            assert max(widths) - min(widths) <= 1, sizes
            assert max(heights) - min(heights) <= 1, sizes
    print(f"{'engine':28} {'source':12} {'median ms':>10} {'CPU ms':>8} {'n':>4}")
    for (name, kind), times in sorted(wall.items(), key=lambda e: (e[0][1], e[0][0])):
        print(
            f"{name:28} {kind:12} {statistics.median(times):10.1f} "
            f"{statistics.median(cpu[(name, kind)]):8.1f} {len(times):4d}"
        )


def bench_page(made: list[tuple[str, bytes]]) -> None:
    """Time a 25-item contact sheet in Chromium, cold and warm browser cache."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 -- only for --page

    from batchcrop.app import build  # noqa: PLC0415
    from batchcrop.settings import Settings  # noqa: PLC0415
    from batchcrop.worker.worker import WorkerOptions  # noqa: PLC0415
    from storage import LocalStore  # noqa: PLC0415
    from tests.api.live import running  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "src").mkdir()
        paths = []
        for n in range(SHEET_ITEMS):
            kind, data = made[n % len(made)]
            # Distinct bytes per item so no two items share a thumbnail in the browser cache.
            path = root / "src" / f"item{n}.{'png' if kind.startswith('png') else 'jpg'}"
            path.write_bytes(data + n.to_bytes(4, "big") if kind.startswith("jpeg") else data)
            paths.append(str(path))
        app = build(
            Settings(
                database_url=f"sqlite:///{root / 'b.db'}",
                store=f"file://{root / 'out'}",
                source_roots=(str(root / "src"),),
            )
        )
        app.upgrade()
        with running(app) as live:
            body = {
                "items": [{"source": p, "ref": f"sku-{n}"} for n, p in enumerate(paths)],
                "ratios": SHEET_RATIOS,
                "max_side": 600,
            }
            batch = live.client.post("/v1/batches", json=body).json()
            worker = app.worker(
                LocalStore(root / "out"), WorkerOptions(concurrency=2, batch_ids=[batch["id"]])
            )
            worker.start()
            while app.batches.status(batch["id"])["state"] != "succeeded":
                time.sleep(0.2)
            worker.stop()
            worker.join()
            images = SHEET_ITEMS * (1 + len(SHEET_RATIOS))
            url = f"{live.url}/batches/{batch['id']}?per_page={SHEET_ITEMS}"
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                for label in ("cold browser cache", "warm browser cache"):
                    page = context.new_page()
                    started = time.perf_counter()
                    page.goto(url)
                    page.wait_for_function(
                        "n => document.querySelectorAll('#sheet img[src^=\"blob:\"]').length === n",
                        arg=images,
                        timeout=120_000,
                    )
                    seconds = time.perf_counter() - started
                    print(f"contact sheet, {images} images, {label}: {seconds:.2f} s")
                    page.close()
                browser.close()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--page", action="store_true", help="also time a contact-sheet page")
    args = parser.parse_args()
    made = sources(args.sources)
    print(f"Pillow {Image.__version__}, libvips {pyvips.version(0)}.{pyvips.version(1)}")
    bench_thumbnails(made, args.rounds)
    if args.page:
        bench_page(made)


if __name__ == "__main__":
    main()

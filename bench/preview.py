"""Benchmark: a source thumbnail of a 64 MP PNG, decoded from the source against served from the
item's stored preview (docs/design.md §5, previews).

Writes one 8000x8000 PNG (a smooth photo-like scene with grain, about 60 MB), submits it twice
with `python -m batchcrop submit` on the embedded default (SQLite + local folder), renders the
first batch with `python -m batchcrop worker` (which stores the preview) and leaves the second
unrendered (no preview: its thumbnail is decoded from the source, as every thumbnail was before
previews). Then starts `python -m batchcrop serve` with a token and times
`GET .../source-thumbnail?max_side=640` (the contact sheet's request) and `?max_side=320` for
both items, sequentially over loopback, and prints the median and the range per case, with
`X-Thumbnail-From`.

First it times, in this process, what the preview adds to a worker's render (default request:
four ratios at 1200 px) of that PNG and of a 12 MP JPEG: the render alone, the render followed by
its own decode for the preview (`source_preview`), and the render handing its decode to the
preview (`PreviewTaker`, what the worker does).

    PYTHONPATH=. .venv/bin/python bench/preview.py [--rounds 5] [--worker-cost-only]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from batchcrop.crop import (  # noqa: E402 -- after the path
    PREVIEW_MAX_SIDE_PX,
    RATIOS_DEFAULT,
    PreviewTaker,
    Ratio,
    RenderSpec,
    render,
    source_preview,
)

SIZE_PX = (8000, 8000)
TERMINAL = ("succeeded", "failed", "abandoned")
TIMEOUT_SECONDS = 600.0
MAX_SIDES = (PREVIEW_MAX_SIDE_PX, 320)


def large_png(path: Path) -> None:
    """A 64 MP RGB PNG: a smooth scene (gradient and blotches, scaled up) with light grain."""
    rng = random.Random(64)
    small = Image.new("RGB", (SIZE_PX[0] // 16, SIZE_PX[1] // 16))
    draw = ImageDraw.Draw(small)
    for y in range(small.height):
        shade = 60 + 150 * y // small.height
        draw.line((0, y, small.width, y), fill=(shade // 2, shade * 2 // 3, shade))
    for _ in range(60):
        x, y, r = rng.randrange(small.width), rng.randrange(small.height), rng.randrange(5, 60)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(rng.randrange(256) for _ in "rgb"))
    image = small.filter(ImageFilter.GaussianBlur(2)).resize(SIZE_PX, Image.Resampling.BICUBIC)
    grain = Image.effect_noise((SIZE_PX[0] // 4, SIZE_PX[1] // 4), 12).resize(SIZE_PX)
    image = Image.blend(image, Image.merge("RGB", (grain, grain, grain)), 0.06)
    image.save(path, compress_level=6)


def cli(env: dict[str, str], *args: str) -> str:
    """`python -m batchcrop ARGS` of this checkout; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "batchcrop", *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def wait_terminal(env: dict[str, str], batch_id: str) -> None:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while json.loads(cli(env, "status", batch_id, "--json"))["state"] not in TERMINAL:
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id} not finished in {TIMEOUT_SECONDS} s")
        time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str, token: str) -> tuple[float, str, int]:
    """(milliseconds, X-Thumbnail-From, bytes) of one GET."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        body = response.read()
        origin = response.headers["X-Thumbnail-From"]
    return (time.perf_counter() - started) * 1000, origin, len(body)


def worker_cost(name: str, data: bytes, rounds: int) -> None:
    """Print the median ms of a render alone, with a second decode for the preview, and with
    the preview taken from the render's decode."""
    spec = RenderSpec(tuple(Ratio.parse(text) for text in RATIOS_DEFAULT))

    def alone() -> None:
        render(data, spec)

    def decoding_again() -> None:
        render(data, spec)
        source_preview(data)

    def taking() -> None:
        taker = PreviewTaker(data)
        render(data, spec, on_decode=taker)
        taker.preview(data)

    times: dict[str, list[float]] = {"alone": [], "again": [], "taken": []}
    for _ in range(rounds):  # interleaved, so a busy moment hits every case alike
        for case, run in (("alone", alone), ("again", decoding_again), ("taken", taking)):
            started = time.perf_counter()
            run()
            times[case].append((time.perf_counter() - started) * 1000)
    base, again, taken = (statistics.median(times[c]) for c in ("alone", "again", "taken"))
    print(
        f"{name}: render {base:.0f} ms; + preview decoded again {again:.0f} ms "
        f"(+{100 * (again / base - 1):.0f} %); + preview taken from the render {taken:.0f} ms "
        f"(+{100 * (taken / base - 1):.0f} %)"
    )


def main() -> None:
    """Build both batches, serve them, time the thumbnails, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker-cost-only", action="store_true")
    args = parser.parse_args()
    photo = Image.effect_noise((4000, 3000), 40).convert("RGB").filter(ImageFilter.GaussianBlur(2))
    buffer = io.BytesIO()
    photo.save(buffer, format="JPEG", quality=90)
    worker_cost("JPEG 4000x3000", buffer.getvalue(), args.rounds)
    if args.worker_cost_only:
        return
    with tempfile.TemporaryDirectory(prefix="batchcrop-preview-") as temp:
        work = Path(temp)
        sources = work / "sources"
        sources.mkdir()
        png = sources / "large.png"
        large_png(png)
        data = png.read_bytes()
        print(f"source: {SIZE_PX[0]}x{SIZE_PX[1]} PNG, {len(data) / 1e6:.1f} MB")
        worker_cost(f"PNG {SIZE_PX[0]}x{SIZE_PX[1]}", data, max(1, args.rounds // 2))
        del data
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "BATCHCROP_DATABASE_URL": f"sqlite:///{work / 'batchcrop.db'}",
            "BATCHCROP_STORE": f"file://{work / 'derivatives'}",
            "BATCHCROP_SOURCE_ROOTS": str(sources),
        }
        rendered = json.loads(cli(env, "submit", str(png), "--json"))["id"]
        waiting = json.loads(cli(env, "submit", str(png), "--ratios", "1:1", "--json"))["id"]
        started = time.perf_counter()
        worker = subprocess.Popen(
            [sys.executable, "-m", "batchcrop", "worker", "--batch", rendered], env=env
        )
        try:
            wait_terminal(env, rendered)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        print(
            f"render with preview (worker, incl. start-up): {time.perf_counter() - started:.1f} s"
        )
        token = secrets.token_urlsafe(32)
        (work / "token").write_text(token + "\n")
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "batchcrop",
                "serve",
                "--port",
                str(port),
                "--api-token-file",
                str(work / "token"),
                "--log-level",
                "WARNING",
            ],
            env=env,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + TIMEOUT_SECONDS
            while True:
                try:
                    urllib.request.urlopen(f"{base}/healthz", timeout=2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
            items = {}
            for name, batch_id in (("stored preview", rendered), ("decoded source", waiting)):
                request = urllib.request.Request(
                    f"{base}/v1/batches/{batch_id}/items",
                    headers={"Authorization": f"Bearer {token}"},
                )
                with urllib.request.urlopen(request) as response:
                    (item,) = json.load(response)["items"]
                items[name] = f"{base}/v1/batches/{batch_id}/items/{item['id']}/source-thumbnail"
            print("| item | max_side | X-Thumbnail-From | median ms | min–max ms | bytes |")
            print("| --- | ---: | --- | ---: | ---: | ---: |")
            for name in ("decoded source", "stored preview"):
                for max_side in MAX_SIDES:
                    runs = [
                        get(f"{items[name]}?max_side={max_side}", token) for _ in range(args.rounds)
                    ]
                    ms = [r[0] for r in runs]
                    print(
                        f"| {name} | {max_side} | {runs[0][1]} | {statistics.median(ms):.1f} | "
                        f"{min(ms):.1f}–{max(ms):.1f} | {runs[0][2]} |"
                    )
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)


if __name__ == "__main__":
    main()

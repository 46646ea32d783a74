"""Regenerate docs/screenshots/batch.png: the operator page of a batch of real photographs.

Writes the photos of tests/crop/real_photos.py (plus a text file named `broken.jpg`, so the page
shows a failure) into a temporary folder, submits them with `batchcrop submit --items-csv` (refs
are the photo names) on the embedded default (SQLite + local folder), processes them with
`batchcrop worker`, starts `batchcrop serve` with a token on the same database and store, and takes
a full-page screenshot of `/batches/{id}` at 1280 px wide in headless Debian Chromium once every
thumbnail has loaded, saved as a 256-colour PNG.

    .venv/bin/python bench/screenshot_batch.py docs/screenshots/batch.png

Needs the `test` extra (the packages that ship the photos), Playwright and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.crop.real_photos import photos

UNPUBLISHED = ["cafeteria", "luispedro"]
"""Test photos without a stated licence to republish them: left out of the docs' screenshot."""

BATCHCROP = str(Path(sys.executable).parent / "batchcrop")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
RATIOS = "1:1,4:3,16:9,9:16"
MAX_SIDE = "320"
TERMINAL = ("succeeded", "failed", "abandoned")
TIMEOUT_S = 120.0


def write_sources(folder: Path, skip: set[str]) -> Path:
    """Each photo as NAME.jpg or NAME.png (by its sniffed format), `broken.jpg`, and items.csv."""
    folder.mkdir()
    rows = []
    for photo in photos():
        if photo.name in skip:
            continue
        with Image.open(io.BytesIO(photo.data)) as image:
            suffix = {"JPEG": "jpg", "PNG": "png"}[str(image.format)]
        path = folder / f"{photo.name}.{suffix}"
        path.write_bytes(photo.data)
        rows.append({"source": str(path), "ref": photo.name})
    broken = folder / "broken.jpg"
    broken.write_text("this is not an image at all\n" * 10)
    rows.append({"source": str(broken), "ref": "broken"})
    items = folder.parent / "items.csv"
    with items.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["source", "ref"])
        writer.writeheader()
        writer.writerows(rows)
    return items


def batchcrop(work: Path, *args: str) -> str:
    """Run a batchcrop command in `work`; its stdout."""
    done = subprocess.run([BATCHCROP, *args], cwd=work, check=True, capture_output=True, text=True)
    return done.stdout


def process(work: Path, items: Path) -> str:
    """Submit the batch, run a worker on it until it is terminal; the batch id."""
    batch_id = json.loads(
        batchcrop(
            work,
            "submit",
            "--items-csv",
            str(items),
            "--ratios",
            RATIOS,
            "--max-side",
            MAX_SIDE,
            "--json",
        )
    )["id"]
    worker = subprocess.Popen([BATCHCROP, "worker", "--batch", batch_id], cwd=work)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while json.loads(batchcrop(work, "status", batch_id, "--json"))["state"] not in TERMINAL:
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id} not finished in {TIMEOUT_S} s")
            time.sleep(0.5)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    return str(batch_id)


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_up(url: str) -> None:
    """Poll `url` until the server answers at all."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def screenshot(base: str, token: str, batch_id: str, out: Path) -> None:
    """Enter the token, open the batch page, wait for every image, save the full page."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(f"{base}/batches/{batch_id}")
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Use token").click()
        page.wait_for_selector("img.derivative")
        page.wait_for_function(  # every image loaded, or hidden because its fetch failed
            "() => [...document.querySelectorAll('img.thumb, img.derivative')].every("
            "(img) => img.hidden || (img.src && img.complete && img.naturalWidth > 0))"
        )
        page.wait_for_timeout(500)  # let the crop-box overlays and layout settle
        page.screenshot(path=str(out), full_page=True)
        browser.close()


def main() -> None:
    """Build the batch, serve it, screenshot its page, optimise the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="PNG to write")
    parser.add_argument("--skip", action="append", default=[], help="leave out this photo")
    parser.add_argument(
        "--all",
        action="store_true",
        help="include the photos whose licence does not cover republishing (for a local look)",
    )
    args = parser.parse_args()
    if not args.all:
        args.skip += UNPUBLISHED
    with tempfile.TemporaryDirectory(prefix="batchcrop-shot-") as temp:
        work = Path(temp)
        batch_id = process(work, write_sources(work / "photos", set(args.skip)))
        token = secrets.token_urlsafe(32)
        (work / "token").write_text(token + "\n")
        port = free_port()
        server = subprocess.Popen(
            [BATCHCROP, "serve", "--port", str(port), "--api-token-file", str(work / "token")],
            cwd=work,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until_up(f"{base}/static/style.css")
            screenshot(base, token, batch_id, work / "shot.png")
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        with Image.open(work / "shot.png") as shot:
            # 256 colours (median cut) keep photos and text clean at about a third of the size.
            shot.convert("RGB").quantize(256, Image.Quantize.MEDIANCUT).save(
                args.out, optimize=True
            )
    print(f"{args.out}: batch {batch_id}, {args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()

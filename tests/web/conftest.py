"""Fixtures for the operator page: generated sources (one EXIF-rotated, one broken), apps on a
real database, live servers with a token, a batch processed by a real worker, and headless
Chromium driven by Playwright.

Chromium tests skip when `/usr/bin/chromium` or Playwright is missing and `CI` is unset; under
`CI` they fail instead, so the browser half of the suite can never vanish silently.
"""

from __future__ import annotations

import io
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from batchcrop.app import App
from batchcrop.worker.worker import WorkerOptions
from storage import LocalStore
from tests.api.live import LiveServer, running
from tests.apps import app_factory

IN_CI = bool(os.environ.get("CI"))
CHROMIUM_PATH = Path("/usr/bin/chromium")
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
TOKEN = "page-t0ken-of-the-operator-page-tests-0123"
RATIOS = ["1:1", "16:9", "3:4"]
GOOD_IMAGES = 5
BATCH_TIMEOUT_SECONDS = 60.0
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
EXIF_ORIENTATION_TAG = 0x0112
ROTATE_90_CW = 6


def photo(seed: int, size: tuple[int, int]) -> Image.Image:
    """A photo-like image: a textured background and one bright subject off-centre."""
    rng = random.Random(seed)
    width, height = size
    image = Image.new("RGB", size, (rng.randrange(50, 110),) * 3)
    draw = ImageDraw.Draw(image)
    for _ in range(200):
        x, y = rng.randrange(width), rng.randrange(height)
        draw.point((x, y), fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    cx, cy = rng.randrange(width // 4, 3 * width // 4), rng.randrange(height // 4, 3 * height // 4)
    radius = min(width, height) // 6
    colour = (240, 40 + 40 * (seed % 5), 60)
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=colour)
    return image


def rotated_jpeg(image: Image.Image) -> bytes:
    """JPEG bytes of `image` stored as is, with EXIF saying "rotate 90° clockwise to view"."""
    exif = Image.Exif()
    exif[EXIF_ORIENTATION_TAG] = ROTATE_90_CW
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, exif=exif.tobytes())
    return buffer.getvalue()


@pytest.fixture
def source_root(tmp_path: Path) -> Path:
    """Sources: landscape and portrait JPEGs, a PNG, a stored-sideways JPEG whose EXIF
    orientation makes it portrait (`rotated.jpg`, stored 240x120), and `broken.jpg` (text)."""
    root = tmp_path / "sources"
    root.mkdir()
    sizes = [(320, 200), (200, 300), (300, 300), (360, 160), (180, 240)]
    for n in range(GOOD_IMAGES):
        suffix = "png" if n == 2 else "jpg"
        photo(n, sizes[n % len(sizes)]).save(root / f"img{n}.{suffix}")
    (root / "rotated.jpg").write_bytes(rotated_jpeg(photo(9, (240, 120))))
    (root / "broken.jpg").write_bytes(b"this is not an image at all\n" * 10)
    return root


@pytest.fixture
def sources(source_root: Path) -> list[str]:
    """The good sources in a fixed order, then `rotated.jpg`, then `broken.jpg` last."""
    good = [str(source_root / n) for n in sorted(os.listdir(source_root)) if n.startswith("img")]
    return [*good, str(source_root / "rotated.jpg"), str(source_root / "broken.jpg")]


@pytest.fixture
def make_app(database_url: str, source_root: Path) -> Iterator[Callable[..., App]]:
    """Build migrated apps on this test's database (closed at teardown); kwargs go to Settings."""
    with app_factory(
        database_url=database_url,
        source_roots=(str(source_root),),
        store=f"file://{source_root.parent / 'derivatives'}",
        api_token=TOKEN,
    ) as make:
        yield make


@pytest.fixture
def live(make_app: Callable[..., App]) -> Iterator[LiveServer]:
    """A live server on loopback with `TOKEN` set; its client sends the token."""
    with running(make_app(), token=TOKEN) as server:
        yield server


def submit(live: LiveServer, sources: list[str], **fields: Any) -> dict[str, Any]:
    """POST a batch of `sources` (refs sku-0, sku-1, ...) and return its status document."""
    body: dict[str, Any] = {
        "items": [{"source": s, "ref": f"sku-{n}"} for n, s in enumerate(sources)],
        "ratios": RATIOS,
        "max_side": 96,
        "quality": 80,
    }
    body.update(fields)
    response = live.client.post("/v1/batches", json=body)
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def process(live: LiveServer, batch_id: str) -> dict[str, Any]:
    """Run a real worker on the batch until it is terminal; return the final status document."""
    store = LocalStore(Path(live.app.settings.store.removeprefix("file://")))
    worker = live.app.worker(
        store,
        WorkerOptions(
            concurrency=2,
            batch_ids=[batch_id],
            reaper_interval_seconds=1.0,
            idle_sleep_seconds=0.02,
        ),
    )
    worker.start()
    deadline = time.monotonic() + BATCH_TIMEOUT_SECONDS
    try:
        while (status := live.app.batches.status(batch_id))["state"] not in (
            "succeeded",
            "failed",
            "abandoned",
        ):
            assert time.monotonic() < deadline, f"batch not terminal in time: {status}"
            time.sleep(0.05)
    finally:
        worker.stop()
        worker.join()
    return status


@dataclass
class ProcessedBatch:
    """A live server and a batch its worker finished: every good source succeeded, the
    broken one failed `invalid_image`."""

    live: LiveServer
    status: dict[str, Any]
    items: list[dict[str, Any]]

    @property
    def id(self) -> str:
        """The batch id."""
        return str(self.status["id"])


@pytest.fixture
def processed(live: LiveServer, sources: list[str]) -> ProcessedBatch:
    """A batch of the generated sources, processed to its end by a real worker."""
    batch = submit(live, sources)
    status = process(live, batch["id"])
    items = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    return ProcessedBatch(live=live, status=status, items=items)


def _browser_missing() -> str | None:
    if not CHROMIUM_PATH.exists():
        return f"{CHROMIUM_PATH} is missing (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401, PLC0415 -- probing for the optional package
    except ImportError:
        return "the playwright package is missing"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright, one per test session."""
    missing = _browser_missing()
    if missing:
        if IN_CI:
            pytest.fail(f"Chromium is required under CI: {missing}")
        pytest.skip(f"Chromium not available: {missing}")
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 -- optional, probed above

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM_PATH), args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser tab (own sessionStorage); fails the test on any script error or CSP
    violation the page reports."""
    with ExitStack() as stack:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        stack.callback(context.close)
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        errors: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.on(
            "console",
            lambda message: (
                errors.append(message.text) if "Content Security Policy" in message.text else None
            ),
        )
        yield tab
        assert errors == []


def enter_token(page: Any, token: str = TOKEN) -> None:
    """Type the token into the page's token form and submit it."""
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Use token").click()


def save_artifact(page: Any, name: str) -> Path:
    """Screenshot the whole page into `test-artifacts/` (kept out of git)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path

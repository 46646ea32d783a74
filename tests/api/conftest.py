"""Fixtures for the HTTP API tests: generated images under a source root, wired apps on SQLite
and PostgreSQL, and live servers on loopback."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from batchcrop.app import App
from tests.api.live import LiveServer, running
from tests.apps import app_factory

TOKEN = "s3cret-t0ken-of-the-api-tests-0123456789"
IMAGE_COUNT = 6


def _image(seed: int) -> Image.Image:
    """A small photo-like image: a textured background and one bright subject off-centre."""
    rng = random.Random(seed)
    width, height = rng.choice([(160, 120), (120, 160), (200, 100)])
    image = Image.new("RGB", (width, height), (rng.randrange(40, 90),) * 3)
    draw = ImageDraw.Draw(image)
    for _ in range(30):
        x, y = rng.randrange(width), rng.randrange(height)
        draw.point((x, y), fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    cx, cy = rng.randrange(width // 4, 3 * width // 4), rng.randrange(height // 4, 3 * height // 4)
    draw.ellipse((cx - 15, cy - 15, cx + 15, cy + 15), fill=(240, 30 + seed * 20, 40))
    return image


@pytest.fixture
def source_root(tmp_path: Path) -> Path:
    """A source root holding generated JPEG and PNG images (some in a subfolder)."""
    root = tmp_path / "sources"
    (root / "shoes").mkdir(parents=True)
    for n in range(IMAGE_COUNT):
        folder = root / "shoes" if n % 2 else root
        _image(n).save(folder / f"img{n}.{'png' if n % 3 == 0 else 'jpg'}")
    return root


@pytest.fixture
def sources(source_root: Path) -> list[str]:
    """Absolute paths of the generated images, sorted."""
    return sorted(str(p) for p in source_root.rglob("img*"))


@pytest.fixture
def make_app(database_url: str, source_root: Path) -> Iterator[Callable[..., App]]:
    """Build migrated apps on this test's database (closed at teardown); kwargs go to Settings."""
    with app_factory(
        database_url=database_url,
        source_roots=(str(source_root),),
        store=f"file://{source_root.parent / 'derivatives'}",
    ) as make:
        yield make


@pytest.fixture
def serve(make_app: Callable[..., App]) -> Iterator[Callable[..., LiveServer]]:
    """Start live servers for this test: `serve(token=..., **settings)`; all stopped at teardown."""
    with ExitStack() as stack:

        def start(*, client_token: str | None = None, **overrides: Any) -> LiveServer:
            app = make_app(**overrides)
            token = client_token if client_token is not None else overrides.get("api_token")
            return stack.enter_context(running(app, token=token))

        yield start


@pytest.fixture
def api(serve: Callable[..., LiveServer]) -> LiveServer:
    """A live server without a token, sources confined to the generated source root."""
    return serve()


def batch_body(sources: list[str], **fields: Any) -> dict[str, Any]:
    """A valid POST /v1/batches body for these sources (refs sku-0, sku-1, ...)."""
    body: dict[str, Any] = {
        "items": [{"source": s, "ref": f"sku-{n}"} for n, s in enumerate(sources)],
        "ratios": ["1:1", "16:9"],
        "max_side": 64,
        "quality": 80,
    }
    body.update(fields)
    return body


def assert_problem(response: Any, status: int, *, field: str | None = None) -> dict[str, Any]:
    """Check an RFC 9457 problem response; returns its document."""
    assert status == response.status_code, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert {"type", "title", "status", "detail", "instance"} <= set(problem)
    assert status == problem["status"]
    assert "Traceback" not in response.text
    if field is not None:
        assert field in [e["field"] for e in problem.get("errors", [])], problem
        assert problem["detail"].startswith(field)
    return problem

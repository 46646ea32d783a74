"""The page's templates and static files are declared package data, so the wheel holds them."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from batchcrop.web.pages import STATIC_MEDIA_TYPES


def test_every_page_file_is_declared_package_data() -> None:
    """Each template and static file matches a `package-data` pattern of `batchcrop.web`, so
    the wheel (which `pip install` users get) holds the whole page."""
    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["batchcrop.web"]
    web = root / "batchcrop" / "web"
    files = [
        p.relative_to(web).as_posix()
        for folder in ("templates", "static")
        for p in (web / folder).iterdir()
    ]
    assert len(files) >= 10
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []
    assert {f.rsplit(".", 1)[1] for f in files if f.startswith("static/")} <= {
        suffix.removeprefix(".") for suffix in STATIC_MEDIA_TYPES
    }

"""Start-up stays light: `batchcrop --help` and `--version` import none of the heavy libraries
(the web stack, the database driver and migrations, boto3, Pillow, OpenCV, httpx), which cost a
second or more before anything happens (docs/operations.md, start-up; `bench/startup.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

HEAVY = (
    "alembic",
    "boto3",
    "cv2",
    "fastapi",
    "httpx",
    "numpy",
    "PIL",
    "pyvips",
    "prometheus_client",
    "psycopg",
    "sqlalchemy",
    "uvicorn",
)

PROBE = """
import json, os, runpy, sys
sys.argv = ["batchcrop", *json.loads(os.environ["PROBE_ARGS"])]
try:
    runpy.run_module("batchcrop", run_name="__main__")
except SystemExit:
    pass
heavy = json.loads(os.environ["PROBE_HEAVY"])
print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
"""


def _probe(args: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `batchcrop *args` in a fresh interpreter; its result and which of `HEAVY` it
    imported."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "PROBE_ARGS": json.dumps(args), "PROBE_HEAVY": json.dumps(HEAVY)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result, set(json.loads(result.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_import_no_heavy_library(args: list[str]) -> None:
    """Each of these commands answers without importing any of `HEAVY`."""
    result, imported = _probe(args, timeout=60)
    assert result.returncode == 0, result.stderr
    assert imported == set()


def test_a_run_into_a_folder_imports_no_web_stack_s3_client_or_http_client(tmp_path: Path) -> None:
    """`batchcrop run DIR --out OUT` pays only for what it uses: no web stack, no boto3, no
    httpx (the deliverer's client, which a run never starts), and it still succeeds."""
    Image.new("RGB", (64, 48), (200, 100, 50)).save(tmp_path / "one.jpg")
    args = [
        "run",
        "--no-progress",
        "--database-url",
        f"sqlite:///{tmp_path / 'batchcrop.db'}",
        "--out",
        str(tmp_path / "out"),
        str(tmp_path / "one.jpg"),
    ]
    result, imported = _probe(args, timeout=120)
    assert "succeeded" in result.stdout, result.stderr
    assert imported.isdisjoint({"boto3", "fastapi", "httpx", "uvicorn"}), imported
    assert {"sqlalchemy", "PIL", "pyvips"} <= imported  # the probe sees what the run used

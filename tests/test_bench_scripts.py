"""Every benchmark under bench/ still starts: each is run by hand, so an import broken by a move
in the package would otherwise go unnoticed until someone needs the figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "bench").glob("*.py"))


def test_there_are_benchmarks() -> None:
    """The glob below sees the scripts (a moved folder would make every case vanish)."""
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_benchmark_prints_its_usage(script: Path) -> None:
    """`--help` imports the whole script and prints its usage, without running anything."""
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout

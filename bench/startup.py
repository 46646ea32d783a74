"""Start-up time of the `batchcrop` command: this tree against a baseline commit, in one run.

Run by hand (never by the test suite):

    .venv/bin/python bench/startup.py [--baseline REF] [--runs 15]

The baseline is `git archive REF` unpacked into a temporary folder (the repository is not
touched); each tree runs as `python -m batchcrop` with that tree first on PYTHONPATH, in the same
interpreter and environment. Commands: `--help`, `--version`, and `status BATCH` on a SQLite
database holding one batch (created once, read by both trees). Runs alternate between the trees
so that a busy machine slows both alike; the table gives the median and the fastest wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = "52b88ee"
"""main before the lazy imports (start-up of every command)."""
DEFAULT_RUNS = 15


def unpack(ref: str, into: Path) -> Path:
    """`git archive ref` unpacked under `into`."""
    archive = into / "baseline.tar"
    with archive.open("wb") as handle:
        subprocess.run(["git", "archive", ref], cwd=ROOT, stdout=handle, check=True)
    tree = into / "baseline"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def timed(tree: Path, args: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "batchcrop", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref to compare with")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        baseline = unpack(options.baseline, work)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        submitted = subprocess.run(
            [sys.executable, "-m", "batchcrop", "submit", str(ROOT / "samples")],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        batch = submitted.stdout.strip()
        commands = {"--help": ["--help"], "--version": ["--version"], "status": ["status", batch]}
        trees = {"baseline": baseline, "this tree": ROOT}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(options.runs):
            for command, args in commands.items():
                for name, tree in trees.items():
                    times.setdefault((command, name), []).append(timed(tree, args, work))
    print(f"batchcrop start-up, {options.runs} runs each, baseline {options.baseline}")
    print(f"{'command':<12}{'tree':<12}{'median s':>10}{'fastest s':>11}")
    for (command, name), samples in times.items():
        print(f"{command:<12}{name:<12}{statistics.median(samples):>10.3f}{min(samples):>11.3f}")


if __name__ == "__main__":
    main()

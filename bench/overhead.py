"""Benchmark: the CPU `batchcrop run` spends per item outside the crop engine, by thread.

With render processes the engine runs in child processes, so the `run` process's own CPU is
its overhead: claims, checks and commits through SQLAlchemy, source reads and hashes, the
job's header checks, the store's writes (one fsync per file), facts, logs and the status
reads of the follow loop. Runs `batchcrop run --workers N --no-progress` in this process on
`--images` 12 MP JPEGs (bench/throughput.py's set) and on one, `--rounds` times each (the
lowest kept, which lessens other load on a shared machine), and prints the process's CPU
(getrusage, children excluded), each kind of thread's (`time.thread_time` as it ends) and
the per-item difference: (CPU of N images - CPU of one) / (N - 1).

    .venv/bin/python bench/overhead.py [--images 32] [--workers 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import re
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from throughput import generate  # bench/throughput.py's 12 MP set

from batchcrop.cli.main import main as batchcrop_main

_cpu: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()
_run = threading.Thread.run


def _counted_run(self: threading.Thread) -> None:
    """`Thread.run`, then its CPU added under its kind (the name without its number)."""
    try:
        _run(self)
    finally:
        with _lock:
            _cpu[re.sub(r"[-_]?\d+$", "", self.name)] += time.thread_time()


def one_run(source: Path, workers: int) -> tuple[float, dict[str, float]]:
    """(process CPU seconds, CPU seconds by thread kind) of one `run` over `source`."""
    _cpu.clear()
    out = Path(tempfile.mkdtemp(prefix="overhead-"))
    argv = ["run", "--workers", str(workers), "--no-progress", "--database-url"]
    argv += [f"sqlite:///{out / 'batchcrop.db'}", "--out", str(out / "derivatives"), str(source)]
    before, main_before = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the run's own summary
            code = batchcrop_main(argv)
        if code != 0:
            raise SystemExit("batchcrop run failed")
    finally:
        shutil.rmtree(out)
    after = resource.getrusage(resource.RUSAGE_SELF)
    _cpu["main"] += time.thread_time() - main_before
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return total, dict(_cpu)


def main() -> None:
    """Generate the images, time both sizes `--rounds` times, print the per-item CPU."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    threading.Thread.run = _counted_run  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as name:
        many, one = Path(name) / "many", Path(name) / "one"
        many.mkdir()
        one.mkdir()
        generate(many, args.images)
        shutil.copy(sorted(many.iterdir())[0], one)
        one_run(one, args.workers)  # imports and caches warm, as in every later run
        best: dict[Path, tuple[float, dict[str, float]]] = {}
        for _ in range(args.rounds):
            for source in (one, many):
                measured = one_run(source, args.workers)
                if source not in best or measured[0] < best[source][0]:
                    best[source] = measured
    for source, label in ((one, "1 image"), (many, f"{args.images} images")):
        total, threads = best[source]
        kinds = ", ".join(f"{kind} {seconds:.3f}" for kind, seconds in sorted(threads.items()))
        print(f"{label:>10}: run's own CPU {total:.3f} s  ({kinds})")
    per_item = (best[many][0] - best[one][0]) / (args.images - 1)
    print(f"per item: {per_item * 1000:.1f} ms of run's own CPU (render children excluded)")


if __name__ == "__main__":
    main()

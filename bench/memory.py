"""Peak memory of `batchcrop run` and `batchcrop serve` on sources that decode big.

Run by hand (never by the test suite):

    .venv/bin/python bench/memory.py [--mib 1024,4096] [--workers 2]

Sources: four 79-megapixel RGBA PNGs (about 300 KB each on disk, just under the 80 MP pixel cap,
each about 1.5 GB to decode and convert before the budget existed) and four 12 MP JPEGs. For
each decode budget in `--mib` (the largest standing in for "no budget"), in one run:

- `batchcrop run` over the folder with `--workers` slots: the peak of its process tree's RSS
  (the process and its render children summed, sampled every `SAMPLE_SECONDS`), the largest
  single process's peak (ru_maxrss from wait4, which is not a sum) and wall time;
- `batchcrop serve`, then eight thumbnail requests at once for the PNG items: the server's
  tree's peak RSS (with its decode children, sampled) and how many were answered 200 or 503.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from PIL import Image

BIG_PNG = (8900, 8900)
JPEG_SIZE = (4000, 3000)
THUMBNAIL_REQUESTS = 8
START_TIMEOUT_SECONDS = 30.0
CLI = [sys.executable, "-m", "batchcrop"]
SAMPLE_SECONDS = 0.02
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _tree(pid: int) -> list[int]:
    """`pid` and every descendant of it alive now."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo.extend(int(child) for child in task.read_text().split())
            except OSError:
                continue
    return found


def _rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


class TreePeak(threading.Thread):
    """Samples the summed RSS of a process and its descendants until `stop`; `peak_mib`."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_bytes = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(SAMPLE_SECONDS):
            total = sum(_rss_bytes(pid) for pid in _tree(self.pid))
            self.peak_bytes = max(self.peak_bytes, total)

    def stop(self) -> float:
        """Stop sampling; the peak in MiB."""
        self._stop_event.set()
        self.join()
        return self.peak_bytes / 2**20


def make_sources(folder: Path) -> None:
    """Four big RGBA PNGs (a gradient, compressing well) and four 12 MP JPEGs."""
    folder.mkdir(parents=True)
    gradient = Image.linear_gradient("L").resize(BIG_PNG)
    for n in range(4):
        rgba = Image.merge("RGBA", (gradient, gradient.rotate(90 * n), gradient, gradient))
        rgba.save(folder / f"big{n}.png", compress_level=1)
        Image.new("RGB", JPEG_SIZE, (40 * n, 90, 160)).save(folder / f"photo{n}.jpg")


def peak_of_run(folder: Path, tmp: Path, mib: int, workers: int) -> tuple[float, float, float, str]:
    """(tree peak RSS MiB, largest process's peak MiB, seconds, the run's final line) of
    `batchcrop run` over `folder`."""
    database = f"sqlite:///{tmp / f'run-{mib}.db'}"
    args = [*CLI, "run", str(folder), "--out", str(tmp / f"out-{mib}"), "--no-progress"]
    args += ["--workers", str(workers), "--database-url", database, "--decode-memory-mib", str(mib)]
    started = time.perf_counter()
    log = tmp / f"run-{mib}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, text=True)
        sampler = TreePeak(proc.pid)
        sampler.start()
        _, _, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    tree = sampler.stop()
    output = log.read_text()
    last = output.strip().splitlines()[-1] if output.strip() else ""
    return tree, usage.ru_maxrss / 1024, seconds, last


def high_water_mib(pid: int) -> float:
    """A live process's peak RSS (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def peak_of_serve(folder: Path, tmp: Path, mib: int, port: int) -> tuple[float, dict[int, int]]:
    """(peak RSS MiB, status code counts) of `serve` answering concurrent PNG thumbnails."""
    env = {**os.environ, "BATCHCROP_DATABASE_URL": f"sqlite:///{tmp / f'serve-{mib}.db'}"}
    env["BATCHCROP_SOURCE_ROOTS"] = str(folder)
    env["BATCHCROP_DECODE_MEMORY_MIB"] = str(mib)
    pngs = sorted(str(p) for p in folder.glob("big*.png"))
    subprocess.run([*CLI, "db", "upgrade"], env=env, check=True, capture_output=True)
    submitted = subprocess.run(
        [*CLI, "submit", *pngs], env=env, check=True, capture_output=True, text=True
    )
    batch_id = submitted.stdout.strip().splitlines()[-1]
    server = subprocess.Popen(
        [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        items = httpx.get(f"{base}/v1/batches/{batch_id}/items").json()["items"]
        urls = [
            f"{base}/v1/batches/{batch_id}/items/{items[n % len(items)]['id']}/source-thumbnail"
            for n in range(THUMBNAIL_REQUESTS)
        ]
        sampler = TreePeak(server.pid)
        sampler.start()
        with concurrent.futures.ThreadPoolExecutor(THUMBNAIL_REQUESTS) as pool:
            codes = list(pool.map(lambda u: httpx.get(u, timeout=120).status_code, urls))
        tree = sampler.stop()
        counts: dict[int, int] = {}
        for code in codes:
            counts[code] = counts.get(code, 0) + 1
        return max(tree, high_water_mib(server.pid)), counts
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    """Measure every budget and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", default="1024,4096")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=18765)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        folder = tmp / "sources"
        make_sources(folder)
        print(f"4 x {BIG_PNG[0]}x{BIG_PNG[1]} RGBA PNG + 4 x 12 MP JPEG, {os.cpu_count()} cores")
        print(
            "budget MiB  run: tree peak MiB  largest process MiB  seconds"
            "  | serve: tree peak MiB  answers"
        )
        for mib in (int(m) for m in args.mib.split(",")):
            tree, largest, seconds, last = peak_of_run(folder, tmp, mib, args.workers)
            serve_peak, counts = peak_of_serve(folder, tmp, mib, args.port)
            print(
                f"{mib:10d}  {tree:19.0f}  {largest:19.0f}  {seconds:7.1f}"
                f"  | {serve_peak:19.0f}  {counts}   ({last})",
                flush=True,
            )


if __name__ == "__main__":
    main()

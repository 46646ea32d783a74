"""The worker's part of a scale-from-zero: process start → first claim of an item already queued.

Run by hand (never by the test suite):

    .venv/bin/python bench/scale_from_zero.py [--runs 5] [--concurrency 2]

Against this checkout's test PostgreSQL (tests/services, started when needed; a database of its
own, dropped at the end). Each run queues one batch of one photo, then starts `batchcrop worker`
as its pod would (`python -m batchcrop worker --concurrency N`, render processes one per slot,
the CLI's default; `--render-processes 0` for threads) and reads its DEBUG log lines: the time
from `Popen` to its `worker_started` line (imports, schema check, store check, render children
warm) and to its `claim` line (the first claim of the queued item). `db check` (the pod's
init container) is timed on its own: `Popen` to exit. The table gives the median and the
slowest of the runs, and the machine's load, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

# The repository first: bench/leases.py would stand for the `leases` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa
from PIL import Image

from tests.services import postgres

START_TIMEOUT_SECONDS = 300.0


def _stamp(line: dict[str, str]) -> float:
    return datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp()


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "batchcrop", *args]


def one_run(env: dict[str, str], source: Path, args: argparse.Namespace) -> dict[str, float]:
    """Queue one item, then time a worker's start to its first claim (seconds)."""
    submitted = subprocess.run(
        _command("submit", str(source), "--ratios", "1:1", "--max-side", "128", "--json"),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    batch_id = json.loads(submitted.stdout)["id"]
    started = time.time()
    subprocess.run(_command("db", "check"), env=env, capture_output=True, check=True)
    check = time.time() - started
    flags = ["--concurrency", str(args.concurrency), "--log-format", "json", "--log-level", "DEBUG"]
    if args.render_processes is not None:
        flags += ["--render-processes", str(args.render_processes)]
    started = time.time()
    worker = subprocess.Popen(
        _command("worker", *flags), env=env, stderr=subprocess.PIPE, text=True
    )
    seen: dict[str, float] = {}
    try:
        assert worker.stderr is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        for raw in worker.stderr:
            assert time.monotonic() < deadline, "the worker did not claim in time"
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if line["msg"] == "worker_started":
                seen["started"] = _stamp(line) - started
            if line["msg"] == "claim" and line.get("batch") == batch_id:
                seen["claim"] = _stamp(line) - started
                break
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=120)
    return {"db check": check, "worker_started": seen["started"], "first claim": seen["claim"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument(
        "--render-processes", type=int, default=None, help="default: the CLI's (one per slot)"
    )
    args = parser.parse_args()
    admin_url = postgres.ensure()
    name = f"bc_bench_start_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = admin_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            source = root / "photo.jpg"
            Image.new("RGB", (1200, 900), (40, 120, 200)).save(source, quality=85)
            env = {
                **os.environ,
                "BATCHCROP_DATABASE_URL": url,
                "BATCHCROP_STORE": f"file://{root / 'store'}",
            }
            subprocess.run(_command("db", "upgrade"), env=env, capture_output=True, check=True)
            runs = []
            for _ in range(args.runs):
                runs.append(one_run(env, source, args))
                print(json.dumps({k: round(v, 3) for k, v in runs[-1].items()}), flush=True)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    load = " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    processes = "one per slot" if args.render_processes is None else str(args.render_processes)
    print(f"\nconcurrency {args.concurrency}, render processes {processes}, {args.runs} runs")
    print("| part | median s | slowest s |")
    print("| --- | ---: | ---: |")
    for part in ("db check", "worker_started", "first claim"):
        values = [r[part] for r in runs]
        print(f"| {part} | {statistics.median(values):.2f} | {max(values):.2f} |")
    print(f"load 1/5/15: {load}")


if __name__ == "__main__":
    main()

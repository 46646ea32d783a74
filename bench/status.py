"""Status polling at 1,000,000 items: GET /v1/batches/{id} (200) and its 304, under commit load.

Run by hand (never by the test suite), on the local PostgreSQL of the test tooling:

    .venv/bin/python bench/status.py [--items 1000000] [--workers 4] [--requests 2000] [--reuse]
        [--baseline /path/to/an/earlier/checkout]

Setup: a fresh database, one batch of `--items` items (the polled batch) and a second batch that
absorbs commits (`--reuse` keeps the previous run's database and batches, skipping setup).
The API runs as the real `batchcrop serve` in its own process; the committing load is one
process with `--workers` threads, each looping claim -> complete through the lease engine
directly (no-op work, every commit a real fenced transition with its event and counters).

Phases:
0. idle: 200s, then 304s, with no load (what the code costs on this machine).
1. 200: the load commits into the polled batch, so every poll sees a new document.
2. 304: the load commits into the other batch; the client polls the (unchanging) 1M batch with
   its ETag, so every answer is a 304 — the state of a poll while nothing happened to *its* batch.
The client is one keep-alive httpx connection, sequential requests; req/s = requests / wall time.
The server's CPU time per request (from /proc) does not depend on how busy the machine is;
latencies do.
With `--baseline`, a second `batchcrop serve` runs the code of that checkout (an earlier version,
say before 304s were answered from the batch's version) on the same database, and every phase is
measured against both servers in the same run, one after the other under the same load: the
before/after of a change.
Peer, in the same run and under the same load: the status a server without counters computes,
a `GROUP BY state` over the batch's item rows (`LeaseManager.recount`), timed in-process (no
HTTP, which favours the peer).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchcrop.app import build
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.settings import Settings
from tests.services import postgres

DEFAULT_ITEMS = 1_000_000
DEFAULT_WORKERS = 4
DEFAULT_REQUESTS = 2000
WARMUP_REQUESTS = 100
PEER_SAMPLES = 30
SINK_ITEMS = 50_000
STARTUP_TIMEOUT_SECONDS = 60.0
DATABASE_NAME = "bench_status"


def fresh_database(admin_url: str, name: str) -> str:
    """Drop and create database `name`; return its SQLAlchemy URL."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def submit(app: Any, items: int, label: str) -> str:
    """One batch of `items` fake sources (never read: the load completes items unread)."""
    request = BatchRequest(
        items=tuple(
            ItemRequest(source=f"/bench/{label}/{n}.jpg", ref=str(n)) for n in range(items)
        ),
        spec=RenderSpec(ratios=(Ratio(1, 1), Ratio(16, 9))),
        deadline_seconds=24 * 3600.0,
        max_attempts=3,
    )
    started = time.perf_counter()
    document, _ = app.batches.submit(request)
    print(f"submitted {label}: {items:,} items in {time.perf_counter() - started:.1f} s")
    return str(document["id"])


def committer(url: str, batch_id: str, workers: int, stop: Any, counter: Any) -> None:
    """Load process: `workers` threads claiming one item and completing it, until `stop`."""
    app = build(Settings(database_url=url))

    def loop(n: int) -> None:
        done = 0
        while not stop.is_set():
            for claim in app.leases.claim(f"bench-{os.getpid()}-{n}", 1, group_ids=[batch_id]):
                app.leases.complete(claim)
                done += 1
        with counter.get_lock():
            counter.value += done

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    app.close()


class Load:
    """The committing load as a context manager; reports commits/s on exit."""

    def __init__(self, url: str, batch_id: str, workers: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop = context.Event()
        self.counter = context.Value("q", 0)
        self.process = context.Process(
            target=committer, args=(url, batch_id, workers, self.stop, self.counter)
        )
        self.commits_per_second = 0.0

    def __enter__(self) -> Load:
        self.process.start()
        self.started = time.perf_counter()
        time.sleep(2.0)  # let the threads connect and reach a steady rate
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.process.join()
        self.commits_per_second = self.counter.value / (time.perf_counter() - self.started)


def start_server(url: str, code: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """`batchcrop serve` on a free loopback port, once healthy; `code`: run that checkout's
    code instead of this one's."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "BATCHCROP_DATABASE_URL": url, "BATCHCROP_LOG_LEVEL": "WARNING"}
    env["PYTHONPATH"] = code or str(Path(__file__).resolve().parents[1])
    env.pop("BATCHCROP_API_TOKEN", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "batchcrop", "--log-level", "WARNING", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/healthz", timeout=1.0).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("batchcrop serve did not start")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(
    call: Callable[[], int], count: int, expect: int, *, server_pid: int | None = None
) -> dict[str, float]:
    """Latency percentiles (ms) and rate of `count` sequential calls returning `expect`; with
    `server_pid`, also the server's CPU milliseconds per call (independent of machine load)."""
    latencies = []
    cpu_before = cpu_seconds(server_pid) if server_pid else 0.0
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        status = call()
        latencies.append((time.perf_counter() - t0) * 1000)
        if status != expect:
            raise RuntimeError(f"expected {expect}, got {status}")
    figures = _figures(latencies)
    figures["rate"] = count / (time.perf_counter() - started)
    if server_pid:
        figures["cpu"] = (cpu_seconds(server_pid) - cpu_before) * 1000 / count
    return figures


def _figures(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[int(0.95 * (len(ordered) - 1))],
        "p99": ordered[int(0.99 * (len(ordered) - 1))],
        "rate": 1000 / statistics.mean(ordered),
    }


def row(name: str, figures: dict[str, float], extra: str = "") -> str:
    """One markdown table row."""
    cpu = f"{figures['cpu']:.2f} ms" if "cpu" in figures else "–"
    return (
        f"| {name} | {figures['p50']:.2f} ms | {figures['p95']:.2f} ms | {figures['p99']:.2f} ms "
        f"| {figures['rate']:.0f} | {cpu} | {extra} |"
    )


class Server:
    """One running server and a keep-alive client polling one batch."""

    def __init__(self, name: str, url: str, path: str, code: str | None = None) -> None:
        self.name = name
        self.process, base = start_server(url, code)
        self.client = httpx.Client(base_url=base, timeout=30.0)
        self.path = path
        self.etag = ""

    def get(self) -> int:
        return self.client.get(self.path).status_code

    def conditional(self) -> int:
        return self.client.get(self.path, headers={"If-None-Match": self.etag}).status_code

    def measure(self, requests: int, expect: int) -> dict[str, float]:
        """Warm up, then time `requests` polls answered `expect` (a 304: with the current tag)."""
        self.etag = self.client.get(self.path).headers["etag"]
        call = self.get if expect == 200 else self.conditional
        timed(call, WARMUP_REQUESTS, expect)
        return timed(call, requests, expect, server_pid=self.process.pid)

    def close(self) -> None:
        self.client.close()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)


def main() -> None:
    """Set up, run both phases and the peer, print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=DEFAULT_ITEMS)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument(
        "--reuse", action="store_true", help="reuse the batches of the previous run's database"
    )
    parser.add_argument(
        "--baseline", help="a checkout of an earlier version to serve beside this one (before)"
    )
    args = parser.parse_args()

    admin_url = postgres.ensure()
    if args.reuse:
        url = sa.make_url(admin_url).set(database=DATABASE_NAME).render_as_string(False)
        app = build(Settings(database_url=url))
        app.upgrade()
        page, _ = app.batches.list_batches()
        by_size = sorted(page, key=lambda d: d["total"])
        sink, polled = by_size[0]["id"], by_size[-1]["id"]
        args.items = by_size[-1]["total"]
    else:
        url = fresh_database(admin_url, DATABASE_NAME)
        app = build(Settings(database_url=url))
        app.upgrade()
        polled = submit(app, args.items, "polled")
        sink = submit(app, SINK_ITEMS, "sink")
    with app.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE"))
    path = f"/v1/batches/{polled}"
    servers = [Server("ours", url, path)]
    if args.baseline:
        servers.append(Server("before", url, path, args.baseline))
    results: list[str] = []
    load_averages = [os.getloadavg()[0]]
    try:
        for server in servers:
            for expect in (200, 304):
                figures = server.measure(args.requests, expect)
                results.append(row(f"GET → {expect} ({server.name})", figures, "idle: no commits"))

        with Load(url, polled, args.workers) as load:
            measured = [(s.name, s.measure(args.requests, 200)) for s in servers]
            peer = timed(lambda: len(app.leases.recount(polled)) and 200, PEER_SAMPLES, 200)
            load_averages.append(os.getloadavg()[0])
        into_polled = f"{load.commits_per_second:.0f} commits/s into the polled batch"
        for name, figures in measured:
            results.append(row(f"**GET → 200 ({name})**", figures, into_polled))
        results.append(row("status read, GROUP BY (peer, no HTTP)", peer, into_polled))

        with Load(url, sink, args.workers) as load:
            measured = [(s.name, s.measure(args.requests, 304)) for s in servers]
            load_averages.append(os.getloadavg()[0])
        into_other = f"{load.commits_per_second:.0f} commits/s into another batch"
        for name, figures in measured:
            results.append(row(f"**GET → 304 ({name})**", figures, into_other))
    finally:
        for server in servers:
            server.close()
        app.close()
    print(f"\nitems: {args.items:,}  workers: {args.workers}  requests per phase: {args.requests}")
    print(
        "load average (1 min) at start, 200 phase, 304 phase: "
        + ", ".join(f"{value:.1f}" for value in load_averages)
        + "\n"
    )
    print("| what | p50 | p95 | p99 | req/s | server CPU/req | load |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for line in results:
        print(line)


if __name__ == "__main__":
    main()

"""Large submissions beside a working fleet: how long any one transaction holds the write lock.

Run by hand (never by the test suite):

    .venv/bin/python bench/submission.py [--items 100000] [--submitters 1,4]
        [--dialects sqlite,postgresql]

For each database and number of concurrent submitters, in one run, twice: with creation in one
transaction (what every submission did before groups were sealed; emulated by a chunk larger
than the submission) and in chunks (`leases.manager.CREATE_BATCH_ROWS` items per transaction).
Each submitter is its own process creating a group of `--items` items. A probe process stands
for a worker: it heartbeats one held lease every 20 ms and records how long each of those small
write transactions took. Printed: the submissions' wall time, their longest transaction (from
holding the lock to commit), and the probe's p50 / p99 / max write latency.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.leases import fresh_database
from leases import LeaseManager, NewItem, make_engine, upgrade
from leases import manager as lease_manager
from tests.services import postgres

DEFAULT_ITEMS = 100_000
PROBE_INTERVAL_SECONDS = 0.02
START_TIMEOUT_SECONDS = 60.0
ONE_TRANSACTION = 10**9


def _time_transactions(engine: sa.Engine, held: list[float]) -> None:
    """Append to `held` how long each transaction on `engine` held its lock, in seconds.

    The clock starts when the transaction began (on SQLite: when BEGIN IMMEDIATE returned,
    i.e. once the write lock was granted) and stops at commit or rollback.
    """
    started = [0.0]

    def begin(_conn: Any) -> None:
        started[0] = time.perf_counter()

    def after_execute(*args: Any) -> None:
        if str(args[2]).startswith("BEGIN"):
            started[0] = time.perf_counter()

    def end(_conn: Any) -> None:
        held.append(time.perf_counter() - started[0])

    sa.event.listen(engine, "begin", begin)
    sa.event.listen(engine, "after_cursor_execute", after_execute)
    sa.event.listen(engine, "commit", end)
    sa.event.listen(engine, "rollback", end)


def submitter(ready: Any, url: str, items: int, chunk: int, out: Any) -> None:
    """Create one group of `items` items; report (seconds, longest transaction seconds)."""
    lease_manager.CREATE_BATCH_ROWS = chunk
    engine = make_engine(url)
    manager = LeaseManager(engine)
    held: list[float] = []
    _time_transactions(engine, held)
    payloads = (
        NewItem(str(uuid.uuid4()), {"source": f"/srv/catalogue/{i:07d}.jpg", "ref": f"sku-{i}"})
        for i in range(items)
    )
    ready.wait(START_TIMEOUT_SECONDS)
    started = time.perf_counter()
    manager.create_group(str(uuid.uuid4()), deadline_seconds=3600, max_attempts=3, items=payloads)
    out.put((time.perf_counter() - started, max(held)))
    engine.dispose()


def probe(ready: Any, url: str, stop: Any, out: Any) -> None:
    """Heartbeat one held lease every `PROBE_INTERVAL_SECONDS`; report every latency."""
    engine = make_engine(url)
    manager = LeaseManager(engine)
    group_id = str(uuid.uuid4())
    manager.create_group(
        group_id, deadline_seconds=3600, max_attempts=3, items=[NewItem(group_id, {})]
    )
    (claim,) = manager.claim("probe", 1, group_ids=[group_id])
    latencies: list[float] = []
    ready.wait(START_TIMEOUT_SECONDS)
    while not stop.is_set():
        started = time.perf_counter()
        manager.heartbeat(claim)
        latencies.append(time.perf_counter() - started)
        time.sleep(PROBE_INTERVAL_SECONDS)
    out.put(latencies)
    engine.dispose()


def run(url: str, items: int, submitters: int, chunk: int) -> dict[str, float]:
    """One measurement: `submitters` concurrent creations of `items` each, and the probe."""
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(submitters + 2)
    stop = context.Event()
    results, probe_out = context.Queue(), context.Queue()
    procs = [
        context.Process(target=submitter, args=(ready, url, items, chunk, results))
        for _ in range(submitters)
    ]
    probe_proc = context.Process(target=probe, args=(ready, url, stop, probe_out))
    for p in [*procs, probe_proc]:
        p.start()
    ready.wait(START_TIMEOUT_SECONDS)
    started = time.perf_counter()
    done = [results.get() for _ in procs]
    wall = time.perf_counter() - started
    stop.set()
    latencies = sorted(probe_out.get())
    for p in [*procs, probe_proc]:
        p.join()
    return {
        "wall": wall,
        "longest_txn": max(held for _, held in done),
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max": latencies[-1],
    }


def main() -> None:
    """Measure every (database, submitters, mode) and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=DEFAULT_ITEMS)
    parser.add_argument("--submitters", default="1,4")
    parser.add_argument("--dialects", default="sqlite,postgresql")
    args = parser.parse_args()
    print(
        f"{args.items} items per submission, probe heartbeat every "
        f"{PROBE_INTERVAL_SECONDS * 1000:.0f} ms, {os.cpu_count()} cores"
    )
    print(
        "database    submitters  creation                  wall s  longest txn s"
        "  probe p50 / p99 / max ms"
    )
    for dialect in args.dialects.split(","):
        for n in (int(s) for s in args.submitters.split(",")):
            for label, chunk in (
                ("one transaction", ONE_TRANSACTION),
                (f"chunks of {lease_manager.CREATE_BATCH_ROWS}", lease_manager.CREATE_BATCH_ROWS),
            ):
                with tempfile.TemporaryDirectory() as tmp:
                    if dialect == "sqlite":
                        url = f"sqlite:///{tmp}/bench.db"
                    else:
                        admin = os.environ.get("BATCHCROP_TEST_POSTGRES_URL") or postgres.ensure()
                        url = fresh_database(admin, "bench_submission")
                    r = run(url, args.items, n, chunk)
                print(
                    f"{dialect:11s} {n:10d}  {label:24s} {r['wall']:7.1f}  {r['longest_txn']:13.2f}"
                    f"  {r['p50'] * 1000:6.1f} / {r['p99'] * 1000:6.1f} / {r['max'] * 1000:7.1f}"
                )


if __name__ == "__main__":
    main()

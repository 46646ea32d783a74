"""Large submissions beside a working fleet: how long any one transaction holds the write lock.

Run by hand (never by the test suite):

    .venv/bin/python bench/submission.py [--items 100000] [--submitters 1,4]
        [--dialects sqlite,postgresql]

For each database and number of concurrent submitters, in one run, twice: with creation in one
transaction (what every submission did before groups were sealed; emulated by a chunk larger
than the submission) and in chunks (`leases.creation`: sized by their pace).
Each submitter is its own process creating a group of `--items` items. A probe process stands
for a worker: it heartbeats one held lease every 20 ms and records how long each of those small
write transactions took. Printed: the submissions' wall time, their longest transaction (from
holding the lock to commit), and the probe's p50 / p99 / max write latency.

End to end (`--end-to-end`), the way users submit, beside workers that keep claiming:

    .venv/bin/python bench/submission.py --end-to-end [--baseline /path/to/earlier/checkout]
        [--sqlite-items 100000] [--postgresql-items 1000000] [--dialects sqlite,postgresql]
        [--paths cli,api] [--repeat 3] [--floor]

For each database: `batchcrop submit --items-csv` (the CLI, its own process) and
`POST /v1/batches` to a `batchcrop serve` process (at most `ITEMS_PER_BATCH_MAX` items, the
API's limit), each on a fresh database migrated by `batchcrop db upgrade`, while a fleet process
(`FLEET_THREADS` threads) loops claim -> complete on another batch and records every write's
latency (a claim or a complete; each thread works `FLEET_WORK_SECONDS` between them). With
`--baseline`, the same runs with that checkout's code (CLI, server and fleet) in
the same run, alternating with ours `--repeat` times: the before/after of a change. Printed per
run: the submission's seconds (and the CLI process's CPU seconds), the fleet's writes meanwhile
and their p50 / p99 / max latency. Sources are local paths that need not exist.

`--floor` adds, per database, what no submission can beat on this machine: the same rows (as
the CLI writes them) loaded into the same tables, freshly migrated by our code, in ONE
statement and transaction from a buffer built beforehand (PostgreSQL: one COPY; SQLite: one
`json_each` insert) — no Python per item, no chunks, no fleet — and the same without the
application's two search indexes on the items (what those cost).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchcrop.batches.items import time_ordered_uuids
from bench.leases import fresh_database
from leases import LeaseManager, NewItem, creation, group_queries, make_engine, pgqueries, upgrade
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


def submitter(ready: Any, url: str, items: int, chunk: int | None, out: Any) -> None:
    """Create one group of `items` items; report (seconds, longest transaction seconds).
    `chunk`: items per transaction, fixed (None: as `leases.creation` paces them)."""
    if chunk is not None:
        creation.CHUNK_ROWS_FIRST = creation.CHUNK_ROWS_MIN = creation.CHUNK_ROWS_MAX = chunk
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


def run(url: str, items: int, submitters: int, chunk: int | None) -> dict[str, float]:
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


FLEET_THREADS = 4
FLEET_ITEMS = 20_000
FLEET_WORK_SECONDS = 0.05
"""Each fleet thread holds an item this long between claim and complete (a crop takes ~0.15 s)."""
API_ITEMS_MAX = 100_000
SERVER_START_SECONDS = 60.0
THIS_CHECKOUT = str(Path(__file__).resolve().parents[1])
SOURCE_ROOT = "/srv/catalogue"

# The fleet, run as `python -c` with the code under test on PYTHONPATH (an earlier checkout
# cannot run this file's imports against its own schema): claims and completes one item at a
# time on its own batch until the stop file appears, then prints each write's start (epoch
# seconds) and latency.
FLEET_SCRIPT = """
import json, os, sys, threading, time, uuid
from leases import LeaseManager, NewItem, make_engine
url, items, threads, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
work = float(sys.argv[5])
manager = LeaseManager(make_engine(url))
group = str(uuid.uuid4())
manager.create_group(group, deadline_seconds=3600, max_attempts=3,
                     items=(NewItem(str(uuid.uuid4()), {}) for _ in range(items)))
latencies = []
print("ready", flush=True)
def loop(n):
    while not os.path.exists(stop):
        at, started = time.time(), time.perf_counter()
        claims = manager.claim(f"fleet-{n}", 1, group_ids=[group])
        latencies.append((at, time.perf_counter() - started))
        time.sleep(work)
        for claim in claims:
            at, started = time.time(), time.perf_counter()
            manager.complete(claim)
            latencies.append((at, time.perf_counter() - started))
workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(json.dumps(latencies))
"""


def _env(code: str, url: str) -> dict[str, str]:
    """The environment of a process of `code`. Such processes also run in `code` (cwd): `python
    -m` and `-c` put the working folder first on `sys.path`, ahead of PYTHONPATH, so a process
    started from this checkout would run this checkout's code whatever PYTHONPATH says."""
    env = {**os.environ, "PYTHONPATH": code, "BATCHCROP_DATABASE_URL": url}
    env["BATCHCROP_SOURCE_ROOTS"] = SOURCE_ROOT
    env.pop("BATCHCROP_API_TOKEN", None)
    return env


def _batchcrop(code: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "batchcrop", "--log-level", "WARNING", *args]
    done = subprocess.run(
        command, check=False, env=_env(code, url), cwd=code, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"batchcrop {args[0]} failed: {done.stderr[-2000:]}")
    return done


class Fleet:
    """Workers claiming and completing on their own batch while a submission runs."""

    def __init__(self, code: str, url: str, folder: str) -> None:
        self.stop = os.path.join(folder, f"stop-{uuid.uuid4().hex}")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                FLEET_SCRIPT,
                url,
                str(FLEET_ITEMS),
                str(FLEET_THREADS),
                self.stop,
                str(FLEET_WORK_SECONDS),
            ],
            env=_env(code, url),
            cwd=code,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the fleet did not start")
        time.sleep(1.0)  # let both threads reach their steady loop

    def finish(self, started: float, ended: float) -> list[float]:
        """Stop; the sorted latencies of the writes begun between `started` and `ended` (epoch
        seconds)."""
        Path(self.stop).touch()
        out, _ = self.process.communicate(timeout=120)
        writes = json.loads(out.strip().splitlines()[-1])
        return sorted(seconds for at, seconds in writes if started <= at <= ended)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _source(i: int) -> str:
    return f"{SOURCE_ROOT}/{i % 100:02d}/{i:07d}.jpg"


def submit_by_cli(code: str, url: str, folder: str, items: int) -> tuple[float, float | None]:
    """`batchcrop submit --items-csv` of `items` rows: (seconds from start to exit, the
    process's CPU seconds)."""
    path = os.path.join(folder, f"items-{items}.csv")
    if not os.path.exists(path):
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["source", "ref"])
            writer.writerows([_source(i), f"sku-{i}"] for i in range(items))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    _batchcrop(code, url, "submit", "--items-csv", path, "--database-url", url)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu


def submit_by_api(code: str, url: str, items: int) -> tuple[float, float | None]:
    """`POST /v1/batches` of `items` items to a `batchcrop serve` of `code`: (seconds of the
    POST, None)."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "batchcrop", "--log-level", "WARNING", "serve", "--port", str(port)],
        env=_env(code, url),
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    body = json.dumps({"items": [{"source": _source(i), "ref": f"sku-{i}"} for i in range(items)]})
    try:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("batchcrop serve did not start")
            time.sleep(0.2)
        started = time.perf_counter()
        response = httpx.post(
            base + "/v1/batches",
            content=body.encode(),
            headers={"Content-Type": "application/json"},
            timeout=600.0,
        )
        elapsed = time.perf_counter() - started
        if response.status_code != 201:
            raise RuntimeError(f"POST /v1/batches: {response.status_code} {response.text[:500]}")
        return elapsed, None
    finally:
        server.terminate()
        server.wait(30)


def _fresh_url(dialect: str, folder: str) -> str:
    if dialect == "sqlite":
        return f"sqlite:///{folder}/{uuid.uuid4().hex}.db"
    admin = os.environ.get("BATCHCROP_TEST_POSTGRES_URL") or postgres.ensure()
    return fresh_database(admin, "bench_submission")


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))]


def end_to_end(args: argparse.Namespace) -> None:
    """CLI and API submissions beside a claiming fleet, ours and the baseline's alternating,
    one table; then the floor."""
    codes = [("ours", THIS_CHECKOUT)]
    if args.baseline:
        codes.append(("before", args.baseline))
    sizes = {"sqlite": args.sqlite_items, "postgresql": args.postgresql_items}
    print(f"load average at start: {os.getloadavg()[0]:.1f}\n")
    print(
        "| database | path | items | code | submission s | CLI CPU s | fleet writes during "
        "| fleet write p50 / p99 / max ms | load |"
    )
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | --- | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        for dialect in args.dialects.split(","):
            for path in args.paths.split(","):
                items = sizes[dialect] if path == "cli" else min(sizes[dialect], API_ITEMS_MAX)
                for _ in range(args.repeat):
                    for name, code in codes:
                        _one_end_to_end(dialect, path, items, name=name, code=code, folder=folder)
        if args.floor:
            print("\n| database | items | floor | seconds | load |")
            print("| --- | ---: | --- | ---: | ---: |")
            for dialect in args.dialects.split(","):
                for _ in range(args.repeat):
                    for indexes in (True, False):
                        url = _fresh_url(dialect, folder)
                        _batchcrop(THIS_CHECKOUT, url, "db", "upgrade", "--database-url", url)
                        seconds = floor(url, sizes[dialect], search_indexes=indexes)
                        label = "one load" + ("" if indexes else ", no search indexes")
                        print(
                            f"| {dialect} | {sizes[dialect]:,} | {label} | {seconds:.1f} "
                            f"| {os.getloadavg()[0]:.1f} |",
                            flush=True,
                        )


def _one_end_to_end(
    dialect: str, path: str, items: int, *, name: str, code: str, folder: str
) -> None:
    """One submission beside a fresh fleet, on a fresh database: one row of the table."""
    url = _fresh_url(dialect, folder)
    _batchcrop(code, url, "db", "upgrade", "--database-url", url)
    fleet = Fleet(code, url, folder)
    started = time.time()
    try:
        if path == "cli":
            seconds, cpu = submit_by_cli(code, url, folder, items)
        else:
            seconds, cpu = submit_by_api(code, url, items)
    finally:
        latencies = fleet.finish(started, time.time())
    spent = "—" if cpu is None else f"{cpu:.1f}"
    ms = [_quantile(latencies, q) * 1000 for q in (0.5, 0.99)] + [latencies[-1] * 1000]
    print(
        f"| {dialect} | {path} | {items:,} | {name} | {seconds:.1f} | {spent} "
        f"| {len(latencies)} | {ms[0]:.1f} / {ms[1]:.0f} / {ms[2]:.0f} "
        f"| {os.getloadavg()[0]:.1f} |",
        flush=True,
    )


def floor(url: str, items: int, *, search_indexes: bool) -> float:
    """Seconds to load `items` rows, as the CLI's submission writes them, into the items of one
    new group in ONE statement and transaction, from a buffer built beforehand; without the
    application's search indexes on the items when `search_indexes` is False."""
    engine = make_engine(url)
    group_id = str(uuid.uuid4())
    manager = LeaseManager(engine)
    manager.create_group(group_id, deadline_seconds=3600, max_attempts=3, items=[])
    ids = itertools.islice(time_ordered_uuids(), items)
    payloads = (json.dumps({"source": _source(i), "ref": f"sku-{i}"}) for i in range(items))
    rows = [NewItem(i, p) for i, p in zip(ids, payloads, strict=True)]
    with engine.begin() as conn:
        created_at = conn.execute(
            sa.text("SELECT created_at FROM lease_groups WHERE id = :g"), {"g": group_id}
        ).scalar_one()
        if not search_indexes:
            conn.execute(sa.text("DROP INDEX batchcrop_items_ref"))
            conn.execute(sa.text("DROP INDEX batchcrop_items_source"))
    if engine.dialect.name == "postgresql":
        text = "".join(creation.copy_blocks(group_id, rows, 0, created_at))
        statement, params = None, None
    else:
        statement = group_queries.insert_items_from_json()
        params = {
            "p_rows": creation.prepared_rows("sqlite", rows),
            "p_group_id": group_id,
            "p_first_seq": 0,
            "p_now": created_at,
        }
    started = time.perf_counter()
    with engine.begin() as conn:
        if statement is None:
            raw: Any = conn.connection.dbapi_connection
            with raw.cursor() as cursor, cursor.copy(pgqueries.copy_new_items()) as copy:
                copy.write(text)
        else:
            conn.execute(statement, params)
    seconds = time.perf_counter() - started
    engine.dispose()
    return seconds


def main() -> None:
    """Measure every (database, submitters, mode) and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=DEFAULT_ITEMS)
    parser.add_argument("--submitters", default="1,4")
    parser.add_argument("--dialects", default="sqlite,postgresql")
    parser.add_argument("--end-to-end", action="store_true", help="CLI and API, beside a fleet")
    parser.add_argument("--baseline", help="an earlier checkout, measured in the same run")
    parser.add_argument("--sqlite-items", type=int, default=100_000)
    parser.add_argument("--postgresql-items", type=int, default=1_000_000)
    parser.add_argument("--paths", default="cli,api", help="end to end: cli, api or both")
    parser.add_argument("--repeat", type=int, default=1, help="end to end: runs of each")
    parser.add_argument("--floor", action="store_true", help="end to end: also the floor")
    args = parser.parse_args()
    if args.end_to_end:
        end_to_end(args)
        return
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
                ("paced chunks", None),
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

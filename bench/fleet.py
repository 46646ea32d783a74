"""A fleet against one PostgreSQL: how far the coordinator carries many workers of many slots.

Run by hand (never by the test suite):

    .venv/bin/python bench/fleet.py [--slots 4,16,64,200] [--slots-per-worker 8]
        [--render-ms 200] [--seconds 20] [--claim-size 1] [--lease-seconds 900]

Each step of the fleet is `slots / slots-per-worker` worker processes (spawned, each its own
engine and pool) of `slots-per-worker` threads, on a fresh group of enough items. A slot does
what a real worker's slot does to the lease engine (batchcrop/worker/worker.py): `claim` (one
item, of the batches it serves), a synthetic render that *sleeps* `--render-ms` in three parts
with a `check` of the lease between them (the checkpoints: after reading the source, before the
writes, before the commit), then `complete`. One heartbeat thread per process renews every held
lease with one `heartbeat_many` each lease/`HEARTBEATS_PER_LEASE`, as `Heartbeats` does. Nothing
uses CPU but the coordinator's statements, so the figures are the coordinator's.

Measured over the last `--seconds` of each step (after `--warmup-seconds`): items/s claimed and
completed (and the ideal, slots / render time), heartbeat statements/s, claim latency p50/p99
(as a slot sees it, pool wait included), PostgreSQL CPU (the server's processes, from /proc:
its client backends apart from the rest: autovacuum, WAL writer, checkpointer),
the worker processes' own CPU, backends waiting on a lock (heavyweight `Lock`, and `LWLock`)
sampled from pg_stat_activity every `SAMPLE_SECONDS`, and the machine's load average.

The server is a private cluster of this checkout (`.tmp/postgres-fleet`, started through
tests/services/postgres.py, on `BATCHCROP_TEST_PG_PORT` or a free port; never a shared one),
stopped at the end unless `--keep`. It runs with fsync off, like the test cluster: commit
latency is the page cache's, not a disk's (docs/scaling.md says what that leaves out).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leases import LeaseLost, LeaseManager, NewItem, make_engine, upgrade
from leases.heartbeat import HEARTBEATS_PER_LEASE
from tests.services import postgres

SLOTS = (4, 16, 64, 200)
SLOTS_PER_WORKER = 8
RENDER_MS = 200.0
CHECKPOINTS = 3
"""`check` calls per attempt, between the render's parts (batchcrop/worker/processing.py)."""
SECONDS = 20.0
WARMUP_SECONDS = 5.0
SAMPLE_SECONDS = 0.25
IDLE_SLEEP_SECONDS = 0.1
ITEMS_MARGIN = 1.5
"""Items made per step: this times what the ideal fleet would finish, so none runs dry."""
POOL_PER_SLOTS = 0.5
"""Connections per slot in a worker's pool (+1 for its heartbeat): a slot holds one only while
a statement runs, and 200 slots must fit the cluster's `max_connections` (200)."""
KNEE_FRACTION = 0.8
"""The knee: the first step whose completions fall below this share of the ideal."""
CLUSTER_ROOT = Path(__file__).resolve().parents[1] / ".tmp" / "postgres-fleet"
START_TIMEOUT_SECONDS = 120.0
LINGER_SECONDS = 3.0
"""A worker process keeps its connections this long past the window's end."""


@dataclass(frozen=True)
class Step:
    """What one worker process of a step is told."""

    url: str
    group_id: str
    slots: int
    render_seconds: float
    lease_seconds: float
    claim_size: int
    warmup_seconds: float
    seconds: float
    start_at: float = 0.0
    measure_at: float = 0.0
    stop_at: float = 0.0

    def starting(self, at: float) -> Step:
        """This step with its clock set: started at `at` (epoch seconds)."""
        return replace(
            self,
            start_at=at,
            measure_at=at + self.warmup_seconds,
            stop_at=at + self.warmup_seconds + self.seconds,
        )


def _in_window(step: Step, at: float) -> bool:
    return step.measure_at <= at < step.stop_at


def worker_process(step: Step, results: Any, ready: Any, go: Any, start: Any) -> None:
    """One worker: `step.slots` slot threads and a heartbeat thread until `step.stop_at`; puts
    (claimed, completed, heartbeats, claim latencies, CPU seconds) of the window on `results`.
    Connected, it says so on `ready` and waits for `go`, then for the start time in `start`."""
    pool = max(1, math.ceil(step.slots * POOL_PER_SLOTS))
    engine = make_engine(step.url, pool_size=pool + 1, max_overflow=0)
    manager = LeaseManager(engine, lease_seconds=step.lease_seconds)
    worker_id = f"fleet-{os.getpid()}"
    held: dict[str, Any] = {}
    lock = threading.Lock()
    counts = {"claimed": 0, "completed": 0, "heartbeats": 0, "lost": 0}
    latencies: list[float] = []
    stop = threading.Event()

    def slot() -> None:
        while time.time() < step.stop_at:
            began = time.perf_counter()
            claims = manager.claim(worker_id, step.claim_size, group_ids=[step.group_id])
            took = time.perf_counter() - began
            now = time.time()
            with lock:
                if _in_window(step, now):
                    latencies.append(took)
                    counts["claimed"] += len(claims)
            if not claims:
                time.sleep(IDLE_SLEEP_SECONDS * random.uniform(0.5, 1.0))
                continue
            for claim in claims:
                with lock:
                    held[claim.item_id] = claim
                try:
                    for _ in range(CHECKPOINTS):
                        time.sleep(step.render_seconds / CHECKPOINTS)
                        manager.check(claim)
                    manager.complete(claim)
                except LeaseLost:
                    counts["lost"] += 1
                    continue
                finally:
                    with lock:
                        held.pop(claim.item_id, None)
                with lock:
                    if _in_window(step, time.time()):
                        counts["completed"] += 1

    def heartbeat() -> None:
        interval = step.lease_seconds / HEARTBEATS_PER_LEASE
        # Processes start their clocks apart, as a real fleet's do.
        while not stop.wait(interval * random.uniform(0.9, 1.0)):
            with lock:
                claims = list(held.values())
            if claims:
                manager.heartbeat_many(claims)
                with lock:
                    if _in_window(step, time.time()):
                        counts["heartbeats"] += 1

    threads = [threading.Thread(target=slot) for _ in range(step.slots)]
    beat = threading.Thread(target=heartbeat)
    # Connect the pool before the start, so that the window sees no connection set-up.
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    ready.put(os.getpid())
    go.wait(START_TIMEOUT_SECONDS)
    step = step.starting(start.value)
    time.sleep(max(0.0, step.start_at - time.time()))
    cpu_at: float | None = None
    beat.start()
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, step.measure_at - time.time()))
    cpu_at = time.process_time()
    for thread in threads:
        thread.join()
    cpu = time.process_time() - cpu_at
    stop.set()
    beat.join()
    # Connected until the main process has read the backends' CPU: an ended backend's is gone.
    time.sleep(max(0.0, step.stop_at + LINGER_SECONDS - time.time()))
    engine.dispose()
    results.put((counts, latencies, cpu))


def server_cpu_seconds(postmaster_pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of the postmaster and of every process it forked, by pid."""
    ticks = os.sysconf("SC_CLK_TCK")
    spent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a backend that ended meanwhile
        # After the command: state ppid ... utime (12th) stime (13th), 0-based from state.
        if int(entry) == postmaster_pid or int(fields[1]) == postmaster_pid:
            spent[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    return spent


def split_cpu(
    before: dict[int, float], after: dict[int, float], background: set[int]
) -> tuple[float, float]:
    """CPU seconds between two readings: of the client backends, and of the server's own
    processes (`background`: autovacuum, the WAL writer, the checkpointer, the postmaster)."""
    clients = other = 0.0
    for pid, seconds in after.items():
        spent = seconds - before.get(pid, 0.0)
        if pid in background:
            other += spent
        else:
            clients += spent
    return clients, other


BACKGROUND = sa.text(
    "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'"
    " UNION SELECT pg_backend_pid()"
)
"""The server's own processes, and the sampling connection's backend (not the fleet's)."""


LOCK_WAITS = sa.text(
    "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),"
    " count(*) FILTER (WHERE wait_event_type = 'LWLock'),"
    " count(*) FILTER (WHERE state = 'active')"
    " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


@dataclass(frozen=True)
class Row:
    """One step's figures."""

    slots: int
    workers: int
    ideal: float
    claimed: float
    completed: float
    heartbeats: float
    p50_ms: float
    p99_ms: float
    server_cores: float
    background_cores: float
    client_cores: float
    lock_waiting: float
    lwlock_waiting: float
    active: float
    statements_per_item: float
    load: str


def run_step(url: str, postmaster_pid: int, slots: int, args: argparse.Namespace) -> Row:
    """Make a group, run the fleet of `slots`, return the window's figures."""
    engine = make_engine(url)
    manager = LeaseManager(engine, lease_seconds=args.lease_seconds)
    render = args.render_ms / 1000
    ideal = slots / render
    items = int(ideal * (args.warmup_seconds + args.seconds) * ITEMS_MARGIN) + slots
    group_id = str(uuid.uuid4())
    manager.create_group(
        group_id,
        deadline_seconds=3600,
        max_attempts=3,
        items=(NewItem(str(uuid.uuid4()), {"n": i}) for i in range(items)),
    )
    workers = [args.slots_per_worker] * (slots // args.slots_per_worker)
    if slots % args.slots_per_worker:
        workers.append(slots % args.slots_per_worker)
    step = Step(
        url=url,
        group_id=group_id,
        slots=0,
        render_seconds=render,
        lease_seconds=args.lease_seconds,
        claim_size=args.claim_size,
        warmup_seconds=args.warmup_seconds,
        seconds=args.seconds,
    )
    context = multiprocessing.get_context("spawn")
    results, ready, go = context.Queue(), context.Queue(), context.Event()
    start = context.Value("d", 0.0)
    procs = [
        context.Process(
            target=worker_process,
            args=(_with_slots(step, n), results, ready, go, start),
            daemon=True,
        )
        for n in workers
    ]
    for proc in procs:
        proc.start()
    # Spawning and importing take seconds each on a busy machine: start once all are connected.
    for _ in procs:
        ready.get(timeout=START_TIMEOUT_SECONDS * 5)
    step = step.starting(time.time() + 1.0)
    start.value = step.start_at
    go.set()
    samples: list[tuple[int, int, int]] = []
    with engine.connect() as conn:
        time.sleep(max(0.0, step.measure_at - time.time()))
        background_at = set(conn.execute(BACKGROUND).scalars())
        conn.rollback()
        cpu_at, began = server_cpu_seconds(postmaster_pid), time.monotonic()
        while time.time() < step.stop_at:
            samples.append(tuple(conn.execute(LOCK_WAITS).one()))
            conn.rollback()
            time.sleep(SAMPLE_SECONDS)
        cpu_after = server_cpu_seconds(postmaster_pid)
        own = set(conn.execute(BACKGROUND).scalars()) | {postmaster_pid} | background_at
        conn.rollback()
        server, background = split_cpu(cpu_at, cpu_after, own)
        window = time.monotonic() - began
    load = "/".join(Path("/proc/loadavg").read_text().split()[:3])
    gathered = [results.get(timeout=START_TIMEOUT_SECONDS) for _ in procs]
    for proc in procs:
        proc.join(START_TIMEOUT_SECONDS)
        if proc.exitcode != 0:
            raise RuntimeError(f"a worker process exited with {proc.exitcode}")
    engine.dispose()
    claimed = sum(c["claimed"] for c, _, _ in gathered)
    completed = sum(c["completed"] for c, _, _ in gathered)
    heartbeats = sum(c["heartbeats"] for c, _, _ in gathered)
    latencies = sorted(t for _, ts, _ in gathered for t in ts)
    statements = len(latencies) + completed * (CHECKPOINTS + 1) + heartbeats
    seconds = args.seconds
    return Row(
        slots=slots,
        workers=len(workers),
        ideal=ideal,
        claimed=claimed / seconds,
        completed=completed / seconds,
        heartbeats=heartbeats / seconds,
        p50_ms=_quantile(latencies, 0.5) * 1000,
        p99_ms=_quantile(latencies, 0.99) * 1000,
        server_cores=server / window,
        background_cores=background / window,
        client_cores=sum(cpu for _, _, cpu in gathered) / seconds,
        lock_waiting=statistics.fmean(s[0] for s in samples) if samples else math.nan,
        lwlock_waiting=statistics.fmean(s[1] for s in samples) if samples else math.nan,
        active=statistics.fmean(s[2] for s in samples) if samples else math.nan,
        statements_per_item=statements / completed if completed else math.nan,
        load=load,
    )


def _with_slots(step: Step, slots: int) -> Step:
    return Step(**{**step.__dict__, "slots": slots})


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    return values[min(len(values) - 1, int(q * len(values)))]


HEADER = (
    "| slots | workers | ideal/s | claimed/s | completed/s | heartbeats/s | claim p50 ms "
    "| claim p99 ms | PG backends' CPU cores | PG background CPU cores | workers' CPU cores "
    "| waiting: Lock | LWLock | active "
    "| statements/item | load 1/5/15 |"
)


def print_row(row: Row) -> None:
    print(
        f"| {row.slots} | {row.workers} | {row.ideal:.0f} | {row.claimed:.0f} "
        f"| {row.completed:.0f} | {row.heartbeats:.2f} | {row.p50_ms:.1f} | {row.p99_ms:.1f} "
        f"| {row.server_cores:.2f} | {row.background_cores:.2f} | {row.client_cores:.2f} "
        f"| {row.lock_waiting:.2f} "
        f"| {row.lwlock_waiting:.2f} | {row.active:.1f} | {row.statements_per_item:.2f} "
        f"| {row.load} |",
        flush=True,
    )


def _slot_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slots wants numbers like 4,16,64: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("--slots: every count must be at least 1")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=_slot_counts, default=list(SLOTS), metavar="N,N,...")
    parser.add_argument("--slots-per-worker", type=int, default=SLOTS_PER_WORKER, metavar="N")
    parser.add_argument("--render-ms", type=float, default=RENDER_MS, metavar="MS")
    parser.add_argument("--seconds", type=float, default=SECONDS, metavar="S")
    parser.add_argument("--warmup-seconds", type=float, default=WARMUP_SECONDS, metavar="S")
    parser.add_argument("--claim-size", type=int, default=1, metavar="N")
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=900.0,
        metavar="S",
        help="the lease (heartbeats every lease/3); the default is batchcrop's",
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()
    cluster = postgres.Cluster(CLUSTER_ROOT, postgres.env_port(postgres.PORT_ENV))
    admin_url = cluster.ensure()
    try:
        postmaster_pid = int((cluster.data / "postmaster.pid").read_text().split()[0])
        admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text('DROP DATABASE IF EXISTS "bench_fleet" WITH (FORCE)'))
            conn.execute(sa.text('CREATE DATABASE "bench_fleet"'))
            version = conn.execute(sa.text("SHOW server_version")).scalar_one()
        admin.dispose()
        url = sa.make_url(admin_url).set(database="bench_fleet")
        url_text = url.render_as_string(hide_password=False)
        engine = make_engine(url_text)
        upgrade(engine)
        engine.dispose()
        print(
            f"PostgreSQL {version} on {os.cpu_count()} CPUs; render {args.render_ms:g} ms "
            f"(sleep), claim size {args.claim_size}, lease {args.lease_seconds:g} s, "
            f"{args.slots_per_worker} slots a worker, {args.seconds:g} s measured per step"
        )
        print(HEADER)
        print("|" + "---|" * (HEADER.count("|") - 1))
        rows = []
        for slots in args.slots:
            rows.append(run_step(url_text, postmaster_pid, slots, args))
            print_row(rows[-1])
        knee = next((r for r in rows if r.completed < KNEE_FRACTION * r.ideal), None)
        if knee is None:
            print(f"no knee up to {rows[-1].slots} slots (completions within "
                  f"{KNEE_FRACTION:.0%} of the ideal)")  # fmt: skip
        else:
            print(f"knee: {knee.slots} slots completed {knee.completed:.0f}/s of an ideal "
                  f"{knee.ideal:.0f}/s")  # fmt: skip
    finally:
        if not args.keep:
            cluster.stop()


if __name__ == "__main__":
    main()

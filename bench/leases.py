"""Lease engine throughput beside procrastinate and pgqueuer, and one reaper pass at 1M items.

Run by hand (never by the test suite), on the local PostgreSQL of the test tooling:

    .venv/bin/python bench/leases.py [--items 10000] [--workers 4] [--runs 1] [--systems ...]
        [--baseline /path/to/earlier/checkout] [--reap-items 1000000 | --skip-reap]

Every system gets its own fresh database on the same server and the same number of worker
processes, and processes the same number of no-op items:
- leases: claim -> heartbeat -> complete per item (three transactions), claiming 1 and 10 at once;
- leases, batched: claim 10 -> one heartbeat of the 10 held leases (`heartbeat_many`) -> the 10
  completed in one round trip (`complete_many`): three statements per 10 items, every item
  still fenced by its own token, with its event row and counters;
- procrastinate: `app.run_worker(wait=False)` per process, one no-op task per job;
- pgqueuer: `QueueManager.run(mode=drain)` per process, one no-op entrypoint, batch size 10;
- with `--baseline`, the claim-ten per-item loop of that earlier checkout's `leases`.
Each system first runs once untimed on 2,000 items (a warm-up). With `--runs N` every system
is measured N times (the order rotating between runs) and the table gives medians with min-max;
the ratio to pgqueuer is taken within each run. Client CPU is what the worker processes spent
after the start, per item; server CPU is what their database backends spent (read from the
local server's /proc; not for procrastinate, whose connections are its own).
Then a 1,000,000-item group with 1% of its leases expired, and one timed `reap()`.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leases import LeaseManager, NewItem, State, make_engine, queries, upgrade
from tests.services import postgres

DEFAULT_ITEMS = 10_000
DEFAULT_WORKERS = 4
DEFAULT_REAP_ITEMS = 1_000_000
EXPIRED_FRACTION = 0.01
START_TIMEOUT_SECONDS = 60.0
WARMUP_ITEMS = 2000


def fresh_database(admin_url: str, name: str) -> str:
    """Drop and create database `name`; return its SQLAlchemy URL."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def libpq(url: str) -> str:
    """The libpq connection string of a SQLAlchemy PostgreSQL URL."""
    parsed = sa.make_url(url)
    return f"host={parsed.host} port={parsed.port} user={parsed.username} dbname={parsed.database}"


def backend_seconds(pid: int | None) -> float:
    """CPU seconds a PostgreSQL backend (of the local server) has run, from its scheduler
    statistics; NaN when unknown."""
    if pid is None:
        return math.nan
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return math.nan


class Start:
    """What every worker process of one measurement shares: a barrier that releases them
    together, and a queue on which each reports the CPU seconds it and its database backend
    spent after the release."""

    def __init__(self, context: Any, workers: int) -> None:
        self.barrier = context.Barrier(workers + 1)
        self.spent = context.Queue()
        self._cpu_at = 0.0
        self._backend: int | None = None
        self._backend_at = 0.0

    def go(self, backend_pid: int | None = None) -> None:
        """Wait for the others (in a worker), then start counting this process's CPU and, given
        its one connection's backend, that backend's."""
        self.barrier.wait(START_TIMEOUT_SECONDS)
        self._backend, self._backend_at = backend_pid, backend_seconds(backend_pid)
        self._cpu_at = time.process_time()

    def done(self) -> None:
        """Report the CPU seconds this worker (and its backend) spent since `go`."""
        client = time.process_time() - self._cpu_at
        self.spent.put((client, backend_seconds(self._backend) - self._backend_at))


def run_workers(
    target: Callable[..., None], args: tuple[Any, ...], workers: int
) -> tuple[float, float, float]:
    """Start `workers` processes, release them together; return the seconds until all exited
    and the CPU seconds the worker processes and their backends spent meanwhile."""
    context = multiprocessing.get_context("spawn")
    start = Start(context, workers)
    procs = [context.Process(target=target, args=(start, *args)) for _ in range(workers)]
    for p in procs:
        p.start()
    start.barrier.wait(START_TIMEOUT_SECONDS)
    started = time.perf_counter()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"worker exited with {p.exitcode}")
    seconds = time.perf_counter() - started
    spent = [start.spent.get(timeout=START_TIMEOUT_SECONDS) for _ in procs]
    return seconds, sum(client for client, _ in spent), sum(server for _, server in spent)


Measured = tuple[float, float, float]
"""Items per second, and client and server (backend) CPU microseconds per item."""


def _measured(items: int, seconds: float, client: float, server: float) -> Measured:
    return items / seconds, client / items * 1e6, server / items * 1e6


# --- leases -------------------------------------------------------------------------------


def leases_worker(start: Start, url: str, claim_limit: int, batched: bool) -> None:
    """Claim, heartbeat, complete until no work is left: one item at a time, or (`batched`)
    the claimed set in one heartbeat and one completion."""
    engine = make_engine(url)
    manager = LeaseManager(engine)
    worker = f"bench-{os.getpid()}"
    # The pool's one connection, which every statement of this single thread then reuses.
    with engine.connect() as conn:
        backend: int = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    start.go(backend)
    while claims := manager.claim(worker, claim_limit):
        if batched:
            manager.heartbeat_many(claims)
            lost = manager.complete_many(claims)
            assert not lost, lost
            continue
        for claim in claims:
            manager.heartbeat(claim)
            manager.complete(claim)
    start.done()
    engine.dispose()


# The per-item loop of an earlier checkout, run as `python -c` with that checkout on
# PYTHONPATH: it says "ready", waits for a line on stdin, works, then prints its CPU seconds.
BASELINE_WORKER = """
import os, sys, time
import leases
from leases import LeaseManager, make_engine
engine = make_engine(sys.argv[1])
manager = LeaseManager(engine)
worker, limit = f"bench-{os.getpid()}", int(sys.argv[2])
with engine.connect() as conn:
    stat = f"/proc/{conn.exec_driver_sql('SELECT pg_backend_pid()').scalar_one()}/schedstat"
print("ready", os.path.dirname(os.path.dirname(leases.__file__)), flush=True)
sys.stdin.readline()
cpu, backend = time.process_time(), int(open(stat).read().split()[0])
while claims := manager.claim(worker, limit):
    for claim in claims:
        manager.heartbeat(claim)
        manager.complete(claim)
backend = (int(open(stat).read().split()[0]) - backend) / 1e9
print(time.process_time() - cpu, backend, flush=True)
"""


def run_baseline_workers(
    code: str, url: str, claim_limit: int, workers: int
) -> tuple[float, float]:
    """`run_workers` for the per-item loop of the checkout at `code` (its `leases` package)."""
    env = {**os.environ, "PYTHONPATH": code}
    command = [sys.executable, "-c", BASELINE_WORKER, url, str(claim_limit)]
    # In the checkout's folder: `python -c` puts the working folder first on sys.path, so
    # anywhere else (this checkout's root) it would import this checkout's `leases`.
    procs = [
        subprocess.Popen(
            command,
            cwd=code,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    for p in procs:
        assert p.stdout is not None
        ready = p.stdout.readline().split()
        if ready != ["ready", str(Path(code).resolve())]:
            raise RuntimeError(f"a baseline worker did not load the baseline's leases: {ready}")
    started = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = [p.communicate()[0].split() for p in procs]
    seconds = time.perf_counter() - started
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError("a baseline worker failed")
    return seconds, sum(float(out[0]) for out in outputs), sum(float(out[1]) for out in outputs)


def bench_leases(
    admin_url: str,
    items: int,
    workers: int,
    claim_limit: int,
    *,
    batched: bool = False,
    baseline: str | None = None,
) -> Measured:
    """Items per second through claim -> heartbeat -> complete, and client CPU per item; with
    `baseline`, the per-item loop of that checkout (on a database made by this one: the lease
    schema is the same)."""
    url = fresh_database(admin_url, "bench_leases")
    engine = make_engine(url)
    upgrade(engine)
    manager = LeaseManager(engine)
    group_id = str(uuid.uuid4())
    manager.create_group(
        group_id,
        deadline_seconds=3600,
        max_attempts=3,
        items=(NewItem(str(uuid.uuid4()), {"n": i}) for i in range(items)),
    )
    if baseline is None:
        spent = run_workers(leases_worker, (url, claim_limit, batched), workers)
    else:
        spent = run_baseline_workers(baseline, url, claim_limit, workers)
    assert manager.group(group_id).counts[State.SUCCEEDED] == items
    assert manager.recount(group_id) == manager.counted(group_id)
    engine.dispose()
    return _measured(items, *spent)


# --- procrastinate --------------------------------------------------------------------------


def _procrastinate_app(url: str) -> Any:
    import procrastinate  # noqa: PLC0415  (bench-only dependency)

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=libpq(url)))

    @app.task(name="noop")
    def noop() -> None:
        return None

    return app


def procrastinate_worker(start: Start, url: str) -> None:
    """Run one procrastinate worker until the queue is empty."""
    import logging  # noqa: PLC0415

    logging.disable(logging.WARNING)
    app = _procrastinate_app(url)
    with app.open():
        start.go()
        app.run_worker(wait=False, concurrency=1, install_signal_handlers=False)
        start.done()


def bench_procrastinate(admin_url: str, items: int, workers: int) -> Measured:
    """Jobs per second through procrastinate workers."""
    url = fresh_database(admin_url, "bench_procrastinate")
    app = _procrastinate_app(url)
    with app.open():
        app.schema_manager.apply_schema()
        noop = app.tasks["noop"]
        for start in range(0, items, 1000):
            noop.batch_defer(*({} for _ in range(min(1000, items - start))))
    spent = run_workers(procrastinate_worker, (url,), workers)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        done = conn.execute(
            sa.text("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        ).scalar_one()
    engine.dispose()
    assert done == items, done
    return _measured(items, *spent)


# --- pgqueuer -------------------------------------------------------------------------------


async def _pgqueuer_run(url: str, start: Start) -> None:
    import psycopg  # noqa: PLC0415
    from pgqueuer import QueueManager  # noqa: PLC0415
    from pgqueuer.db import PsycopgDriver  # noqa: PLC0415
    from pgqueuer.queries import Queries  # noqa: PLC0415
    from pgqueuer.types import QueueExecutionMode  # noqa: PLC0415

    conn = await psycopg.AsyncConnection.connect(libpq(url), autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job: Any) -> None:
        return None

    start.go(conn.info.backend_pid)
    await qm.run(mode=QueueExecutionMode.drain, batch_size=10)
    start.done()
    await conn.close()


def pgqueuer_worker(start: Start, url: str) -> None:
    """Run one pgqueuer queue manager until the queue is drained."""
    import logging  # noqa: PLC0415

    logging.disable(logging.WARNING)
    asyncio.run(_pgqueuer_run(url, start))


async def _pgqueuer_setup(url: str, items: int) -> None:
    import psycopg  # noqa: PLC0415
    from pgqueuer.db import PsycopgDriver  # noqa: PLC0415
    from pgqueuer.queries import Queries  # noqa: PLC0415

    conn = await psycopg.AsyncConnection.connect(libpq(url), autocommit=True)
    q = Queries(PsycopgDriver(conn))
    await q.install()
    for start in range(0, items, 1000):
        n = min(1000, items - start)
        await q.enqueue(["noop"] * n, [None] * n, [0] * n)
    await conn.close()


def bench_pgqueuer(admin_url: str, items: int, workers: int) -> Measured:
    """Jobs per second through pgqueuer queue managers."""
    url = fresh_database(admin_url, "bench_pgqueuer")
    asyncio.run(_pgqueuer_setup(url, items))
    spent = run_workers(pgqueuer_worker, (url,), workers)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        left = conn.execute(sa.text("SELECT count(*) FROM pgqueuer")).scalar_one()
    engine.dispose()
    assert left == 0, left
    return _measured(items, *spent)


# --- reaper at scale --------------------------------------------------------------------------


def bench_reap(admin_url: str, items: int) -> dict[str, float]:
    """Create `items` items, expire 1% of them, time one reaper pass and show its plan."""
    url = fresh_database(admin_url, "bench_leases_reap")
    engine = make_engine(url)
    upgrade(engine)
    manager = LeaseManager(engine)
    group_id = str(uuid.uuid4())
    started = time.perf_counter()
    manager.create_group(
        group_id,
        deadline_seconds=3600,
        max_attempts=3,
        items=(NewItem(str(uuid.uuid4()), {"n": i}) for i in range(items)),
    )
    create_seconds = time.perf_counter() - started
    expired = int(items * EXPIRED_FRACTION)
    claimed = 0
    while claimed < expired:
        claimed += len(manager.claim("bench", min(5000, expired - claimed)))
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_items SET lease_expires_at = 1 WHERE state = 'in_progress'")
        )
        conn.execute(sa.text("ANALYZE"))
    stmt = queries.retry_or_fail_expired(5000, base_ms=5000, max_ms=300_000)
    compiled = stmt.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
    with engine.connect() as conn:
        plan = "\n".join(conn.exec_driver_sql(f"EXPLAIN {compiled}").scalars().all())
    started = time.perf_counter()
    result = manager.reap()
    reap_seconds = time.perf_counter() - started
    started = time.perf_counter()
    summary = manager.group(group_id)
    summary_seconds = time.perf_counter() - started
    assert result.retried == expired, result
    assert summary.total == items
    engine.dispose()
    return {
        "create_seconds": create_seconds,
        "expired": expired,
        "reap_seconds": reap_seconds,
        "summary_ms": summary_seconds * 1000,
        "plan_uses_index": float(
            "ix_lease_items_in_progress" in plan and "Seq Scan on lease_items" not in plan
        ),
    }


SYSTEMS = {
    "baseline-10": "baseline checkout: claim 10, heartbeat, complete",
    "leases-1": "leases: claim 1, heartbeat, complete",
    "leases-10": "leases: claim 10, heartbeat, complete (per item)",
    "leases-batched": "leases: claim 10, heartbeat_many, complete_many",
    "procrastinate": "procrastinate 3 (run_worker, concurrency 1)",
    "pgqueuer": "pgqueuer 1 (drain, batch 10)",
}
"""What `--systems` names (`leases` stands for leases-1 and leases-10), in table order."""


def _measure(
    system: str, admin_url: str, items: int, workers: int, baseline: str | None = None
) -> Measured:
    match system:
        case "baseline-10":
            return bench_leases(admin_url, items, workers, 10, baseline=baseline)
        case "leases-1":
            return bench_leases(admin_url, items, workers, 1)
        case "leases-10":
            return bench_leases(admin_url, items, workers, 10)
        case "leases-batched":
            return bench_leases(admin_url, items, workers, 10, batched=True)
        case "procrastinate":
            return bench_procrastinate(admin_url, items, workers)
        case _:
            return bench_pgqueuer(admin_url, items, workers)


def _spread(values: list[float], digits: int = 0) -> str:
    """Median, and min-max when there are several values."""
    ordered = sorted(values)
    median = statistics.median(ordered)
    if len(ordered) == 1:
        return f"{median:.{digits}f}"
    return f"{median:.{digits}f} ({ordered[0]:.{digits}f}-{ordered[-1]:.{digits}f})"


def run_throughput(
    admin_url: str,
    systems: list[str],
    items: int,
    workers: int,
    *,
    runs: int,
    baseline: str | None = None,
) -> None:
    """Measure every system `runs` times (each run starting one system later, so that no
    system always goes first), after one untimed warm-up of each, and print each run, then
    medians and spreads; each run's ratio to pgqueuer is taken within that run."""
    results: dict[str, list[Measured]] = {system: [] for system in systems}
    for system in systems:
        # Untimed: the first measurement of a session ran up to 2x slower, whichever system
        # it was (a fresh server's caches, first imports and connections).
        _measure(system, admin_url, min(items, WARMUP_ITEMS), workers, baseline)
    for run in range(runs):
        order = systems[run % len(systems) :] + systems[: run % len(systems)]
        measured = {s: _measure(s, admin_url, items, workers, baseline) for s in order}
        line = ", ".join(f"{s} {measured[s][0]:.0f}/s" for s in systems)
        print(f"run {run + 1}: {line}", flush=True)
        for system in systems:
            results[system].append(measured[system])
    print(
        f"\n{'system':52s} {'items/s':>18s} {'client CPU us/item':>18s} "
        f"{'server CPU us/item':>18s} {'x pgqueuer':>17s}"
    )
    for system in systems:
        rates = [rate for rate, _, _ in results[system]]
        client = _spread([us for _, us, _ in results[system]])
        server = [us for _, _, us in results[system]]
        backend = "n/a" if any(math.isnan(us) for us in server) else _spread(server)
        ratio = ""
        if "pgqueuer" in results and system != "pgqueuer":
            peers = [rate for rate, _, _ in results["pgqueuer"]]
            ratio = _spread([ours / peer for ours, peer in zip(rates, peers, strict=True)], 2)
        print(
            f"{SYSTEMS[system]:52s} {_spread(rates):>18s} {client:>18s} {backend:>18s} {ratio:>17s}"
        )


def main() -> None:
    """Run every measurement and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=DEFAULT_ITEMS)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--reap-items", type=int, default=DEFAULT_REAP_ITEMS)
    parser.add_argument("--systems", default="leases,leases-batched,procrastinate,pgqueuer")
    parser.add_argument("--runs", type=int, default=1, help="repeat the throughput runs")
    parser.add_argument(
        "--baseline", help="an earlier checkout: its per-item claim-ten loop, in the same runs"
    )
    parser.add_argument("--skip-reap", action="store_true")
    args = parser.parse_args()
    admin_url = os.environ.get("BATCHCROP_TEST_POSTGRES_URL") or postgres.ensure()
    print(f"{args.items} no-op items, {args.workers} worker processes, {os.cpu_count()} cores")
    named: set[str] = set()
    for name in args.systems.split(","):
        named |= {"leases-1", "leases-10"} if name == "leases" else {name}
    unknown = named - set(SYSTEMS) - {"leases", "none"}
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    if args.baseline:
        named.add("baseline-10")
    systems = [system for system in SYSTEMS if system in named]
    if systems:
        run_throughput(
            admin_url, systems, args.items, args.workers, runs=args.runs, baseline=args.baseline
        )
    if not args.skip_reap:
        reap = bench_reap(admin_url, args.reap_items)
        print(f"create_group of {args.reap_items} items: {reap['create_seconds']:.1f} s")
        print(
            f"reap() over {args.reap_items} items, {int(reap['expired'])} expired: "
            f"{reap['reap_seconds']:.2f} s (index used: {bool(reap['plan_uses_index'])})"
        )
        print(f"group() summary at {args.reap_items} items: {reap['summary_ms']:.1f} ms")


if __name__ == "__main__":
    main()

"""Retention beside a working fleet: prune throughput, and what it does to claim latency.

Run by hand (never by the test suite):

    .venv/bin/python bench/prune.py [--dialects postgresql,sqlite] [--pg-items 1000000]
        [--sqlite-items 100000] [--batches 10] [--claimers 4] [--baseline-seconds 20]

For each database, in one run: `--batches` finished batches holding the items between them are
written, 40 days old, then a fleet of `--claimers` processes works on another, open batch (each
loops claim one item -> complete it -> sleep `CLAIM_INTERVAL_SECONDS`, standing in for the
render). The claims are timed for `--baseline-seconds` without a prune, then while
`BatchService.prune(30 days)` deletes the finished batches in the main process. Printed: the
prune's rows, seconds and rows per second, and for both windows the claims' p50 / p95 / max
latency and the longest stall (the longest interval in which no claim of the fleet returned).

Setup shortcut: the finished batches are written with direct INSERT ... SELECT statements (a
number series: generate_series on PostgreSQL, a recursive CTE on SQLite), not by running
workers; each batch gets exactly the rows a worker leaves behind for a one-ratio, one-format
batch: its batch row, one `succeeded` lease item per source, three events per item
(created, claimed, completed), the group's sharded counters and one manifest row per item.
The run checks that the first batch reads as `succeeded` and that its counters equal a recount.
The open batch is submitted normally (`BatchService.submit`).
"""

from __future__ import annotations

import argparse
import itertools
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

from batchcrop.app import App, build
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.db.tables import batches
from batchcrop.settings import Settings
from bench.leases import fresh_database
from leases import LeaseManager, State, make_engine
from leases.manager import COUNTER_SHARDS
from tests.services import postgres

DEFAULT_PG_ITEMS = 1_000_000
DEFAULT_SQLITE_ITEMS = 100_000
DEFAULT_BATCHES = 10
DEFAULT_CLAIMERS = 4
DEFAULT_BASELINE_SECONDS = 20.0
CLAIM_INTERVAL_SECONDS = 0.02
AGE_DAYS = 40
FINISHED_BEFORE_SECONDS = 30 * 86400.0
OPEN_ITEMS_PER_CLAIMER_SECOND = 1 / CLAIM_INTERVAL_SECONDS
START_TIMEOUT_SECONDS = 120.0
DAY_MS = 86_400_000


# --- setup: finished batches by direct inserts ---------------------------------------------------


def _series(dialect: str) -> tuple[str, str]:
    """(WITH clause giving nums(n) = 0..:last, the SQL of n as 12 zero-padded digits)."""
    if dialect == "postgresql":
        return "WITH nums(n) AS (SELECT generate_series(0, :last))", "lpad(n::text, 12, '0')"
    return (
        "WITH RECURSIVE nums(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM nums WHERE n < :last)",
        "printf('%012d', n)",
    )


def _payload(dialect: str, padded: str) -> str:
    source = f"'/srv/catalogue/' || {padded} || '.jpg'"
    ref = f"'sku-' || {padded}"
    if dialect == "postgresql":
        return f"json_build_object('source', {source}, 'ref', {ref})"
    return f"json_object('source', {source}, 'ref', {ref})"


def write_finished_batch(engine: sa.Engine, count: int, at_ms: int) -> str:
    """Write one finished batch of `count` succeeded items dated `at_ms`; return its id."""
    dialect = engine.dialect.name
    batch_id = str(uuid.uuid4())
    series, padded = _series(dialect)
    params = {"g": batch_id, "last": count - 1, "t": at_ms}
    item_id = f"substr(:g, 1, 24) || {padded}"
    step = [
        ("NULL", "'queued'", "0"),
        ("'queued'", "'in_progress'", "1"),
        ("'in_progress'", "'succeeded'", "1"),
    ]
    spec = RenderSpec.from_input({"ratios": "1:1"}).to_record()
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO lease_groups (id, created_at, deadline_at, max_attempts,"
                " cancel_requested, sealed) VALUES (:g, :t, :t + 3600000, 3, false, true)"
            ),
            params,
        )
        conn.execute(
            sa.text(
                f"{series} INSERT INTO lease_items (id, group_id, seq, state, attempt,"
                " attempt_base, attempt_started_at, next_attempt_at, worker_id, created_at,"
                f" updated_at, payload) SELECT {item_id}, :g, n, 'succeeded', 1, 0, :t, :t,"
                f" 'bench-worker', :t, :t, {_payload(dialect, padded)} FROM nums"
            ),
            params,
        )
        for from_state, to_state, attempt in step:
            conn.execute(
                sa.text(
                    "INSERT INTO lease_events (item_id, group_id, attempt, from_state, to_state,"
                    f" at, worker_id) SELECT id, group_id, {attempt}, {from_state}, {to_state},"
                    " :t, 'bench-worker' FROM lease_items WHERE group_id = :g"
                ),
                params,
            )
        per_shard = [len(range(s, count, COUNTER_SHARDS)) for s in range(COUNTER_SHARDS)]
        conn.execute(
            sa.text(
                "INSERT INTO lease_counters (group_id, state, category, shard, n, updated_at)"
                " VALUES (:g, :state, '', :shard, :n, :t)"
            ),
            [
                {**params, "state": state.value, "shard": s, "n": n if keep else 0}
                for state, keep in (
                    (State.QUEUED, False),
                    (State.IN_PROGRESS, False),
                    (State.SUCCEEDED, True),
                )
                for s, n in enumerate(per_shard)
            ],
        )
        conn.execute(
            batches.insert().values(
                id=batch_id, spec=spec, request_hash="0" * 64, store=None, label="bench-finished"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO batchcrop_derivatives (item_id, ratio, format, batch_id, key, width,"
                " height, bytes, sha256, crop_box) SELECT id, '1:1', 'jpeg', group_id,"
                " 'derivatives/' || group_id || '/' || id || '/1x1.jpg', 1200, 1200, 150000,"
                " :sha, '0,0,1200,1200' FROM lease_items WHERE group_id = :g"
            ),
            {**params, "sha": "e" * 64},
        )
    return batch_id


def setup(app: App, items: int, batch_count: int) -> list[str]:
    """The finished batches (`items` between them), checked, and the database analysed."""
    at_ms = int(time.time() * 1000) - AGE_DAYS * DAY_MS
    per_batch = items // batch_count
    ids = [write_finished_batch(app.engine, per_batch, at_ms) for _ in range(batch_count)]
    if app.engine.dialect.name == "postgresql":
        with app.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE"))
    status = app.batches.status(ids[0])
    assert status["state"] == "succeeded", status
    assert status["counts"]["succeeded"] == per_batch, status
    assert app.leases.recount(ids[0]) == app.leases.counted(ids[0])
    return ids


def row_counts(engine: sa.Engine) -> dict[str, int]:
    """Rows per table (to show what the prune left)."""
    tables = (
        "batchcrop_batches",
        "batchcrop_derivatives",
        "lease_groups",
        "lease_items",
        "lease_events",
        "lease_counters",
    )
    with engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in tables}


# --- the fleet ----------------------------------------------------------------------------------


def claimer(ready: Any, url: str, stop: Any, out: Any) -> None:
    """Claim one item, complete it, sleep; report every claim as (started, seconds, claimed)."""
    engine = make_engine(url)
    manager = LeaseManager(engine)
    worker = f"bench-{os.getpid()}"
    samples: list[tuple[float, float, bool]] = []
    ready.wait(START_TIMEOUT_SECONDS)
    while not stop.is_set():
        started = time.monotonic()  # system-wide on Linux: comparable across processes
        claims = manager.claim(worker, 1)
        samples.append((started, time.monotonic() - started, bool(claims)))
        for claim in claims:
            manager.complete(claim)
        time.sleep(CLAIM_INTERVAL_SECONDS)
    out.put(samples)
    engine.dispose()


def window(samples: list[tuple[float, float, bool]], start: float, end: float) -> dict[str, float]:
    """Latency figures of the claims started in [start, end), and the fleet's longest stall."""
    inside = [s for s in samples if start <= s[0] < end]
    latencies = sorted(d for _, d, _ in inside)
    returns = sorted(t + d for t, d, _ in inside)
    edges = [start, *returns, max(end, returns[-1] if returns else end)]
    return {
        "claims": len(inside),
        "empty": sum(1 for *_, got in inside if not got),
        "p50": statistics.median(latencies),
        "p95": latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))],
        "max": latencies[-1],
        "stall": max(b - a for a, b in itertools.pairwise(edges)),
    }


def run(
    url: str, store: str, *, items: int, batch_count: int, claimers: int, baseline: float
) -> None:
    """Set up, start the fleet, measure the baseline then the prune, print the figures."""
    app = build(Settings(database_url=url, store=store))
    app.upgrade()
    started = time.perf_counter()
    setup(app, items, batch_count)
    setup_seconds = time.perf_counter() - started
    before = row_counts(app.engine)
    # Enough open work for the fleet at full pace for the baseline and a generous prune.
    open_items = int(claimers * OPEN_ITEMS_PER_CLAIMER_SECOND * (baseline + 600))
    spec = RenderSpec.from_input({"ratios": "1:1"})
    request = BatchRequest(
        items=tuple(ItemRequest(source=f"/srv/catalogue/open/{i}.jpg") for i in range(open_items)),
        spec=spec,
        deadline_seconds=86400,
        max_attempts=3,
        label="bench-open",
    )
    app.batches.submit(request)
    print(
        f"{app.engine.dialect.name}: {batch_count} finished batches, {items} items written in"
        f" {setup_seconds:.0f} s; {sum(before.values())} rows: {before}"
    )

    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(claimers + 1)
    stop = context.Event()
    out = context.Queue()
    procs = [context.Process(target=claimer, args=(ready, url, stop, out)) for _ in range(claimers)]
    for p in procs:
        p.start()
    ready.wait(START_TIMEOUT_SECONDS)
    base_start = time.monotonic()
    time.sleep(baseline)
    prune_start = time.monotonic()
    result = app.batches.prune(FINISHED_BEFORE_SECONDS)
    prune_end = time.monotonic()
    stop.set()
    samples = [s for _ in procs for s in out.get()]
    for p in procs:
        p.join()
    after = row_counts(app.engine)
    app.close()

    seconds = prune_end - prune_start
    print(
        f"  prune: {result.batches} batches, {result.rows} rows in {seconds:.1f} s ="
        f" {result.rows / seconds:,.0f} rows/s; left: {after}"
    )
    print(
        f"  {claimers} claimers (claim 1 -> complete -> sleep {CLAIM_INTERVAL_SECONDS * 1000:.0f}"
        " ms)   claims  p50 / p95 / max ms            longest stall ms"
    )
    for name, (start, end) in (
        ("without prune", (base_start, prune_start)),
        ("during prune", (prune_start, prune_end)),
    ):
        w = window(samples, start, end)
        empty = f" ({w['empty']} empty)" if w["empty"] else ""
        print(
            f"  {name:15s} {end - start:6.1f} s {w['claims']:8d}{empty}  {w['p50'] * 1000:6.1f} /"
            f" {w['p95'] * 1000:6.1f} / {w['max'] * 1000:7.1f}     {w['stall'] * 1000:7.1f}"
        )


def main() -> None:
    """One measurement per database."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dialects", default="postgresql,sqlite")
    parser.add_argument("--pg-items", type=int, default=DEFAULT_PG_ITEMS)
    parser.add_argument("--sqlite-items", type=int, default=DEFAULT_SQLITE_ITEMS)
    parser.add_argument("--batches", type=int, default=DEFAULT_BATCHES)
    parser.add_argument("--claimers", type=int, default=DEFAULT_CLAIMERS)
    parser.add_argument("--baseline-seconds", type=float, default=DEFAULT_BASELINE_SECONDS)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores")
    for dialect in args.dialects.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            if dialect == "sqlite":
                url, items = f"sqlite:///{tmp}/bench.db", args.sqlite_items
            else:
                admin = os.environ.get("BATCHCROP_TEST_POSTGRES_URL") or postgres.ensure()
                url, items = fresh_database(admin, "bench_prune"), args.pg_items
            run(
                url,
                f"file://{tmp}/store",
                items=items,
                batch_count=args.batches,
                claimers=args.claimers,
                baseline=args.baseline_seconds,
            )


if __name__ == "__main__":
    main()

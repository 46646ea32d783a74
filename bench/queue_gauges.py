"""The queue gauges an autoscaler reads, at a million items: what one read costs, and what it
says when batches overlap or a submission is unsealed.

Run by hand (never by the test suite):

    .venv/bin/python bench/queue_gauges.py [--items 1000000] [--reads 50] [--keep]

On a private PostgreSQL cluster (`.tmp/postgres-fleet`, as bench/fleet.py; stopped at the end
unless `--keep`): one group of `--items` queued items, then `LeaseManager.queue()` (the read
behind `batchcrop_queue_items` and `batchcrop_queue_oldest_queued_age_seconds`) timed `--reads`
times (p50 / max), with the plan of its two statements:
1. all queued;
2. after half the items ended (set by one UPDATE: the counters are not what is timed here,
   the queued-seq index probe is), before VACUUM: the probe walks the ended items' index entries;
3. the same after VACUUM;
then what the age gauge says (4) when that half-done batch has waited an hour and a new batch
of ten items is submitted, and (5) once that one is cancelled, when a submission of ten items
stays unsealed (a crashed submitter), beside the true age of the oldest queued item of a sealed
group.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leases import LeaseManager, NewItem, make_engine, upgrade
from leases import group_queries as gq
from tests.services import postgres

ITEMS = 1_000_000
READS = 50
CLUSTER_ROOT = Path(__file__).resolve().parents[1] / ".tmp" / "postgres-fleet"
HOUR_MS = 3_600_000


def timed_reads(manager: LeaseManager, reads: int) -> tuple[float, float]:
    """p50 and max milliseconds of `reads` calls of `queue()`."""
    took = []
    for _ in range(reads):
        began = time.perf_counter()
        manager.queue()
        took.append((time.perf_counter() - began) * 1000)
    return statistics.median(took), max(took)


def plans(engine: sa.Engine) -> str:
    """EXPLAIN ANALYZE (timing, buffers) of the two statements, compiled for PostgreSQL."""
    lines = []
    with engine.connect() as conn:
        for statement in (gq.queue_depth(), gq.head_queued_age_ms()):
            text = str(
                statement.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
            )
            rows = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {text}").scalars()
            lines += [f"    {row}" for row in rows]
    return "\n".join(lines)


def true_oldest_age_seconds(engine: sa.Engine) -> float:
    """What the age gauge should say: the oldest queued item of a sealed group, by its time."""
    with engine.connect() as conn:
        age_ms = conn.exec_driver_sql(
            "SELECT (extract(epoch FROM now()) * 1000)::bigint - min(i.updated_at)"
            " FROM lease_items i JOIN lease_groups g ON g.id = i.group_id"
            " WHERE i.state = 'queued' AND g.sealed"
        ).scalar_one()
    return float(age_ms) / 1000


def report(label: str, manager: LeaseManager, engine: sa.Engine, reads: int) -> None:
    p50, top = timed_reads(manager, reads)
    stats = manager.queue()
    counts = {state.value: n for state, n in stats.counts.items()}
    print(f"{label}: queue() p50 {p50:.2f} ms, max {top:.2f} ms; counts {counts}; "
          f"age gauge {stats.head_queued_age_seconds or 0:.1f} s, "
          f"oldest queued {true_oldest_age_seconds(engine):.1f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--reads", type=int, default=READS)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()
    cluster = postgres.Cluster(CLUSTER_ROOT, postgres.env_port(postgres.PORT_ENV))
    admin_url = cluster.ensure()
    try:
        admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text('DROP DATABASE IF EXISTS "bench_gauges" WITH (FORCE)'))
            conn.execute(sa.text('CREATE DATABASE "bench_gauges"'))
        admin.dispose()
        url = sa.make_url(admin_url).set(database="bench_gauges")
        engine = make_engine(url.render_as_string(hide_password=False))
        upgrade(engine)
        manager = LeaseManager(engine)
        group = str(uuid.uuid4())
        began = time.perf_counter()
        manager.create_group(
            group,
            deadline_seconds=86400,
            max_attempts=3,
            items=(NewItem(str(uuid.uuid4()), {"n": i}) for i in range(args.items)),
        )
        print(f"create_group of {args.items} items: {time.perf_counter() - began:.1f} s")
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
        report("1. all queued", manager, engine, args.reads)
        print(plans(engine))
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE lease_items SET state = 'succeeded' WHERE group_id = :g AND seq < :n"
                ),
                {"g": group, "n": args.items // 2},
            )
        report("2. half ended, before VACUUM", manager, engine, args.reads)
        print(plans(engine))
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE lease_items")
        report("3. after VACUUM", manager, engine, args.reads)
        with engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE lease_items SET updated_at = updated_at - :h WHERE group_id = :g"),
                {"h": HOUR_MS, "g": group},
            )
        newer = str(uuid.uuid4())
        manager.create_group(
            newer,
            deadline_seconds=86400,
            max_attempts=3,
            items=(NewItem(str(uuid.uuid4()), {"n": i}) for i in range(10)),
        )
        report("4. the half-done batch waited 1 h, a new one of 10 items", manager, engine, 5)
        manager.cancel(newer)
        unsealed = str(uuid.uuid4())
        manager.create_group(
            unsealed,
            deadline_seconds=86400,
            max_attempts=3,
            items=(NewItem(str(uuid.uuid4()), {"n": i}) for i in range(10)),
        )
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE lease_items SET updated_at = updated_at - 2 * :h WHERE group_id = :g"
                ),
                {"h": HOUR_MS, "g": unsealed},
            )
            conn.execute(
                sa.text("UPDATE lease_groups SET sealed = false WHERE id = :g"), {"g": unsealed}
            )
        report("5. plus an unsealed submission of 10 items, 2 h old", manager, engine, 5)
        engine.dispose()
    finally:
        if not args.keep:
            cluster.stop()


if __name__ == "__main__":
    main()

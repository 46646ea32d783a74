"""Idle load on PostgreSQL, polling versus wake-ups: statements/s of an idle worker, and how long
a new item waits to be claimed.

For each slot count, one worker process's worth (N slots, the reaper, the registry refresh and
a callback deliverer) runs idle on a fresh database, first as it did before wake-ups (every
idle slot and the deliverer polling every 1 s, jittered; no listener), then with wake-ups
(LISTEN/NOTIFY, polling only every `--fallback-poll-seconds`). An open batch with nothing to
claim (its one item held by another worker, as at a batch's tail) is there throughout: with
no open batch at all, idle slots send no claim. It counts every statement the process sends
during the idle window (SQLAlchemy's cursor executions, plus BEGIN and COMMIT of every
transaction that is not autocommit) and, from the server's side, the database's committed
transactions per second of the process's whole life, start-up and shutdown included
(`pg_stat_database.xact_commit`, read once the process's connections closed, which flushes
their statistics; autovacuum's transactions count too). Then it submits a one-item batch
`--latency-runs` times and times submission → claim (the item's state read every 5 ms).

    .venv/bin/python bench/idle.py [--slots 1,4,16] [--seconds 30] [--database-url URL]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

from batchcrop.app import App, build
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.settings import Settings
from batchcrop.worker.worker import WorkerOptions
from leases import State
from storage import LocalStore
from tests.images import write_photos
from tests.services import postgres

WARM_UP_SECONDS = 3.0
PROBE_SECONDS = 0.005
STATS_FLUSH_SECONDS = 1.5
SECRET = "bench-secret-0123456789"


@dataclass(frozen=True)
class Figures:
    statements_per_second: float
    transactions_per_second: float
    latencies_ms: list[float]


class Counted:
    """Counts the statements an engine sends from now on, BEGIN and COMMIT (or ROLLBACK) of
    each transaction that is not autocommit included."""

    def __init__(self, engine: sa.Engine) -> None:
        self.count = 0
        self._lock = threading.Lock()
        sa.event.listen(engine, "before_cursor_execute", self._seen)
        sa.event.listen(engine, "commit", self._ended)
        sa.event.listen(engine, "rollback", self._ended)

    def _seen(self, *args: Any) -> None:
        with self._lock:
            self.count += 1

    def _ended(self, conn: sa.Connection) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            with self._lock:
                self.count += 2


def _commits(admin: sa.Engine, name: str) -> int:
    with admin.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = :d"), {"d": name}
            ).scalar_one()
        )


def _request(source: Path) -> BatchRequest:
    return BatchRequest(
        items=(ItemRequest(source=str(source), ref="one"),),
        spec=RenderSpec(ratios=(Ratio.parse("1:1"),), max_side=200),
        deadline_seconds=3600,
        max_attempts=3,
    )


def _claim_latency_ms(app: App, source: Path) -> float:
    status, _ = app.batches.submit(_request(source))
    submitted = time.monotonic()
    while True:
        items = app.leases.items(status["id"], limit=1)
        if items and items[0].state is not State.QUEUED:
            return (time.monotonic() - submitted) * 1000
        time.sleep(PROBE_SECONDS)


@dataclass(frozen=True)
class Fleet:
    """One configuration: a database of its own, a folder, and how the worker waits."""

    admin: sa.Engine
    name: str
    url: str
    root: Path
    slots: int
    wakeups: bool
    fallback: float

    def lifetime(
        self, idle_seconds: float, latency_runs: int = 0
    ) -> tuple[float, float, list[float]]:
        """Start a worker beside an open batch with nothing to claim (its one item held by
        another worker: a batch's tail), let it idle `idle_seconds` after the warm-up (then
        time `latency_runs` claims), stop it and close every connection; return the
        database's committed transactions per second of the whole lifetime, the statements
        per second the process sent during the idle window, and the claim latencies."""
        settings = Settings(
            database_url=self.url,
            store=f"file://{self.root / 'store'}",
            callback_secret=SECRET,
            fallback_poll_seconds=self.fallback,
        )
        app = build(settings)
        (held,) = write_photos(self.root / "held", 1, size=(400, 300))
        status, _ = app.batches.submit(_request(held))
        assert app.leases.claim("another-worker", 1, group_ids=[status["id"]])
        before, born = _commits(self.admin, self.name), time.monotonic()
        if not self.wakeups:
            app.wakeups.listening = False  # as before: nothing listens, everything polls
        worker = app.worker(
            LocalStore(self.root / "store"),
            WorkerOptions(concurrency=self.slots, fallback_poll_seconds=self.fallback),
        )
        worker.start_presence()
        worker.start()
        time.sleep(WARM_UP_SECONDS)
        counted = Counted(app.engine)
        started = time.monotonic()
        time.sleep(idle_seconds)
        statements = counted.count / (time.monotonic() - started)
        (source,) = write_photos(self.root / "src", 1, size=(400, 300))
        latencies = [_claim_latency_ms(app, source) for _ in range(latency_runs)]
        worker.stop()
        worker.join(30)
        worker.retire(forget=True)
        app.close()
        lived = time.monotonic() - born
        time.sleep(STATS_FLUSH_SECONDS)  # the closed backends' statistics reach the view
        return (_commits(self.admin, self.name) - before) / lived, statements, latencies


def measure(
    admin_url: str, slots: int, *, wakeups: bool, seconds: float, runs: int, fallback: float
) -> Figures:
    """One configuration on a database of its own: statements/s and transactions/s from one
    idle lifetime, latencies from another."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"bench_idle_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            setup = build(Settings(database_url=url))
            setup.upgrade()
            setup.close()
            fleet = Fleet(admin, name, url, Path(tmp), slots, wakeups, fallback)
            transactions, statements, _ = fleet.lifetime(seconds)
            _, _, latencies = fleet.lifetime(0.0, runs)
        return Figures(statements, transactions, latencies)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> int:
    """Measure each slot count polling and with wake-ups; print them side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", default="1,4,16", help="comma-separated slot counts")
    parser.add_argument("--seconds", type=float, default=30.0, help="idle window per run")
    parser.add_argument("--latency-runs", type=int, default=5)
    parser.add_argument("--fallback-poll-seconds", type=float, default=30.0)
    parser.add_argument("--database-url", help="a PostgreSQL server to create databases on")
    args = parser.parse_args()
    admin_url = args.database_url or postgres.ensure()
    print(
        f"idle {args.seconds:g} s per run; claim latency: median (max) of {args.latency_runs}; "
        f"wake-ups poll every {args.fallback_poll_seconds:g} s as a fallback"
    )
    print(
        f"{'slots':>5} | {'polling stmt/s':>14} {'xact/s':>7} {'claim ms':>15} | "
        f"{'wake-ups stmt/s':>15} {'xact/s':>7} {'claim ms':>15}"
    )
    for slots in (int(s) for s in args.slots.split(",")):
        row = []
        for wakeups in (False, True):
            f = measure(
                admin_url,
                slots,
                wakeups=wakeups,
                seconds=args.seconds,
                runs=args.latency_runs,
                fallback=args.fallback_poll_seconds,
            )
            latency = f"{statistics.median(f.latencies_ms):.0f} ({max(f.latencies_ms):.0f})"
            row.append(
                f"{f.statements_per_second:>14.2f} {f.transactions_per_second:>7.2f} {latency:>15}"
            )
        print(f"{slots:>5} | {row[0]} | {row[1].rjust(33)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

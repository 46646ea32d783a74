"""An outage is not a failure and strands nothing (docs/design.md §3, C', E', G''; ADR 0027):
an ending that meets a database outage is retried by the holder of the result, a store outage
does not use up `max_attempts`, and a lease no slot works on is released within seconds."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.documents import Derivative, Preview
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.worker.attempts import Attempts, Outcome
from batchcrop.worker.presence import Presence
from batchcrop.worker.worker import WorkerOptions
from leases import (
    NOT_IN_FLIGHT,
    RELEASED,
    TERMINAL,
    Claim,
    DatabaseUnavailable,
    HeldLease,
    LeaseManager,
    State,
)
from storage import LocalStore, S3Settings, S3Store
from tests.apps import app_factory
from tests.cli.test_cli import free_port
from tests.images import write_photos
from tests.services.proxy import FaultProxy

_T = TypeVar("_T")

# After the database answers again, the retried commit lands within the retry's longest pause
# (2 s) plus slack for a loaded 2-core machine.
COMMIT_AFTER_OUTAGE_SECONDS = 5.0
SHORT_BUSY_TIMEOUT_MS = 100
RUN_TIMEOUT_SECONDS = 120.0


def _submit(app: App, tmp_path: Path, n: int = 1, *, max_attempts: int = 3) -> str:
    sources = write_photos(tmp_path / "src", n, size=(400, 300))
    request = BatchRequest(
        items=tuple(ItemRequest(source=str(p)) for p in sources),
        spec=RenderSpec(ratios=(Ratio(1, 1),), max_side=64),
        deadline_seconds=3600.0,
        max_attempts=max_attempts,
    )
    status, _ = app.batches.submit(request)
    return str(status["id"])


def _sample(app: App, name: str, **labels: str) -> float | None:
    return app.metrics.registry.get_sample_value(name, labels)


class CutAtCommit(Attempts):
    """The real endings, with a fault started the moment the success is committed."""

    def __init__(self, leases: LeaseManager, cut: Any) -> None:
        super().__init__(leases)
        self._cut = cut
        self.restored_at = 0.0

    def succeed(
        self,
        claim: Claim,
        manifest: Sequence[Derivative],
        preview: Preview | None = None,
        *,
        note: str | None = None,
        held: HeldLease | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome:
        self.restored_at = self._cut()
        return super().succeed(claim, manifest, preview, note=note, held=held, stop=stop)


@pytest.fixture
def pg_proxy(postgres_url: str) -> Iterator[tuple[FaultProxy, str]]:
    """A fault proxy in front of the test PostgreSQL, and the database URL through it."""
    url = sa.make_url(postgres_url)
    proxy = FaultProxy(str(url.host), int(url.port or 5432), http=False).start()
    try:
        yield (
            proxy,
            url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False),
        )
    finally:
        proxy.stop()


def _commit_through(app: App, tmp_path: Path, cut: Any) -> tuple[Outcome, float, str]:
    """One item processed by a worker whose commit meets `cut`; the outcome, the seconds from
    the end of the fault to the attempt's end, and the item id."""
    batch_id = _submit(app, tmp_path)
    worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[batch_id]))
    attempts = CutAtCommit(app.leases, cut)
    worker.attempts = attempts
    (claim,) = app.leases.claim(worker.worker_id, 1, group_ids=[batch_id])
    outcome = worker.process(claim)
    return outcome, time.monotonic() - attempts.restored_at, claim.item_id


@pytest.mark.postgres
@pytest.mark.parametrize(
    "outage_seconds",
    [0.3, 15.0, pytest.param(120.0, marks=pytest.mark.slow, id="2min")],
)
def test_a_commit_cut_off_by_a_postgresql_outage_lands_once_it_is_back(
    pg_proxy: tuple[FaultProxy, str], tmp_path: Path, outage_seconds: float
) -> None:
    """Every PostgreSQL connection cut at the commit and refused for a while: the holder of
    the result commits it within seconds of the database answering, not at its lease's end."""
    proxy, proxied = pg_proxy

    def cut() -> float:
        proxy.outage(outage_seconds)
        return time.monotonic() + outage_seconds

    with app_factory(database_url=proxied) as make:
        app = make()
        outcome, after, item_id = _commit_through(app, tmp_path, cut)
        item = app.leases.item(item_id)
    print(f"\ncommit landed {after:.2f} s after a {outage_seconds:g} s outage")
    assert outcome == Outcome.SUCCEEDED
    assert item is not None
    assert (item.state, item.attempt) == (State.SUCCEEDED, 1)
    assert after < COMMIT_AFTER_OUTAGE_SECONDS


@pytest.mark.parametrize("busy_seconds", [0.3, 15.0])
def test_a_commit_that_finds_sqlite_busy_lands_once_the_lock_is_free(
    sqlite_url: str, tmp_path: Path, busy_seconds: float
) -> None:
    """Another process holds SQLite's write lock past the busy timeout when the success is
    committed: the commit is tried again and lands soon after the lock is released."""
    path = sa.make_url(sqlite_url).database
    assert path is not None

    def cut() -> float:
        locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        locker.execute("BEGIN IMMEDIATE")
        threading.Timer(busy_seconds, lambda: (locker.rollback(), locker.close())).start()
        return time.monotonic() + busy_seconds

    with app_factory(database_url=sqlite_url) as make:
        app = make()

        # The engine's own busy timeout (30 s) would simply wait out these locks.
        @sa.event.listens_for(app.engine, "connect")
        def short_busy_timeout(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute(f"PRAGMA busy_timeout={SHORT_BUSY_TIMEOUT_MS}")

        app.engine.dispose()
        outcome, after, item_id = _commit_through(app, tmp_path, cut)
        item = app.leases.item(item_id)
    assert outcome == Outcome.SUCCEEDED
    assert item is not None
    assert (item.state, item.attempt) == (State.SUCCEEDED, 1)
    assert after < COMMIT_AFTER_OUTAGE_SECONDS


def test_an_ending_whose_lease_ran_out_during_the_outage_is_database_unavailable(
    pg_proxy: tuple[FaultProxy, str], tmp_path: Path
) -> None:
    """An outage longer than the lease: the ending gives up when the lease is gone by its own
    clock, and the item is left to the reaper (the fenced path), nothing committed."""
    proxy, proxied = pg_proxy

    def cut() -> float:
        proxy.outage(6.0)
        return time.monotonic() + 6.0

    with app_factory(database_url=proxied, lease_seconds=2.0) as make:
        app = make()
        outcome, after, item_id = _commit_through(app, tmp_path, cut)
        time.sleep(max(0.0, -after) + 0.5)  # the database answers again
        item = app.leases.item(item_id)
    assert outcome == Outcome.DATABASE_UNAVAILABLE
    assert item is not None
    assert (item.state, item.attempt) == (State.IN_PROGRESS, 1)


def test_a_lease_no_slot_works_on_is_released_at_the_second_refresh(
    app: App, tmp_path: Path
) -> None:
    """A live worker holding two leases, one in a slot's hands: the other goes back to
    `queued` (attempt not counted, event `not_in_flight`) at the refresh after the one that
    first found it, and the one in flight stays held."""
    batch_id = _submit(app, tmp_path, n=2)
    working, dropped = app.leases.claim("w", 2, group_ids=[batch_id])
    not_in_flight: list[int] = []
    presence = Presence(
        app.leases,
        "w",
        {},
        working=lambda held: {working.lease_token},
        on_not_in_flight=not_in_flight.append,
    )

    presence.beat()
    first = app.leases.item(dropped.item_id)
    presence.beat()

    assert first is not None
    assert first.state == State.IN_PROGRESS
    item = app.leases.item(dropped.item_id)
    assert item is not None
    assert (item.state, item.attempt) == (State.QUEUED, 0)
    kept = app.leases.item(working.item_id)
    assert kept is not None
    assert kept.state == State.IN_PROGRESS
    events = app.leases.events(batch_id, item_id=dropped.item_id, limit=10)
    assert events[-1].reason == NOT_IN_FLIGHT
    assert not_in_flight == [1, 1]


def test_a_running_worker_releases_its_leases_no_slot_works_on_within_seconds(
    tmp_path: Path,
) -> None:
    """A lease held under a running worker's id but by none of its slots (a slot that gave
    up) is back in `queued` within two registry refreshes; a lease of a group that is not a
    batch (a callback delivery, which the deliverer holds under the same id) stays held."""
    with app_factory(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", worker_timeout_seconds=1.2
    ) as make:
        app = make()
        batch_id = _submit(app, tmp_path)
        worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[]))
        (claim,) = app.leases.claim(worker.worker_id, 1, group_ids=[batch_id])
        app.leases.create_group(
            "not-a-batch", deadline_seconds=600.0, max_attempts=3, items=[("d1", {})]
        )
        (delivery,) = app.leases.claim(worker.worker_id, 1, group_ids=["not-a-batch"])
        started = time.monotonic()
        worker.start_presence()
        try:
            while (item := app.leases.item(claim.item_id)) is not None and item.state is (
                State.IN_PROGRESS
            ):
                assert time.monotonic() - started < 5.0, "the lease was not released"
                time.sleep(0.05)
            time.sleep(2 * app.leases.worker_timeout_seconds / 6)  # two more refreshes
            held = app.leases.item(delivery.item_id)
            (row,) = app.leases.workers()
        finally:
            worker.retire(forget=True)
    assert item is not None
    assert (item.state, item.attempt) == (State.QUEUED, 0)
    assert held is not None
    assert held.state == State.IN_PROGRESS
    assert (row.in_flight, row.held_not_in_flight) == (1, 0)
    assert _sample(app, "batchcrop_leases_held_not_in_flight") == 0.0


def test_an_operator_releases_a_batch_s_leases_no_slot_works_on(app: App, tmp_path: Path) -> None:
    """The registry shows a lease held but not in flight; releasing the batch on purpose
    puts it back in `queued` with an event naming who and why, and leaves the one in flight."""
    batch_id = _submit(app, tmp_path, n=2)
    working, dropped = app.leases.claim("w", 2, group_ids=[batch_id])
    time.sleep(1.1)  # claimed well before the refresh that leaves it out
    app.leases.worker_seen("w", {"pid": 1}, in_flight=[working.item_id])

    (row,) = app.leases.workers()
    released = app.leases.release_not_in_flight(batch_id, by="alice", why="stuck after failover")

    assert (row.leases_held, row.in_flight, row.held_not_in_flight) == (2, 1, 1)
    assert "in_flight" not in row.info
    assert released == 1
    item = app.leases.item(dropped.item_id)
    assert item is not None
    assert (item.state, item.attempt) == (State.QUEUED, 0)
    event = app.leases.events(batch_id, item_id=dropped.item_id, limit=10)[-1]
    assert (event.reason, event.message) == (RELEASED, "released by alice: stuck after failover")
    kept = app.leases.item(working.item_id)
    assert kept is not None
    assert kept.state == State.IN_PROGRESS


@pytest.fixture
def s3_behind_proxy() -> Iterator[tuple[FaultProxy, S3Store]]:
    """A moto S3 server on loopback, a fault proxy in front, and a bucket through it with an
    S3 client that gives up quickly (two tries, half-second timeouts)."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415  (moto is a test dependency)

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    proxy = FaultProxy("127.0.0.1", port).start()
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    settings = S3Settings(
        endpoint_url=f"http://127.0.0.1:{proxy.port}",
        region="us-east-1",
        total_max_attempts=2,
        connect_timeout_seconds=0.5,
        read_timeout_seconds=0.5,
    )
    client = settings.client(session)
    client.create_bucket(Bucket="outages")
    try:
        yield proxy, S3Store("outages", client=client)
    finally:
        proxy.stop()
        server.stop()


def test_a_store_outage_longer_than_the_retries_fails_no_item(
    s3_behind_proxy: tuple[FaultProxy, S3Store],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """S3 down for 8 s while a batch with ONE attempt per item runs: no item fails, the
    store's breaker opens and closes once (one log line each), and the outage counter, there
    at 0 from the start, counts it."""
    proxy, store = s3_behind_proxy
    caplog.set_level(logging.INFO, logger="batchcrop")
    with app_factory(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", store=store.url) as make:
        app = make()
        assert _sample(app, "batchcrop_outages_total", dependency="store") == 0.0
        assert _sample(app, "batchcrop_circuit_open", dependency="store") == 0.0
        batch_id = _submit(app, tmp_path, n=6, max_attempts=1)
        worker = app.worker(
            store,
            WorkerOptions(
                concurrency=2,
                batch_ids=[batch_id],
                idle_sleep_seconds=0.05,
                reaper_interval_seconds=0.5,
            ),
        )
        proxy.outage(8.0)
        worker.start()
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        try:
            while (status := app.batches.status(batch_id))["state"] not in TERMINAL:
                assert time.monotonic() < deadline, f"batch not terminal in time: {status}"
                time.sleep(0.1)
        finally:
            worker.stop()
            worker.join(30)
        items = app.leases.items(batch_id, limit=10)
        put_off = _sample(app, "batchcrop_attempts_put_off_total", category="storage_unavailable")
        outages = _sample(app, "batchcrop_outages_total", dependency="store")
        still_open = _sample(app, "batchcrop_circuit_open", dependency="store")
    assert [item.state for item in items] == [State.SUCCEEDED] * 6
    assert put_off is not None
    assert put_off >= 1
    assert (outages, still_open) == (1.0, 0.0)
    said = [r.getMessage() for r in caplog.records]
    started = [m for m in said if "outage_started" in m and "store" in m]
    ended = [m for m in said if "outage_ended" in m and "store" in m]
    assert (len(started), len(ended)) == (1, 1)


@pytest.mark.postgres
@pytest.mark.parametrize("deliver", [False, True], ids=["commit-dropped", "answer-lost"])
def test_a_commit_the_proxy_cuts_at_its_commit_lands_once(
    pg_proxy: tuple[FaultProxy, str], tmp_path: Path, deliver: bool
) -> None:
    """The proxy cuts the connection at the COMMIT of an item's success (dropping it, or
    letting it through and losing the answer) and PostgreSQL is unreachable for 0.3 s: the
    item ends `succeeded` once, by its own attempt (an answer lost is recognised, not
    reported as a lost lease)."""
    proxy, proxied = pg_proxy
    with app_factory(database_url=proxied) as make:
        app = make()
        batch_id = _submit(app, tmp_path)
        worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[batch_id]))
        (claim,) = app.leases.claim(worker.worker_id, 1, group_ids=[batch_id])
        fired = proxy.cut_at(b"previews/", b"COMMIT", lambda: proxy.outage(0.3), deliver=deliver)
        outcome = worker.process(claim)
        # The proxy's outage can outlast the attempt (its timer starts at the cut, and a busy
        # machine runs it late), and the pool may hold connections it cut: the test's own read
        # is retried as a reader after an outage would be.
        events = _read_when_back(
            lambda: app.leases.events(batch_id, item_id=claim.item_id, limit=10)
        )
    assert fired.is_set()
    assert outcome == Outcome.SUCCEEDED
    assert [e.to_state for e in events] == [State.IN_PROGRESS, State.SUCCEEDED]


def _read_when_back(read: Callable[[], _T], within_seconds: float = 10.0) -> _T:
    """`read()`, tried again while the database is unavailable, for at most `within_seconds`."""
    deadline = time.monotonic() + within_seconds
    while True:
        try:
            return read()
        except DatabaseUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

"""The composition root: the one place that builds engines, clients and services from settings."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlalchemy as sa

from batchcrop.batches.service import BatchService
from batchcrop.batches.serving import read_fleet_stats, read_served_queue
from batchcrop.crop.budget import MIB, MemoryBudget
from batchcrop.crop.limits import IMAGE_SUFFIXES
from batchcrop.logs import log_event
from batchcrop.renders.defaults import (
    DECODE_DEADLINE_SECONDS,
    DECODE_PROCESSES,
    RENDER_DEADLINE_SECONDS,
    child_memory_limit_bytes,
)
from batchcrop.settings import RENAMED_ENV, Settings, SettingsError, redact_url
from leases import (
    DatabaseRefused,
    DatabaseUnavailable,
    LeaseManager,
    SchemaMissing,
    Wakeups,
    make_engine,
)
from leases.executor import driver_reason, is_refusal
from storage import ObjectStore, S3Settings, SourceReader, open_store

if TYPE_CHECKING:
    from batchcrop.callbacks.deliverer import Deliverer
    from batchcrop.db.revisions import History
    from batchcrop.metrics import Metrics
    from batchcrop.renders.pool import RenderPool
    from batchcrop.traces import Traces
    from batchcrop.worker.worker import Worker, WorkerOptions

# The migrations (Alembic), the worker (the crop engine: NumPy, Pillow, OpenCV), the callback
# deliverer (httpx) and the metrics (prometheus_client) are imported where first needed, so that
# reading commands start fast (`bench/startup.py`).


_STATEMENT_STARTS = "batchcrop_statement_starts"
"""The connection's `info` key holding its statements' start times (a stack: one per cursor)."""


def _time_statements(engine: sa.Engine, observe: Callable[[float], None]) -> None:
    """Tell `observe` the wall time of each statement `engine` executes (a latency metric)."""

    def before(conn: sa.Connection, *_: object) -> None:
        conn.info.setdefault(_STATEMENT_STARTS, []).append(time.monotonic())

    def after(conn: sa.Connection, *_: object) -> None:
        starts = conn.info.get(_STATEMENT_STARTS)
        if starts:
            observe(time.monotonic() - starts.pop())

    sa.event.listen(engine, "before_cursor_execute", before)
    sa.event.listen(engine, "after_cursor_execute", after)


@dataclass(frozen=True)
class WorkRequest:
    """How a command asks for a worker (`App.worker_for`); the rest of the worker's options come
    from the settings (the reaper interval, the source size limit) and the database's label."""

    concurrency: int
    batch_ids: Sequence[str] | None = None
    """Only these batches, each named by its id or a prefix only it starts with (`NoSuchBatch`,
    `AmbiguousId` otherwise); None: every open batch of the worker's store."""
    idle_sleep_seconds: float | None = None
    """The pause of a slot that found nothing to claim; None: `BATCHCROP_IDLE_POLL_SECONDS`."""
    force_render: bool = False
    """Render every item even when its outputs are all stored (`--force`; docs/design.md §5)."""
    render_processes: int = 0
    """Render child processes (`batchcrop.renders.RenderPool`); 0 renders in the slots' threads."""
    render_deadline_seconds: float = RENDER_DEADLINE_SECONDS
    """A render in a child past this is killed and fails `render_timeout`."""
    trusted_sources: bool = False
    """Sources are read as named (`run`, whose operator named them), not confined again."""
    deliver: bool = True
    """The worker also delivers completion callbacks (not `run`, a one-shot job)."""


@dataclass
class App:
    """Everything a command needs, wired once."""

    settings: Settings
    engine: sa.Engine
    leases: LeaseManager
    batches: BatchService
    decode_budget: MemoryBudget = field(init=False)
    decode_deadline_seconds: float = field(default=DECODE_DEADLINE_SECONDS, init=False)
    """How long one of the API's decodes may run (`decodes`), read when the pool is made."""
    _metrics: Metrics | None = field(default=None, init=False, repr=False)
    _wakeups: Wakeups | None = field(default=None, init=False, repr=False)
    _traces: Traces | None = field(default=None, init=False, repr=False)
    _decodes: RenderPool | None = field(default=None, init=False, repr=False)
    _decodes_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.decode_budget = MemoryBudget(self.settings.decode_memory_mib * MIB)

    @property
    def decodes(self) -> RenderPool:
        """The API's decode children (`DECODE_PROCESSES` of them, docs/design.md §5, previews),
        made on first use; they start with the first decode and end with `close`."""
        with self._decodes_lock:
            if self._decodes is None:
                from batchcrop.renders.pool import RenderPool  # noqa: PLC0415  (the engine)

                self._decodes = RenderPool(
                    DECODE_PROCESSES,
                    deadline_seconds=self.decode_deadline_seconds,
                    memory_limit_bytes=child_memory_limit_bytes(
                        self.decode_budget.capacity_bytes, self.settings.max_source_bytes
                    ),
                )
            return self._decodes

    @property
    def wakeups(self) -> Wakeups:
        """This process's one wake-up listener (docs/design.md §3, wake-ups), made on first
        use and started by the first worker or deliverer that starts."""
        if self._wakeups is None:
            self._wakeups = Wakeups(self.engine)
        return self._wakeups

    @property
    def traces(self) -> Traces:
        """This process's tracing (`batchcrop.traces`), made on first use: `NO_TRACES` unless
        `BATCHCROP_TRACES` is on; then `TracesUnavailable` without the `traces` extra."""
        if self._traces is None:
            from batchcrop import __version__  # noqa: PLC0415  (see the imports)
            from batchcrop.traces import open_traces  # noqa: PLC0415

            self._traces = open_traces(self.settings.traces, service_version=__version__)
            if self._traces.enabled:
                log_event("traces_exported", via="otlp/http")
        return self._traces

    @property
    def metrics(self) -> Metrics:
        """This process's metrics registry, made on first use."""
        if self._metrics is None:
            from batchcrop.metrics import Metrics  # noqa: PLC0415  (see the imports)

            self._metrics = Metrics(
                queue=self.leases.queue, queue_by_store=lambda: read_served_queue(self.leases)
            )
            self._metrics.watch_fleet(lambda: read_fleet_stats(self.leases))
            _time_statements(self.engine, self._metrics.database_statement_seconds.observe)
        return self._metrics

    @property
    def poll_margin_seconds(self) -> float:
        """lease + one reaper interval: how long past its deadline a batch can still move."""
        return self.settings.lease_seconds + self.settings.reaper_interval_seconds

    def require_database(self, *, creates: bool = False) -> None:
        """Raise `NoDatabaseFile` when the SQLite database file does not exist, before anything
        connects (connecting would create an empty one): for the commands that only read or act
        on batches, which never create a database (docs/design.md §7, exit codes). For those
        that do (`creates`), when the folder the file would go in does not exist (SQLite's own
        words, "unable to open database file", name neither)."""
        url = self.engine.url
        if url.get_backend_name() != "sqlite":
            return
        path = os.path.abspath(url.database or "")
        if os.path.isdir(path):
            raise NoDatabaseFile(
                f"the database {path} is a folder: --database-url (BATCHCROP_DATABASE_URL) names "
                "the SQLite file, e.g. sqlite:///batchcrop.db"
            )
        if creates:
            if not os.path.isdir(os.path.dirname(path)):
                raise NoDatabaseFile(
                    f"cannot create the database {path}: the folder {os.path.dirname(path)} "
                    "does not exist"
                )
            return
        if not os.path.exists(url.database or ""):
            raise NoDatabaseFile(
                f"no database at {os.path.abspath(url.database or '')}: run this where the "
                "database is or pass --database-url (BATCHCROP_DATABASE_URL); `batchcrop run`, "
                "`submit` and `db upgrade` create one"
            )

    def database_label(self) -> str:
        """Where the database is, for logs: dialect, host, port and name, or the SQLite file;
        never the user or password."""
        url = self.engine.url
        if url.get_backend_name() == "sqlite":
            return f"sqlite:///{url.database or ''}"
        port = f":{url.port}" if url.port else ""
        return f"{url.get_backend_name()}://{url.host or ''}{port}/{url.database or ''}"

    def s3_settings(self) -> S3Settings:
        """boto3 client settings for the store and for s3:// sources."""
        return S3Settings(
            endpoint_url=self.settings.s3_endpoint_url,
            request_checksum_calculation=self.settings.s3_request_checksum,
        )

    def open_store(self, url: str | None = None, *, check: bool = True) -> ObjectStore:
        """The derivative store; `check` verifies reachability and put-if-absent support."""
        store = open_store(url or self.settings.store, s3=self.s3_settings())
        if check:
            store.check()
        return store

    def source_reader(self, *, trusted: bool) -> SourceReader:
        """Sources: the CLI trusts its operator; the API confines to the configured roots."""
        roots = None if trusted else list(self.settings.source_roots)
        return SourceReader(roots, s3=self.s3_settings(), suffixes=IMAGE_SUFFIXES)

    def stored_source_reader(self) -> SourceReader:
        """For reading sources already stored on items (workers, thumbnails).

        They were confined to the roots when submitted through the API, but a path can change
        under a root afterwards (a swapped symlink), so with roots configured every read is
        confined again. Without roots the API accepts no source: items came from the CLI.
        """
        return self.source_reader(trusted=not self.settings.source_roots)

    def upgrade(self) -> None:
        """Create or migrate every table (lease engine first, then ours)."""
        from batchcrop.db import migrations  # noqa: PLC0415  (see the imports)
        from leases.migrate import upgrade as upgrade_leases  # noqa: PLC0415

        with _database_errors():
            upgrade_leases(self.engine)
            migrations.upgrade(self.engine)

    def histories(self) -> list[History]:
        """Where both migration histories stand against this version (reads only)."""
        from batchcrop.db.revisions import histories  # noqa: PLC0415  (see the imports)

        with _database_errors():
            return histories(self.engine)

    def check_schema(self) -> list[History]:
        """The start-up check of `worker` and `serve` (they do not migrate by default):
        `SchemaMissing` on a database without batchcrop tables, `SchemaBehind` when either
        history is behind this version's head (exit 3, naming `batchcrop db upgrade`). A schema
        a newer batchcrop migrated is accepted with a warning: during a rolling deploy the old
        processes keep running on it (migrations are additive; docs/operations.md, upgrades)."""
        from batchcrop.db.revisions import (  # noqa: PLC0415  (see the imports)
            Position,
            SchemaBehind,
            ahead_message,
            behind_message,
            is_empty,
        )

        found = self.histories()
        if is_empty(found):
            raise SchemaMissing("no batchcrop tables")
        positions = {h.position for h in found}
        if positions & {Position.BEHIND, Position.MISSING}:
            raise SchemaBehind(behind_message(found))
        if Position.AHEAD in positions:
            log_event("schema_newer_than_code", level=logging.WARNING, detail=ahead_message(found))
        return found

    def prepare_schema(self) -> None:
        """The schema step of `run`, `submit`, `batches` and `prune`: on SQLite (one machine's
        database, the quickstart's default) create or migrate it, unless it stands at this
        version's heads (`revisions.at_head`: then Alembic, a third of the start-up, is not even
        imported); elsewhere create the tables of an empty database (nothing can be running on
        it), else only check like `worker`."""
        from batchcrop.db.revisions import at_head, is_empty  # noqa: PLC0415  (see the imports)

        if self.engine.url.get_backend_name() == "sqlite":
            with _database_errors():
                current = at_head(self.engine)
            if not current:
                self.upgrade()
            return
        if is_empty(self.histories()):
            self.upgrade()
        else:
            self.check_schema()

    def worker(
        self,
        store: ObjectStore,
        options: WorkerOptions,
        *,
        trusted_sources: bool = False,
        deliver: bool = True,
    ) -> Worker:
        """A worker wired to this app's database and the given store; `deliver`: it also
        delivers completion callbacks (not `run`, a one-shot job).

        Sources were confined when submitted through the API, but a path can change under a
        root afterwards (a swapped symlink): so with source roots configured, the worker checks
        them again at read time. `trusted_sources` is for `run`, whose operator named them.
        """
        from batchcrop.worker.attempts import Attempts  # noqa: PLC0415  (see the imports)
        from batchcrop.worker.worker import Worker  # noqa: PLC0415

        return Worker(
            deliverer=self.deliverer if deliver else None,
            leases=self.leases,
            batches=self.batches,
            attempts=Attempts(self.leases),
            store=store,
            sources=self.source_reader(trusted=True)
            if trusted_sources
            else self.stored_source_reader(),
            metrics=self.metrics,
            options=options,
            decode_budget=self.decode_budget,
            wakeups=self.wakeups,
            traces=self.traces,
        )

    def worker_for(self, store: ObjectStore, work: WorkRequest) -> Worker:
        """A worker doing what `work` asks, on the given store, its batch ids resolved."""
        from batchcrop.worker.worker import WorkerOptions  # noqa: PLC0415  (see the imports)

        batch_ids = (
            None
            if work.batch_ids is None
            else [self.batches.resolve_id(batch_id) for batch_id in work.batch_ids]
        )
        idle = work.idle_sleep_seconds
        options = WorkerOptions(
            concurrency=work.concurrency,
            batch_ids=batch_ids,
            reaper_interval_seconds=self.settings.reaper_interval_seconds,
            max_source_bytes=self.settings.max_source_bytes,
            idle_sleep_seconds=self.settings.idle_poll_seconds if idle is None else idle,
            fallback_poll_seconds=self.settings.fallback_poll_seconds,
            force_render=work.force_render,
            render_processes=work.render_processes,
            render_deadline_seconds=work.render_deadline_seconds,
            store_max_concurrent=self.settings.store_max_concurrent,
            database=self.database_label(),
        )
        return self.worker(
            store, options, trusted_sources=work.trusted_sources, deliver=work.deliver
        )

    def deliverer(self, worker_id: str) -> Deliverer | None:
        """The callback deliverer of a worker or `serve` (not started), or None when this
        process has no `BATCHCROP_CALLBACK_SECRET`: its deliveries wait for a process that has."""
        from batchcrop.callbacks.deliverer import Deliverer  # noqa: PLC0415  (see the imports)
        from batchcrop.callbacks.delivery import delivery_leases  # noqa: PLC0415

        secret = self.settings.callback_secret
        if secret is None:
            log_event("callbacks_not_delivered_here", reason="no BATCHCROP_CALLBACK_SECRET")
            return None
        leases = delivery_leases(
            self.engine,
            retry_seconds=self.settings.callback_retry_seconds,
            worker_timeout_seconds=self.settings.worker_timeout_seconds,
        )
        return Deliverer(
            leases=leases,
            open_deliveries=self.batches.open_deliveries,
            secret=secret,
            hosts=self.settings.callback_hosts,
            worker_id=worker_id,
            poll_seconds=self.settings.idle_poll_seconds,
            fallback_poll_seconds=self.settings.fallback_poll_seconds,
            wakeups=self.wakeups,
            traces=self.traces,
        )

    def close(self) -> None:
        """Stop the wake-up listener (waiting until its connection is closed) and the decode
        children, export the spans still buffered, then release the pooled connections. Whatever
        else uses the engine must have ended first: a pooled connection still checked out when
        the pool is disposed is never closed, only dropped with the old pool."""
        if self._wakeups is not None:
            self._wakeups.stop()
        with self._decodes_lock:
            decodes, self._decodes = self._decodes, None
        if decodes is not None:
            decodes.close()
        if self._traces is not None:
            self._traces.close()  # the spans still buffered are exported
        self.engine.dispose()


@contextmanager
def _database_errors() -> Iterator[None]:
    """A driver error while migrating or reading the schema's revision, as ours."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        # The driver's first line says why (refused, locked, timed out); it carries no password.
        if is_refusal(exc):
            raise DatabaseRefused(f"the database refused: {driver_reason(exc)}") from exc
        raise DatabaseUnavailable(f"database unreachable: {driver_reason(exc)}") from exc


class NoDatabaseFile(DatabaseRefused):
    """The SQLite database file does not exist, and the command never creates one (exit 3)."""


POSTGRES_DRIVER = "postgresql+psycopg"
"""The PostgreSQL driver batchcrop ships with (psycopg 3)."""


def database_url(text: str) -> str:
    """The SQLAlchemy URL for `text`, checked: `postgres://` and `postgresql://` (what people
    paste from their provider) mean psycopg 3, the driver batchcrop ships; an unparsable URL or
    an unknown driver is a `SettingsError` naming it (the password never shown)."""
    scheme, sep, rest = text.partition("://")
    if sep and scheme.lower() in ("postgres", "postgresql"):
        text = f"{POSTGRES_DRIVER}://{rest}"
    try:
        url = sa.make_url(text)
        url.get_dialect()
    # NoSuchModuleError is an ArgumentError: it goes first.
    except (sa.exc.NoSuchModuleError, ImportError):
        raise SettingsError(
            f"unknown database driver {scheme!r} in the database URL: use sqlite:///FILE or "
            "postgresql://USER@HOST/DATABASE"
        ) from None
    except sa.exc.ArgumentError:
        raise SettingsError(
            f"cannot parse the database URL {redact_url(text)!r}: use sqlite:///FILE or "
            "postgresql://USER@HOST/DATABASE (--database-url, BATCHCROP_DATABASE_URL)"
        ) from None
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        # An in-memory database lives and dies with one connection: nothing would be kept.
        raise SettingsError(
            f"the SQLite URL {redact_url(text)!r} names no database file: use sqlite:///FILE "
            "(relative to the current folder) or sqlite:////ABSOLUTE/PATH"
        )
    return text


def build(settings: Settings) -> App:
    """Wire the app from settings; touches no network until a command runs. Logs
    `setting_renamed` once for each former variable name the settings were read from."""
    for old in settings.renamed_env:
        log_event("setting_renamed", level=logging.WARNING, old=old, new=RENAMED_ENV[old])
    url = database_url(settings.database_url)
    try:
        engine = make_engine(url)
    except ImportError as exc:
        # A dialect whose driver module is not installed (postgresql+pg8000, say).
        raise SettingsError(
            f"the database driver of {redact_url(url)!r} is not installed ({exc.name}): use "
            "sqlite:///FILE or postgresql://USER@HOST/DATABASE"
        ) from None
    leases = LeaseManager(
        engine,
        lease_seconds=settings.lease_seconds,
        max_attempt_seconds=settings.max_attempt_seconds,
        worker_timeout_seconds=settings.worker_timeout_seconds,
    )
    batches = BatchService(
        leases,
        poll_margin_seconds=settings.lease_seconds + settings.reaper_interval_seconds,
        store=settings.store,
        callback_hosts=settings.callback_hosts,
    )
    # Completion callbacks: the outbox row is written by the transaction that ends a batch.
    leases.on_group_finished = batches.on_group_finished
    return App(settings=settings, engine=engine, leases=leases, batches=batches)

"""The composition root: the one place that builds engines, clients and services from settings."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from batchcrop import migrations
from batchcrop.attempts import Attempts
from batchcrop.batches import BatchService
from batchcrop.crop import IMAGE_SUFFIXES, MIB, MemoryBudget
from batchcrop.logs import log_event
from batchcrop.metrics import Metrics
from batchcrop.notify import Deliverer, delivery_leases
from batchcrop.settings import Settings
from batchcrop.worker import Worker, WorkerOptions
from leases import DatabaseUnavailable, LeaseManager, make_engine
from leases import upgrade as upgrade_leases
from storage import ObjectStore, S3Settings, SourceReader, open_store


@dataclass
class App:
    """Everything a command needs, wired once."""

    settings: Settings
    engine: sa.Engine
    leases: LeaseManager
    batches: BatchService
    metrics: Metrics = field(default_factory=Metrics)
    decode_budget: MemoryBudget = field(init=False)

    def __post_init__(self) -> None:
        self.decode_budget = MemoryBudget(self.settings.decode_memory_mib * MIB)

    @property
    def poll_margin_seconds(self) -> float:
        """lease + one reaper interval: how long past its deadline a batch can still move."""
        return self.settings.lease_seconds + self.settings.reaper_interval_seconds

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
        try:
            upgrade_leases(self.engine)
            migrations.upgrade(self.engine)
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            # The driver's first line says why (refused, locked, timed out); it carries no password.
            reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else ""
            raise DatabaseUnavailable(f"database unreachable: {reason}") from exc

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
        )

    def deliverer(self, worker_id: str) -> Deliverer | None:
        """The callback deliverer of a worker or `serve` (not started), or None when this
        process has no `BATCHCROP_NOTIFY_SECRET`: its deliveries wait for a process that has."""
        secret = self.settings.notify_secret
        if secret is None:
            log_event("callbacks_not_delivered_here", reason="no BATCHCROP_NOTIFY_SECRET")
            return None
        leases = delivery_leases(
            self.engine,
            retry_seconds=self.settings.notify_retry_seconds,
            worker_timeout_seconds=self.settings.worker_timeout_seconds,
        )
        return Deliverer(
            leases=leases,
            open_deliveries=self.batches.open_deliveries,
            secret=secret,
            hosts=self.settings.notify_hosts,
            worker_id=worker_id,
        )

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()


def build(settings: Settings) -> App:
    """Wire the app from settings; touches no network until a command runs."""
    engine = make_engine(settings.database_url)
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
        notify_hosts=settings.notify_hosts,
    )
    # Completion callbacks: the outbox row is written by the transaction that ends a batch.
    leases.on_group_finished = batches.on_group_finished
    return App(settings=settings, engine=engine, leases=leases, batches=batches)

"""Prometheus metrics (docs/design.md §7): one registry per process, built by the composition
root.

Besides this process's counters: the process and platform collectors, `batchcrop_build_info`,
and the queue gauges an autoscaler (KEDA, an HPA on external metrics) scales on, read from the
database at scrape time (at most once per `QUEUE_CACHE_SECONDS`). No `_created` series.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from batchcrop import __version__
from leases import UNFINISHED, QueueStats, State

# `_created` series double the number of series and no alert reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

QUEUE_CACHE_SECONDS = 2.0
"""Scrapes within this long of the last queue read reuse it (several scrapers, one read)."""

ITEM_DURATION_BUCKETS_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
OUTAGE_DEPENDENCIES = ("database", "store", "source")
"""The dependencies a worker has a circuit breaker for; their series exist from the start at 0."""
LATENCY_BUCKETS_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
"""Buckets of the store and database latency histograms: a millisecond to ten seconds."""


class Metrics:
    """The counters and histogram operators alert on; safe to share between threads."""

    def __init__(
        self,
        queue: Callable[[], QueueStats] | None = None,
        queue_by_store: Callable[[], StoreQueues] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        Info("batchcrop_build", "The running version of batchcrop.", registry=self.registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        if queue is not None:
            self.registry.register(QueueCollector(queue, queue_by_store))
        self.in_flight = Gauge(
            "batchcrop_items_in_flight",
            "Items this process is working on now (claimed, not yet ended).",
            registry=self.registry,
        )
        self.outages = Counter(
            "batchcrop_outages",
            "Outages this process met (the database, the store or a source stopped answering), "
            "counted once each from the first failure to the next success.",
            ["dependency"],
            registry=self.registry,
        )
        self.circuit_open = Gauge(
            "batchcrop_circuit_open",
            "1 while this worker's circuit breaker for the dependency is open (it does not "
            "claim), else 0.",
            ["dependency"],
            registry=self.registry,
        )
        for dependency in OUTAGE_DEPENDENCIES:
            # Exported at 0 from the start: an alert on increase() sees the first outage.
            self.outages.labels(dependency)
            self.circuit_open.labels(dependency).set(0)
        self.held_not_in_flight = Gauge(
            "batchcrop_leases_held_not_in_flight",
            "Leases this worker holds that none of its slots works on, at its last registry "
            "refresh (they are released at the next one).",
            registry=self.registry,
        )
        self.put_off = Counter(
            "batchcrop_attempts_put_off",
            "Attempts ended by a dependency's outage and put off without counting against "
            "max_attempts, by error category.",
            ["category"],
            registry=self.registry,
        )
        self.put_if_absent_hits = Counter(
            "batchcrop_put_if_absent_hits",
            "Derivative writes whose key already held the same bytes (an earlier attempt or "
            "batch wrote them); nothing was written.",
            registry=self.registry,
        )
        self.known_outputs = Counter(
            "batchcrop_known_outputs",
            "Items that succeeded from derivatives already stored with facts naming the same "
            "source, ratio and variant: their sources were read but not decoded or rendered.",
            registry=self.registry,
        )
        self.renders = Counter(
            "batchcrop_renders",
            "Items whose source was decoded and rendered.",
            registry=self.registry,
        )
        self.claims = Counter(
            "batchcrop_claims", "Items claimed by workers.", registry=self.registry
        )
        self.commits = Counter(
            "batchcrop_commits", "Items committed as succeeded.", registry=self.registry
        )
        self.lease_expirations = Counter(
            "batchcrop_lease_expirations",
            "Expired leases the reaper turned into retryable or failed items.",
            registry=self.registry,
        )
        self.retryable_failures = Counter(
            "batchcrop_retryable_failures",
            "Attempts that ended retryable, by error category.",
            ["category"],
            registry=self.registry,
        )
        self.terminal_failures = Counter(
            "batchcrop_terminal_failures",
            "Items that ended failed or abandoned, by error category.",
            ["category"],
            registry=self.registry,
        )
        self.lease_lost = Counter(
            "batchcrop_lease_lost",
            "Attempts dropped because their lease was lost (nothing written).",
            registry=self.registry,
        )
        self.derivative_bytes_differ = Counter(
            "batchcrop_derivative_bytes_differ",
            "Derivative writes that found their key holding other bytes of the same derivative "
            "(same source, ratio and variant: another CPU's rounding); the stored one stands.",
            registry=self.registry,
        )
        self.polls_not_modified = Counter(
            "batchcrop_poll_not_modified",
            "Status polls answered 304 Not Modified.",
            registry=self.registry,
        )
        self.item_duration = Histogram(
            "batchcrop_item_duration_seconds",
            "Wall time of one attempt, claim to final transition.",
            ["outcome"],
            buckets=ITEM_DURATION_BUCKETS_SECONDS,
            registry=self.registry,
        )

        self._operator_series()

    # -- what an on-call reads besides the queue (docs/design.md §7, metrics) ----------------

    def _operator_series(self) -> None:
        self.reaper_last_success = Gauge(
            "batchcrop_reaper_last_success_timestamp_seconds",
            "When this process's reaper last finished a pass (Unix time; 0: not yet). Alert "
            "on time() minus it: a reaper that stopped leaves expired leases held.",
            registry=self.registry,
        )
        self.store_write_seconds = Histogram(
            "batchcrop_store_write_seconds",
            "Wall time of one object write to the store (put-if-absent of a derivative or a "
            "preview), failed ones included.",
            buckets=LATENCY_BUCKETS_SECONDS,
            registry=self.registry,
        )
        self.database_statement_seconds = Histogram(
            "batchcrop_database_statement_seconds",
            "Wall time of one database statement, from sending it to its result.",
            buckets=LATENCY_BUCKETS_SECONDS,
            registry=self.registry,
        )

    def prime(
        self, *, categories: Iterable[str], outcomes: Iterable[str], dependencies: Iterable[str]
    ) -> None:
        """Export every labelled series at 0 from the start, so that `rate()` and `increase()`
        see the first failure of a kind instead of a series appearing at 1."""
        for category in categories:
            self.retryable_failures.labels(category)
            self.terminal_failures.labels(category)
        for outcome in outcomes:
            self.item_duration.labels(outcome)
        for dependency in dependencies:
            self.outages.labels(dependency)

    def watch_fleet(self, read: Callable[[], FleetStats]) -> None:
        """Export the worker registry and the callback deliveries, read at scrape time."""
        self.registry.register(FleetCollector(read))

    def watch(self, collector: Collector) -> None:
        """Export `collector`'s families from this registry too. A second collector of the
        same families (another worker built on these metrics) is left out: the first one's
        series stand for both."""
        try:
            self.registry.register(collector)
        except ValueError:  # the registry refuses duplicated series names
            logging.getLogger("batchcrop").debug("collector already registered", exc_info=True)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)


StoreQueues = Mapping[str, Mapping[State, int]]
"""Unfinished items by store and state, of the stores a live worker serves only (an autoscaler
must not add workers for a mistyped bucket's batches); `""` for batches without a store."""


class QueueCollector(Collector):
    """`batchcrop_queue_items{state,store}` and `batchcrop_queue_oldest_queued_age_seconds`,
    read from the database when scraped; nothing is exported while the database is
    unavailable. Without `by_store`, the items gauge has the `state` label only."""

    def __init__(
        self, read: Callable[[], QueueStats], by_store: Callable[[], StoreQueues] | None = None
    ) -> None:
        self._read = read
        self._by_store = by_store
        self._lock = threading.Lock()
        self._last: tuple[float, QueueStats, StoreQueues | None] | None = None

    def describe(self) -> list[Metric]:
        # Registering must not read the database: describe the families without samples.
        return list(self._families(None))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= QUEUE_CACHE_SECONDS:
                try:
                    stores = None if self._by_store is None else self._by_store()
                    self._last = (now, self._read(), stores)
                except Exception:
                    logging.getLogger("batchcrop").debug("queue read failed", exc_info=True)
                    self._last = None
                    return
            _, stats, stores = self._last
        yield from self._families(stats, stores)

    def _families(
        self, stats: QueueStats | None, stores: StoreQueues | None = None
    ) -> Iterator[Metric]:
        if self._by_store is not None:
            yield self._store_items(stores)
        yield from self._totals(stats, with_items=self._by_store is None)

    @staticmethod
    def _store_items(stores: StoreQueues | None) -> Metric:
        items = GaugeMetricFamily(
            "batchcrop_queue_items",
            "Unfinished items by state (queued, in_progress, retryable) and store, of the "
            "stores a live worker serves.",
            labels=["state", "store"],
        )
        for store, counts in sorted((stores or {}).items()):
            for state in State:
                if state in UNFINISHED:
                    items.add_metric([state.value, store], counts.get(state, 0))
        return items

    @staticmethod
    def _totals(stats: QueueStats | None, *, with_items: bool) -> Iterator[Metric]:
        items = GaugeMetricFamily(
            "batchcrop_queue_items",
            "Unfinished items of every batch by state (queued, in_progress, retryable).",
            labels=["state"],
        )
        age = GaugeMetricFamily(
            "batchcrop_queue_oldest_queued_age_seconds",
            "How long the next queued item to be claimed has waited (0 when nothing is queued).",
        )
        if stats is not None:
            for state in State:
                if state in UNFINISHED:
                    items.add_metric([state.value], stats.counts.get(state, 0))
            age.add_metric([], stats.head_queued_age_seconds or 0.0)
        if with_items:
            yield items
        yield age


# -- the worker registry and the callback deliveries, read at scrape time -------------------


@dataclass(frozen=True)
class FleetStats:
    """What `FleetCollector` exports: registered workers by status (`alive`, `absent`), the
    slots (concurrency) of the live ones by store, and callback deliveries by stage
    (`pending`: queued or being sent, `retrying`: waiting for a retry, `failed`: given up)."""

    workers: Mapping[str, int] = field(default_factory=dict)
    slots: Mapping[str, int] = field(default_factory=dict)
    deliveries: Mapping[str, int] = field(default_factory=dict)


WORKER_STATUSES = ("alive", "absent")
DELIVERY_STAGES = ("pending", "retrying", "failed")


class FleetCollector(Collector):
    """`batchcrop_workers{status}`, `batchcrop_worker_slots{store}` (capacity: desired
    workers = queued / slots per worker) and `batchcrop_callback_deliveries{stage}`, read when
    scraped (at most once per `QUEUE_CACHE_SECONDS`); absent while the database is down."""

    def __init__(self, read: Callable[[], FleetStats]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._last: tuple[float, FleetStats] | None = None

    def describe(self) -> list[Metric]:
        return list(self._families(None))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= QUEUE_CACHE_SECONDS:
                try:
                    self._last = (now, self._read())
                except Exception:
                    logging.getLogger("batchcrop").debug("fleet read failed", exc_info=True)
                    self._last = None
                    return
            stats = self._last[1]
        yield from self._families(stats)

    @staticmethod
    def _families(stats: FleetStats | None) -> Iterator[Metric]:
        workers = GaugeMetricFamily(
            "batchcrop_workers",
            "Registered workers by status: alive (seen within the worker timeout) or absent.",
            labels=["status"],
        )
        slots = GaugeMetricFamily(
            "batchcrop_worker_slots",
            "Slots (items worked at once) of the live workers, by their store.",
            labels=["store"],
        )
        deliveries = GaugeMetricFamily(
            "batchcrop_callback_deliveries",
            "Callback deliveries kept in the database by stage: pending (queued or being "
            "sent), retrying (waiting for a retry), failed (given up).",
            labels=["stage"],
        )
        if stats is not None:
            for status in WORKER_STATUSES:
                workers.add_metric([status], stats.workers.get(status, 0))
            for store, n in sorted(stats.slots.items()):
                slots.add_metric([store], n)
            for stage in DELIVERY_STAGES:
                deliveries.add_metric([stage], stats.deliveries.get(stage, 0))
        yield workers
        yield slots
        yield deliveries

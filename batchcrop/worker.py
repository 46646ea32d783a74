"""The worker: N claim-and-process slots, a reaper on a timer, graceful shutdown.

Shutdown (DESIGN section 3, F): `stop()` stops claiming and lets held items finish;
`give_back_now()` makes every held item go back to `queued` at its next checkpoint, without
counting the attempt. Neither ever produces `failed`.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from batchcrop.batches import BatchService
from batchcrop.crop import RenderSpec
from batchcrop.errors import Category, ItemError, PermanentItemError, TransientItemError
from batchcrop.logs import log_event
from batchcrop.metrics import Metrics
from batchcrop.processing import Attempt, GiveBack, Interruption
from leases import Claim, DatabaseUnavailable, Heartbeater, LeaseLost, LeaseManager, State
from storage import ObjectStore, SourceReader

IDLE_SLEEP_SECONDS = 1.0
OUTAGE_BACKOFF_MIN_SECONDS = 0.5
OUTAGE_BACKOFF_MAX_SECONDS = 30.0
# Attempts ending in these categories mean a dependency is down, not that the item is bad:
# the slots stop claiming for a while so an outage does not burn every item's attempt budget.
OUTAGE_CATEGORIES = frozenset(
    {Category.STORAGE_UNAVAILABLE, Category.SOURCE_UNAVAILABLE, Category.DEPENDENCY_TIMEOUT}
)


class OutageGate:
    """Exponential backoff shared by a worker's slots while the database or store is down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._delay_seconds = 0.0
        self._until = 0.0

    def failed(self) -> None:
        """Note an outage: claiming pauses for twice the previous pause (with jitter)."""
        with self._lock:
            self._delay_seconds = min(
                max(self._delay_seconds * 2, OUTAGE_BACKOFF_MIN_SECONDS),
                OUTAGE_BACKOFF_MAX_SECONDS,
            )
            self._until = time.monotonic() + self._delay_seconds * random.uniform(0.5, 1.0)

    def recovered(self) -> None:
        """A dependency answered: the next outage starts from the smallest pause again."""
        with self._lock:
            self._delay_seconds = 0.0

    def wait(self, stopping: threading.Event) -> None:
        """Sleep out the current pause, if any (returns early on stop)."""
        remaining = self._until - time.monotonic()
        if remaining > 0:
            stopping.wait(remaining)


def default_worker_id() -> str:
    """host:pid:random — unique per process, readable in the event log."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerOptions:
    """How one worker process runs."""

    concurrency: int = 2
    group_ids: Sequence[str] | None = None
    reaper_interval_seconds: float = 30.0
    idle_sleep_seconds: float = IDLE_SLEEP_SECONDS
    max_source_bytes: int = 100 * 1024 * 1024
    worker_id: str = ""


class Worker:
    """Claims items from open batches (or only `group_ids`) and processes them."""

    def __init__(
        self,
        *,
        leases: LeaseManager,
        batches: BatchService,
        store: ObjectStore,
        sources: SourceReader,
        metrics: Metrics,
        options: WorkerOptions,
    ) -> None:
        self.leases = leases
        self.batches = batches
        self.store = store
        self.sources = sources
        self.metrics = metrics
        self.options = options
        self.worker_id = options.worker_id or default_worker_id()
        self._stopping = threading.Event()
        self._give_back_now = threading.Event()
        self._specs: dict[str, RenderSpec] = {}
        self._specs_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._outage = OutageGate()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the slots and the reaper in daemon threads."""
        for n in range(self.options.concurrency):
            thread = threading.Thread(target=self._slot, name=f"slot-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        reaper = threading.Thread(target=self._reaper, name="reaper", daemon=True)
        reaper.start()
        self._threads.append(reaper)
        log_event("worker_started", worker=self.worker_id, concurrency=self.options.concurrency)

    def stop(self) -> None:
        """Stop claiming; held items run to completion."""
        self._stopping.set()

    def give_back_now(self) -> None:
        """Stop claiming and give every held item back at its next checkpoint."""
        self._stopping.set()
        self._give_back_now.set()

    @property
    def stopping(self) -> bool:
        """True once stop() or give_back_now() was called."""
        return self._stopping.is_set()

    def join(self, timeout_seconds: float | None = None) -> bool:
        """Wait for the threads; True when all ended within the timeout."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        for thread in self._threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        return not any(t.is_alive() for t in self._threads)

    def shutdown(self, grace_seconds: float) -> None:
        """Graceful exit: finish within the grace period, else give back, then wait."""
        self.stop()
        if not self.join(grace_seconds):
            log_event("shutdown_give_back", worker=self.worker_id)
            self.give_back_now()
            self.join()

    # -- the loops -------------------------------------------------------------------------

    def _slot(self) -> None:
        while not self._stopping.is_set():
            self._outage.wait(self._stopping)
            if self._stopping.is_set():
                break
            try:
                claims = self.leases.claim(self.worker_id, 1, group_ids=self.options.group_ids)
            except DatabaseUnavailable as exc:
                log_event("database_unavailable", level=logging.WARNING, error=str(exc))
                self._outage.failed()
                continue
            if not claims:
                self._stopping.wait(self.options.idle_sleep_seconds * random.uniform(0.5, 1.0))
                continue
            for claim in claims:
                self.process(claim)

    def _reaper(self) -> None:
        interval = self.options.reaper_interval_seconds
        while not self._stopping.is_set():
            self.reap_once()
            self._stopping.wait(interval * random.uniform(0.8, 1.2))

    def reap_once(self) -> None:
        """One reaper pass; outages are logged and waited out by the next pass."""
        try:
            result = self.leases.reap()
        except DatabaseUnavailable as exc:
            log_event("database_unavailable", level=logging.WARNING, error=type(exc).__name__)
            return
        expired = result.retried + result.failed
        if expired:
            self.metrics.lease_expirations.inc(expired)
        if result.retried or result.failed or result.abandoned:
            log_event(
                "reaped",
                worker=self.worker_id,
                retried=result.retried,
                failed=result.failed,
                abandoned=result.abandoned,
            )

    # -- one item --------------------------------------------------------------------------

    def _spec(self, batch_id: str) -> RenderSpec:
        with self._specs_lock:
            spec = self._specs.get(batch_id)
        if spec is None:
            spec = self.batches.batch(batch_id).spec
            with self._specs_lock:
                self._specs[batch_id] = spec
        return spec

    def process(self, claim: Claim) -> str:
        """Run one attempt to its exit; returns the outcome name (for metrics and tests)."""
        started = time.monotonic()
        self.metrics.claims.inc()
        log_event(
            "claim",
            item=claim.item_id,
            batch=claim.group_id,
            attempt=claim.attempt,
            corr=claim.correlation_id,
            worker=self.worker_id,
        )
        outcome = self._attempt(claim)
        self.metrics.item_duration.labels(outcome).observe(time.monotonic() - started)
        log_event(
            "transition",
            item=claim.item_id,
            batch=claim.group_id,
            attempt=claim.attempt,
            corr=claim.correlation_id,
            outcome=outcome,
            ms=round((time.monotonic() - started) * 1000),
        )
        return outcome

    def _attempt(self, claim: Claim) -> str:  # noqa: PLR0911 -- one return per exit of the state machine
        try:
            with Heartbeater(self.leases, claim) as heartbeat:
                attempt = Attempt(
                    claim=claim,
                    leases=self.leases,
                    batches=self.batches,
                    store=self.store,
                    sources=self.sources,
                    spec=self._spec(claim.group_id),
                    max_source_bytes=self.options.max_source_bytes,
                    give_back_now=self._give_back_now,
                )
                try:
                    attempt.run(heartbeat)
                except (LeaseLost, DatabaseUnavailable):
                    raise
                except (Interruption, ItemError):
                    raise
                except Exception as exc:
                    logging.getLogger("batchcrop").debug("internal error", exc_info=True)
                    raise TransientItemError(
                        type(exc).__name__, category=Category.INTERNAL_ERROR
                    ) from exc
            self.metrics.commits.inc()
            self._outage.recovered()
            return State.SUCCEEDED.value
        except LeaseLost:
            self.metrics.lease_lost.inc()
            return "lease_lost"
        except DatabaseUnavailable:
            # Nothing more can be written now; the lease expires and the reaper retries it.
            self._outage.failed()
            return "database_unavailable"
        except GiveBack:
            give_back = partial(self.leases.give_back, claim.item_id, claim.lease_token)
            return self._transition(give_back, "given_back")
        except Interruption as exc:
            category = exc.category.value
            self.metrics.terminal_failures.labels(category).inc()
            abandon = partial(self.leases.abandon, claim.item_id, claim.lease_token, category)
            return self._transition(abandon, State.ABANDONED.value)
        except PermanentItemError as exc:
            category = exc.category.value
            self.metrics.terminal_failures.labels(category).inc()
            fail = partial(self.leases.fail, claim.item_id, claim.lease_token, category)
            return self._transition(fail, State.FAILED.value)
        except ItemError as exc:
            return self._retry(claim, exc)

    def _retry(self, claim: Claim, exc: ItemError) -> str:
        category = exc.category.value
        try:
            state = self.leases.retry_later(claim.item_id, claim.lease_token, category)
        except (LeaseLost, DatabaseUnavailable):
            return "lease_lost"
        if state is State.FAILED:
            self.metrics.terminal_failures.labels(Category.ATTEMPTS_EXHAUSTED.value).inc()
        else:
            self.metrics.retryable_failures.labels(category).inc()
        if exc.category in OUTAGE_CATEGORIES:
            log_event("dependency_unavailable", level=logging.WARNING, category=category)
            self._outage.failed()
        return state.value

    @staticmethod
    def _transition(transition: Callable[[], object], outcome: str) -> str:
        """Make the fenced final transition; a lost lease means someone else owns the item."""
        try:
            transition()
        except (LeaseLost, DatabaseUnavailable):
            return "lease_lost"
        return outcome

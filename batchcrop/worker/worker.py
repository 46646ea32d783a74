"""The worker: N claim-and-process slots, a reaper on a timer, graceful shutdown.

Shutdown (docs/design.md §3, F): `stop()` stops claiming and lets held items finish;
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

from batchcrop import __version__
from batchcrop.batches.service import BatchService
from batchcrop.callbacks.delivery import Deliverer
from batchcrop.crop import MemoryBudget, RenderSpec
from batchcrop.errors import (
    Category,
    ItemError,
    PermanentItemError,
    TransientItemError,
    public_message,
)
from batchcrop.logs import log_event
from batchcrop.metrics import Metrics
from batchcrop.renders import RENDER_DEADLINE_SECONDS, Renderer, RenderPool, render_in_process
from batchcrop.settings import CONCURRENCY, MAX_SOURCE_BYTES, REAPER_INTERVAL_SECONDS
from batchcrop.worker.attempts import Attempts, Outcome
from batchcrop.worker.presence import Presence, worker_info
from batchcrop.worker.processing import Attempt, GiveBack, Interruption, Output, write_pool
from leases import (
    Claim,
    DatabaseUnavailable,
    Heartbeats,
    HeldLease,
    LeaseLost,
    LeaseManager,
    ReapResult,
)
from storage import ObjectStore, SourceReader

IDLE_SLEEP_SECONDS = 1.0
BATCHES_REFRESH_SECONDS = 2.0
"""How long a worker's list of the open batches of its store is used before it is read again
(a new batch is claimed from within about this long)."""
OUTAGE_BACKOFF_MIN_SECONDS = 0.5
OUTAGE_BACKOFF_MAX_SECONDS = 30.0
# Attempts ending in these categories mean a dependency is down, not that the item is bad:
# the slots stop claiming for a while so an outage does not burn every item's attempt budget.
QUIET_OUTCOMES = frozenset({Outcome.SUCCEEDED, Outcome.GIVEN_BACK, Outcome.RETRYABLE})
"""Outcomes logged at INFO; the others (failed, abandoned, lease lost, database unavailable) at
WARNING: they are what an operator looks for."""
OUTAGE_CATEGORIES = frozenset(
    {Category.STORAGE_UNAVAILABLE, Category.SOURCE_UNAVAILABLE, Category.DEPENDENCY_TIMEOUT}
)


class OutageGate:
    """Exponential backoff shared by a worker's slots while the database or store is down.

    The first failure of an outage is logged (`outage_started`, with the dependency and the
    reason) and counted; the first success after it is logged once (`outage_ended`, with how
    long it lasted).
    """

    def __init__(self, on_outage: Callable[[str], None] = lambda dependency: None) -> None:
        self._lock = threading.Lock()
        self._delay_seconds = 0.0
        self._until = 0.0
        self._since: float | None = None
        self._dependency = ""
        self._on_outage = on_outage

    def failed(self, dependency: str = "database", reason: str = "") -> None:
        """Note an outage: claiming pauses for twice the previous pause (with jitter)."""
        with self._lock:
            started = self._since is None
            if started:
                self._since = time.monotonic()
                self._dependency = dependency
            self._delay_seconds = min(
                max(self._delay_seconds * 2, OUTAGE_BACKOFF_MIN_SECONDS),
                OUTAGE_BACKOFF_MAX_SECONDS,
            )
            self._until = time.monotonic() + self._delay_seconds * random.uniform(0.5, 1.0)
        if started:
            self._on_outage(dependency)
            log_event(
                "outage_started",
                level=logging.WARNING,
                dependency=dependency,
                reason=reason or None,
            )

    def recovered(self, dependency: str | None = None) -> None:
        """`dependency` (None: every one) answered: the next outage starts from the smallest
        pause again. An outage of another dependency goes on."""
        with self._lock:
            if self._since is not None and dependency not in (None, self._dependency):
                return
            self._delay_seconds = 0.0
            since, self._since = self._since, None
        if since is not None:
            log_event(
                "outage_ended",
                dependency=self._dependency,
                lasted_s=round(time.monotonic() - since, 1),
            )

    def wait(self, stopping: threading.Event) -> None:
        """Sleep out the current pause, if any (returns early on stop)."""
        remaining = self._until - time.monotonic()
        if remaining > 0:
            stopping.wait(remaining)


def _said(exc: BaseException) -> str:
    """An unexpected exception as `Class: what it said` (made safe by `public_message`)."""
    said = str(exc)
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


def default_worker_id() -> str:
    """host:pid:random — unique per process, readable in the event log."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerOptions:
    """How one worker process runs."""

    concurrency: int = CONCURRENCY
    batch_ids: Sequence[str] | None = None
    reaper_interval_seconds: float = REAPER_INTERVAL_SECONDS
    idle_sleep_seconds: float = IDLE_SLEEP_SECONDS
    max_source_bytes: int = MAX_SOURCE_BYTES
    worker_id: str = ""
    database: str | None = None
    """Where the database is (no credentials), for the start-up log line."""
    render_processes: int = 0
    """Render child processes (`batchcrop.renders.RenderPool`); 0 renders in the slots'
    threads, as the library does. The CLI's default is one per slot."""
    render_deadline_seconds: float = RENDER_DEADLINE_SECONDS
    """A render in a child past this is killed and fails `render_timeout` (not in threads)."""


class Worker:
    """Claims items from open batches (or only `batch_ids`) and processes them."""

    def __init__(
        self,
        *,
        leases: LeaseManager,
        batches: BatchService,
        attempts: Attempts,
        store: ObjectStore,
        sources: SourceReader,
        metrics: Metrics,
        options: WorkerOptions,
        decode_budget: MemoryBudget | None = None,
        deliverer: Callable[[str], Deliverer | None] | None = None,
    ) -> None:
        self.leases = leases
        self._make_deliverer = deliverer
        self._deliverer: Deliverer | None = None
        self.decode_budget = decode_budget
        self.batches = batches
        self.attempts = attempts
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
        self._outage = OutageGate(lambda dependency: metrics.outages.labels(dependency).inc())
        self._batches_lock = threading.Lock()
        self._batches: list[str] = []
        self._batches_read_at = -float("inf")
        self._skipped: set[str] = set()
        self._presence: Presence | None = None
        # One heartbeat thread for every item this worker holds: one statement per interval.
        self._heartbeats = Heartbeats(leases)
        self._writes = write_pool(options.concurrency)
        self._pool = (
            RenderPool(options.render_processes, deadline_seconds=options.render_deadline_seconds)
            if options.render_processes > 0
            else None
        )
        self._renderer: Renderer = self._pool or render_in_process
        self._progressed = threading.Event()
        self._attempts_lock = threading.Lock()
        self._attempts = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the render children (warm before the first claim), then the slots and the
        reaper in daemon threads."""
        self.warm_renders()
        for n in range(self.options.concurrency):
            thread = threading.Thread(target=self._slot, name=f"slot-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        reaper = threading.Thread(target=self._reaper, name="reaper", daemon=True)
        reaper.start()
        self._threads.append(reaper)
        # Completion callbacks of any batch (docs/design.md §7), claimed as this worker.
        if self._make_deliverer is not None:
            self._deliverer = self._make_deliverer(self.worker_id)
            if self._deliverer is not None:
                self._deliverer.start()
                self._threads.append(self._deliverer)
        log_event(
            "worker_started",
            worker=self.worker_id,
            version=__version__,
            concurrency=self.options.concurrency,
            render_processes=self.options.render_processes,
            database=self.options.database,
            store=self.store.url,
            lease_s=f"{self.leases.lease_seconds:g}",
            batches=",".join(self.options.batch_ids) if self.options.batch_ids else "all",
        )

    def start_presence(self) -> None:
        """Write this worker's registry row now, then keep it fresh in a daemon thread (which
        also releases the leases of workers no longer seen: docs/design.md §3, G')."""
        info = worker_info(
            concurrency=self.options.concurrency,
            batch_ids=self.options.batch_ids,
            store=self.store.url,
        )
        presence = Presence(self.leases, self.worker_id, info, on_released=self._count_released)
        presence.beat()
        presence.start()
        self._presence = presence

    def _count_released(self, result: ReapResult) -> None:
        self.metrics.lease_expirations.inc(result.retried + result.failed)

    def retire(self, *, forget: bool) -> None:
        """Stop the registry refresh; `forget` (all slots ended, nothing held) deletes the row,
        else it goes stale and the reaper releases whatever is still held."""
        if self._presence is not None:
            self._presence.stop(forget=forget)
            self._presence = None

    def stop(self) -> None:
        """Stop claiming; held items (and a delivery under way) run to completion."""
        self._stopping.set()
        if self._deliverer is not None:
            self._deliverer.stop()

    def give_back_now(self) -> None:
        """Stop claiming and give every held item back at its next checkpoint."""
        self.stop()
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
        ended = not any(t.is_alive() for t in self._threads)
        if ended:
            self._writes.shutdown(wait=False)  # idle: every slot waited for its writes
            if self._pool is not None:
                self._pool.close()
        return ended

    def warm_renders(self) -> None:
        """Start the render children and wait until each is warm (idempotent; `start` does it
        before the first claim)."""
        if self._pool is not None:
            self._pool.start()

    def close_renders(self) -> None:
        """Kill the render children now (an exit with slots still stuck: nothing they hold
        goes on rendering)."""
        if self._pool is not None:
            self._pool.close()

    @property
    def render_pids(self) -> list[int]:
        """The render children's process ids (empty when rendering in threads)."""
        return [] if self._pool is None else self._pool.pids

    @property
    def attempts_under_way(self) -> int:
        """Items this worker is processing now."""
        with self._attempts_lock:
            return self._attempts

    def wait_for_progress(self, timeout_seconds: float) -> None:
        """Return once an attempt has ended since the last call, or after `timeout_seconds`: a
        caller following its batch reads the status when something changed, not on a clock."""
        self._progressed.wait(timeout_seconds)
        self._progressed.clear()

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
                claims = self.leases.claim(self.worker_id, 1, group_ids=self.claimable_batches())
            except DatabaseUnavailable as exc:
                self._outage.failed("database", str(exc))
                continue
            self._outage.recovered("database")
            if not claims:
                self._stopping.wait(self.options.idle_sleep_seconds * random.uniform(0.5, 1.0))
                continue
            for claim in claims:
                self.process(claim)

    def claimable_batches(self) -> list[str]:
        """The open batches this worker claims from: those of its own store (and those from
        before stores were recorded), among `options.batch_ids` when given. Read at most every
        `BATCHES_REFRESH_SECONDS`; each batch of another store is logged once, when skipped."""
        with self._batches_lock:
            if time.monotonic() - self._batches_read_at < BATCHES_REFRESH_SECONDS:
                return self._batches
            open_ids = self.leases.open_groups()
            if self.options.batch_ids is not None:
                wanted = set(self.options.batch_ids)
                open_ids = [batch_id for batch_id in open_ids if batch_id in wanted]
            stores = self.batches.stores(open_ids)
            mine = []
            for batch_id in open_ids:
                if batch_id not in stores:
                    continue  # a lease group that is not a batch
                store = stores[batch_id]
                if store is None or store == self.store.url:
                    mine.append(batch_id)
                elif batch_id not in self._skipped:
                    self._skipped.add(batch_id)
                    log_event(
                        "batch_of_another_store",
                        level=logging.WARNING,
                        worker=self.worker_id,
                        batch=batch_id,
                        batch_store=store,
                        store=self.store.url,
                    )
            self._batches = mine
            self._batches_read_at = time.monotonic()
            return mine

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

    def process(self, claim: Claim) -> Outcome:
        """Run one attempt to its exit; returns the outcome name (for metrics and tests)."""
        started = time.monotonic()
        self.metrics.claims.inc()
        self.metrics.in_flight.inc()
        with self._attempts_lock:
            self._attempts += 1
        log_event(
            "claim",
            level=logging.DEBUG,
            item=claim.item_id,
            batch=claim.group_id,
            attempt=claim.attempt,
            corr=claim.correlation_id,
            worker=self.worker_id,
        )
        try:
            outcome, category, message = self._attempt(claim)
        finally:
            self.metrics.in_flight.dec()
            with self._attempts_lock:
                self._attempts -= 1
            self._progressed.set()
        self.metrics.item_duration.labels(outcome).observe(time.monotonic() - started)
        log_event(
            "transition",
            level=logging.INFO if outcome in QUIET_OUTCOMES else logging.WARNING,
            item=claim.item_id,
            batch=claim.group_id,
            attempt=claim.attempt,
            corr=claim.correlation_id,
            outcome=outcome,
            category=category,
            message=message,
            ms=round((time.monotonic() - started) * 1000),
        )
        return outcome

    def _attempt(self, claim: Claim) -> tuple[Outcome, str | None, str | None]:
        """Run the pipeline, then end the attempt through the one door (`Attempts`); returns the
        outcome, the category the item was left with (None on success or give-back) and the
        public message of a failed attempt (None otherwise)."""
        cause: Category | None = None
        message: str | None = None
        retried = False
        try:
            with self._heartbeats.holding(claim) as heartbeat:
                output = self._run(claim, heartbeat)
                outcome = self.attempts.succeed(claim, output.derivatives, output.preview)
        except LeaseLost:
            outcome = Outcome.LEASE_LOST
        except DatabaseUnavailable:
            outcome = Outcome.DATABASE_UNAVAILABLE
        except GiveBack:
            outcome = self.attempts.give_back(claim)
        except Interruption as exc:
            cause = exc.category
            outcome = self.attempts.abandon(claim, cause)
        except PermanentItemError as exc:
            cause, message = exc.category, public_message(exc.detail)
            outcome = self.attempts.fail(claim, cause, message)
        except ItemError as exc:
            cause, message, retried = exc.category, public_message(exc.detail), True
            outcome = self.attempts.retry(claim, cause, message)
        except Exception as exc:
            # Only the commit can get here (`_run` turns its own surprises into ItemErrors): a
            # bug or an unexpected database error is retried, and the slot lives on.
            logging.getLogger("batchcrop").debug("internal error at commit", exc_info=True)
            cause, retried = Category.INTERNAL_ERROR, True
            message = public_message(f"at commit: {_said(exc)}")
            outcome = self.attempts.retry(claim, cause, message)
        self._account(claim, outcome, cause, retried=retried)
        category = Category.ATTEMPTS_EXHAUSTED if retried and outcome is Outcome.FAILED else cause
        if outcome not in (Outcome.FAILED, Outcome.RETRYABLE):
            message = None  # only a failed attempt's ending keeps its message
        return outcome, None if category is None else str(category), message

    def _run(self, claim: Claim, heartbeat: HeldLease) -> Output:
        attempt = Attempt(
            claim=claim,
            leases=self.leases,
            store=self.store,
            sources=self.sources,
            spec=self._spec(claim.group_id),
            max_source_bytes=self.options.max_source_bytes,
            decode_budget=self.decode_budget,
            give_back_now=self._give_back_now,
            on_write_differs=self.metrics.derivative_bytes_differ.inc,
            on_put_hit=self.metrics.put_if_absent_hits.inc,
            writes=self._writes,
            renderer=self._renderer,
        )
        try:
            return attempt.run(heartbeat)
        except (LeaseLost, DatabaseUnavailable, Interruption, ItemError):
            raise
        except Exception as exc:
            logging.getLogger("batchcrop").debug("internal error", exc_info=True)
            raise TransientItemError(_said(exc), category=Category.INTERNAL_ERROR) from exc

    def _account(
        self, claim: Claim, outcome: Outcome, cause: Category | None, *, retried: bool
    ) -> None:
        """Metrics and outage backoff for one ended attempt: `cause` is the error that ended it,
        `retried` says it ended through a retry (which fails the item at the attempts cap)."""
        match outcome:
            case Outcome.SUCCEEDED:
                self.metrics.commits.inc()
                self._outage.recovered()
            case Outcome.LEASE_LOST:
                self.metrics.lease_lost.inc()
            case Outcome.DATABASE_UNAVAILABLE:
                # Nothing of this attempt was committed: its lease runs out and the reaper
                # retries the item once the database is back.
                self._outage.failed("database", "the attempt could not be ended")
            case Outcome.FAILED | Outcome.ABANDONED:
                label = Category.ATTEMPTS_EXHAUSTED if retried else cause
                self.metrics.terminal_failures.labels(str(label)).inc()
            case Outcome.RETRYABLE:
                self.metrics.retryable_failures.labels(str(cause)).inc()
            case Outcome.GIVEN_BACK:
                pass
        if (
            retried
            and cause in OUTAGE_CATEGORIES
            and outcome in (Outcome.RETRYABLE, Outcome.FAILED)
        ):
            dependency = "source" if cause is Category.SOURCE_UNAVAILABLE else "store"
            self._outage.failed(dependency, str(cause))

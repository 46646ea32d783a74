"""Circuit breakers: a worker stops claiming while a dependency it needs is known to be down
(docs/design.md §3, circuit breakers; ADR 0027).

One breaker per dependency of a worker (`database`, `store`, `source`), shared by its slots. A
failure opens it (one `outage_started` log line, the `batchcrop_outages` counter, the
`batchcrop_circuit_open` gauge at 1); while it is open no slot claims. After a pause (0.5 s
doubling to 5 s, jittered) one slot probes: the store with its `check()`, the database and the
sources by the next claim and attempt. A success closes it (one `outage_ended` line, with how
long it lasted, the gauge back at 0); another failure opens it for twice as long.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from batchcrop.logs import log_event
from batchcrop.metrics import OUTAGE_DEPENDENCIES
from storage import StorageError

OUTAGE_BACKOFF_MIN_SECONDS = 0.5
OUTAGE_BACKOFF_MAX_SECONDS = 5.0
"""A probe every 5 s at most while a dependency is down (one per worker, not per slot): claims
resume within about 5 s of its return."""


class Breaker:
    """One dependency's breaker (thread-safe); `on_change(open)` is told each open and close."""

    def __init__(self, dependency: str, on_change: Callable[[bool], None]) -> None:
        self.dependency = dependency
        self._on_change = on_change
        self._lock = threading.Lock()
        self._delay_seconds = 0.0
        self._until = 0.0
        self._since: float | None = None

    @property
    def is_open(self) -> bool:
        """True from a failure until the next success."""
        return self._since is not None

    def remaining_seconds(self) -> float:
        """How long claims still pause (0 once a probe may go)."""
        return max(0.0, self._until - time.monotonic()) if self.is_open else 0.0

    def failed(self, reason: str = "") -> None:
        """The dependency failed: open (or stay open) for twice the previous pause."""
        with self._lock:
            opened = self._since is None
            if opened:
                self._since = time.monotonic()
            self._delay_seconds = min(
                max(self._delay_seconds * 2, OUTAGE_BACKOFF_MIN_SECONDS),
                OUTAGE_BACKOFF_MAX_SECONDS,
            )
            self._until = time.monotonic() + self._delay_seconds * random.uniform(0.5, 1.0)
        if opened:
            self._on_change(True)
            log_event(
                "outage_started",
                level=logging.WARNING,
                dependency=self.dependency,
                reason=reason or None,
            )

    def recovered(self) -> None:
        """The dependency answered: close; the next outage starts from the smallest pause."""
        with self._lock:
            self._delay_seconds = 0.0
            since, self._since = self._since, None
        if since is not None:
            self._on_change(False)
            log_event(
                "outage_ended",
                dependency=self.dependency,
                lasted_s=round(time.monotonic() - since, 1),
            )


class Breakers:
    """A worker's breakers, by dependency; `probe_store` is the store's reachability check
    (raises while the store is down)."""

    def __init__(
        self,
        *,
        probe_store: Callable[[], None],
        on_outage: Callable[[str], None] = lambda dependency: None,
        on_change: Callable[[str, bool], None] = lambda dependency, is_open: None,
    ) -> None:
        self._probe_store = probe_store
        self._probe_lock = threading.Lock()
        self.by_dependency = {
            name: Breaker(name, self._changed(name, on_outage, on_change))
            for name in OUTAGE_DEPENDENCIES
        }

    @staticmethod
    def _changed(
        name: str, on_outage: Callable[[str], None], on_change: Callable[[str, bool], None]
    ) -> Callable[[bool], None]:
        def changed(is_open: bool) -> None:
            if is_open:
                on_outage(name)
            on_change(name, is_open)

        return changed

    def failed(self, dependency: str, reason: str = "") -> None:
        """`dependency` failed (see `Breaker.failed`)."""
        self.by_dependency[dependency].failed(reason)

    def recovered(self, dependency: str | None = None) -> None:
        """`dependency` (None: every one, after an attempt succeeded) answered."""
        for name, breaker in self.by_dependency.items():
            if dependency in (None, name):
                breaker.recovered()

    def store_is_down(self) -> bool:
        """Whether the store fails its reachability check now: an attempt's store error is an
        outage only then. A store that answers while one item's write keeps failing (a file
        where the item's folder goes, a key it refuses) is that item's failure, counted
        against its attempts, or it would be put off until the batch's deadline."""
        try:
            self._probe_store()
        except StorageError:
            return True
        return False

    def wait(self, stopping: threading.Event) -> None:
        """Return once no breaker keeps claims paused (early on stop): sleep out the pauses,
        and probe an open store breaker whose pause is over (one slot at a time)."""
        while not stopping.is_set():
            remaining = max(b.remaining_seconds() for b in self.by_dependency.values())
            if remaining > 0:
                stopping.wait(remaining)
                continue
            store = self.by_dependency["store"]
            if not store.is_open:
                return
            with self._probe_lock:
                if not store.is_open or store.remaining_seconds() > 0:
                    continue  # another slot probed meanwhile
                try:
                    self._probe_store()
                except StorageError as exc:
                    store.failed(type(exc).__name__)
                    continue
                store.recovered()
            return

"""Fair sending of callbacks: a few requests at once per destination, and a destination that
keeps timing out rests (docs/design.md §7, callbacks; ADR 0034).

A deliverer sends many deliveries at once; without limits, one tenant's hanging receiver
(each of its attempts holding a sender for the whole delivery deadline) could take every
sender and delay everyone's callbacks. A *destination* is a URL's host and port. The state is
this process's own: each deliverer of a fleet learns on its own which destinations hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

DELIVERIES_PER_DESTINATION_MAX = 2
"""Requests one deliverer has under way at once to one destination."""
DESTINATION_TIMEOUTS_MAX = 3
"""Timeouts in a row after which a destination rests."""
DESTINATION_REST_SECONDS = 60.0
"""How long a destination that timed out `DESTINATION_TIMEOUTS_MAX` times in a row is not
sent to by this process; then one attempt probes it (timing out again, it rests again)."""


@dataclass
class _Destination:
    in_flight: int = 0
    timeouts: int = 0
    rests_until: float = 0.0


class DestinationPacing:
    """Admits requests per destination (thread-safe): at most `per_destination_max` at once,
    none while the destination rests after `timeouts_max` timeouts in a row."""

    def __init__(
        self,
        *,
        per_destination_max: int = DELIVERIES_PER_DESTINATION_MAX,
        timeouts_max: int = DESTINATION_TIMEOUTS_MAX,
        rest_seconds: float = DESTINATION_REST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_destination_max = per_destination_max
        self.timeouts_max = timeouts_max
        self.rest_seconds = rest_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._destinations: dict[str, _Destination] = {}

    def admit(self, destination: str) -> bool:
        """Whether a request to `destination` may start now; if so it counts as under way
        until `done`."""
        with self._lock:
            state = self._destinations.setdefault(destination, _Destination())
            if self._blocked(state):
                return False
            state.in_flight += 1
            return True

    def done(self, destination: str, *, timed_out: bool, answered: bool) -> None:
        """A request admitted to `destination` ended: `timed_out` counts toward a rest (the
        last of `timeouts_max` in a row starts it); `answered` (any HTTP status) ends the
        run of timeouts. A refused connection is neither: it costs a sender no time."""
        with self._lock:
            state = self._destinations.setdefault(destination, _Destination())
            state.in_flight = max(0, state.in_flight - 1)
            if timed_out:
                state.timeouts += 1
                if state.timeouts >= self.timeouts_max:
                    state.rests_until = self._clock() + self.rest_seconds
            elif answered:
                state.timeouts = 0
                state.rests_until = 0.0
            if not state.in_flight and not state.timeouts:
                del self._destinations[destination]  # nothing to remember

    def blocked(self, destination: str) -> bool:
        """Whether `admit` would refuse `destination` now (at its limit, or resting)."""
        with self._lock:
            state = self._destinations.get(destination)
            return state is not None and self._blocked(state)

    def resting(self) -> list[str]:
        """The destinations resting now."""
        with self._lock:
            now = self._clock()
            return [d for d, s in self._destinations.items() if s.rests_until > now]

    def _blocked(self, state: _Destination) -> bool:
        return state.in_flight >= self.per_destination_max or state.rests_until > self._clock()

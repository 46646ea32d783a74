"""The per-store limit on concurrent attempts (docs/design.md §3, sharing): a store is a lease
lane, whose in-progress attempts every worker of the store counts at claim time, and the
metrics that show it."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leases import Lane

LANE_PREFIX = "store:"
LANE_DIGEST_HEX_CHARS = 40
"""A store's lane is named by a digest of its canonical URL (which may be 1,100 characters;
a lane name has at most 64): the same name in every process of the fleet."""
READ_CACHE_SECONDS = 5.0
"""A scrape reads the store's in-progress count at most this often."""


def store_lane(store_url: str, max_concurrent: int | None) -> Lane | None:
    """The lane a worker of `store_url` claims in, or None without a limit."""
    if max_concurrent is None:
        return None
    digest = hashlib.sha256(store_url.encode()).hexdigest()[:LANE_DIGEST_HEX_CHARS]
    return Lane(LANE_PREFIX + digest, max_concurrent)


class StoreLimitCollector(Collector):
    """`batchcrop_store_max_concurrent{store}` (this worker's setting) and
    `batchcrop_store_attempts_in_progress{store}` (the fleet's attempts writing to the store
    now, read when scraped, at most every `READ_CACHE_SECONDS`; absent while the database is
    down)."""

    def __init__(self, store_url: str, lane: Lane, read: Callable[[str], int]) -> None:
        self._store = store_url
        self._lane = lane
        self._read = read
        self._lock = threading.Lock()
        self._last: tuple[float, int] | None = None

    def describe(self) -> list[Metric]:
        return list(self._families(None))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= READ_CACHE_SECONDS:
                try:
                    self._last = (now, self._read(self._lane.name))
                except Exception:
                    logging.getLogger("batchcrop").debug("store count failed", exc_info=True)
                    self._last = None
            count = None if self._last is None else self._last[1]
        yield from self._families(count)

    def _families(self, in_progress: int | None) -> Iterator[Metric]:
        limit = GaugeMetricFamily(
            "batchcrop_store_max_concurrent",
            "This worker's limit on the attempts in progress at once, across the fleet, that "
            "write to its store (BATCHCROP_STORE_MAX_CONCURRENT).",
            labels=["store"],
        )
        held = GaugeMetricFamily(
            "batchcrop_store_attempts_in_progress",
            "Attempts in progress now, across the fleet, counted against the store's limit.",
            labels=["store"],
        )
        limit.add_metric([self._store], self._lane.max_in_progress)
        if in_progress is not None:
            held.add_metric([self._store], in_progress)
        yield limit
        yield held

"""Time-to-recovery after each SIGKILL, from the event log (docs/design.md §3, G').

A SIGKILLed worker cannot end its attempts: each item it held at the kill stays `in_progress`
until a reaper pass or a live worker's refresh releases it (`worker_lost` once the worker is not
seen for the worker timeout, or `lease_expired` once the lease ran out, whichever comes first),
and another worker claims it again after the retry backoff. Both moments are read afterwards
from the items' events (the database's clock; the harness's database runs on this machine, so
the kill's wall-clock time is on the same clock).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from leases import EventRow, State


@dataclass(frozen=True)
class Kill:
    """One SIGKILL: the process and when (aware UTC)."""

    pid: int
    at: datetime


@dataclass(frozen=True)
class Recovery:
    """One item the killed worker held: seconds from the kill to its release (None: never
    released) and to its next claim (None: never claimed again), the release's reason and the
    state it released the item to (`retryable`, or `abandoned`/`failed`: no next claim)."""

    pid: int
    item_id: str
    released: float | None
    reclaimed: float | None
    reason: str | None
    released_to: State | None


def recoveries(kills: Iterable[Kill], events: Iterable[EventRow]) -> list[Recovery]:
    """Every item each killed worker held at its kill, with its recovery times."""
    by_item: dict[str, list[EventRow]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.id):
        by_item[event.item_id].append(event)
    found = []
    for kill in kills:
        marker = f":{kill.pid}:"  # worker ids are host:pid:random (batchcrop.worker.worker)
        for item_id, timeline in by_item.items():
            recovery = _recovery(kill, marker, item_id, timeline)
            if recovery is not None:
                found.append(recovery)
    return found


def _recovery(kill: Kill, marker: str, item_id: str, timeline: list[EventRow]) -> Recovery | None:
    claim = None
    for index, event in enumerate(timeline):
        if event.at > kill.at:
            break
        if event.to_state == State.IN_PROGRESS and marker in (event.worker_id or ""):
            claim = index
    if claim is None:
        return None
    after = timeline[claim + 1 :]
    if after and after[0].at <= kill.at:
        return None  # that attempt ended before the kill: not held
    release = next((e for e in after if e.from_state == State.IN_PROGRESS), None)
    reclaim = next((e for e in after if e.to_state == State.IN_PROGRESS), None)
    return Recovery(
        pid=kill.pid,
        item_id=item_id,
        released=None if release is None else (release.at - kill.at).total_seconds(),
        reclaimed=None if reclaim is None else (reclaim.at - kill.at).total_seconds(),
        reason=None if release is None else release.reason,
        released_to=None if release is None else release.to_state,
    )


def summary(values: Iterable[float | None]) -> str:
    """`median 3.4 s, max 4.1 s (n=7)`, or `none`; a value never reached counts as missing."""
    got = [v for v in values if v is not None]
    if not got:
        return "none"
    return f"median {statistics.median(got):.1f} s, max {max(got):.1f} s (n={len(got)})"

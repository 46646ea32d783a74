"""The chaos harness's time-to-recovery measure (tests/chaos/recovery.py) on hand-made event
logs: which items a killed worker held, and when each was released and claimed again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

from leases import EventRow, State
from tests.chaos.recovery import Kill, recoveries, summary

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ids = count(1)


def _event(
    item: str,
    seconds: float,
    from_state: State | None,
    to_state: State,
    worker: str | None = None,
    *,
    reason: str | None = None,
) -> EventRow:
    return EventRow(
        id=next(ids),
        item_id=item,
        group_id="g",
        attempt=1,
        from_state=from_state,
        to_state=to_state,
        at=T0 + timedelta(seconds=seconds),
        worker_id=worker,
        lease_token=None,
        reason=reason,
        correlation_id=None,
    )


VICTIM = "host:4242:abc123"
OTHER = "host:77:def456"
Q, P, R, S = State.QUEUED, State.IN_PROGRESS, State.RETRYABLE, State.SUCCEEDED


def test_only_items_held_at_the_kill_are_measured() -> None:
    """Held at the kill (claimed before, still in progress): released and reclaimed seconds
    from the kill, with the reason. An attempt the victim ended before the kill, another
    worker's item and a claim after the kill (pid reused) are not counted."""
    events = [
        _event("held", 0, None, Q),
        _event("held", 1, Q, P, VICTIM),
        _event("held", 14.5, P, R, reason="worker_lost"),
        _event("held", 20, R, P, OTHER),
        _event("held", 21, P, S, OTHER),
        _event("done-before", 0, None, Q),
        _event("done-before", 2, Q, P, VICTIM),
        _event("done-before", 3, P, S, VICTIM),
        _event("others", 0, None, Q),
        _event("others", 5, Q, P, OTHER),
        _event("others", 6, P, S, OTHER),
        _event("later", 0, None, Q),
        _event("later", 12, Q, P, VICTIM),
        _event("never", 0, None, Q),
        _event("never", 9, Q, P, VICTIM),
    ]
    found = recoveries([Kill(4242, T0 + timedelta(seconds=10))], events)
    by_item = {r.item_id: r for r in found}
    assert set(by_item) == {"held", "never"}
    held = by_item["held"]
    assert (held.released, held.reclaimed, held.reason, held.released_to) == (
        4.5,
        10.0,
        "worker_lost",
        R,
    )
    never = by_item["never"]
    assert (never.released, never.reclaimed, never.reason) == (None, None, None)


def test_pid_is_matched_whole_and_summary_reads_well() -> None:
    """Pid 42 does not match worker host:4242:…; the summary skips what never happened."""
    events = [_event("x", 0, None, Q), _event("x", 1, Q, P, VICTIM)]
    assert recoveries([Kill(42, T0 + timedelta(seconds=5))], events) == []
    assert summary([3.0, None, 5.0, 4.0]) == "median 4.0 s, max 5.0 s (n=3)"
    assert summary([None]) == "none"

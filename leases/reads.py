"""Converting database rows into the public snapshot types."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from leases.models import CATEGORISED, EventRow, GroupSummary, ItemRow, State, from_ms


def summary(
    group: sa.Row[Any], totals: Sequence[sa.Row[Any]], oldest_unfinished: int | None
) -> GroupSummary:
    """A group summary from its row, its summed counters and its oldest unfinished item time."""
    counts = dict.fromkeys(State, 0)
    failures: Counter[str] = Counter()
    updated_at: int = group.created_at
    for row in totals:
        state = State(row.state)
        n = int(row.n)
        counts[state] += n
        if state in CATEGORISED and n:
            failures[row.category] += n
        updated_at = max(updated_at, int(row.updated_at))
    return GroupSummary(
        id=group.id,
        created_at=from_ms(group.created_at),
        deadline_at=from_ms(group.deadline_at),
        max_attempts=group.max_attempts,
        cancel_requested=bool(group.cancel_requested),
        total=sum(counts.values()),
        counts=counts,
        failures=dict(failures),
        updated_at=from_ms(updated_at),
        oldest_updated_at=None if oldest_unfinished is None else from_ms(oldest_unfinished),
    )


def item_row(row: sa.Row[Any]) -> ItemRow:
    """An item snapshot from a `lease_items` row."""
    return ItemRow(
        id=row.id,
        group_id=row.group_id,
        seq=row.seq,
        state=State(row.state),
        attempt=row.attempt,
        error_category=row.error_category,
        updated_at=from_ms(row.updated_at),
        payload=dict(row.payload),
    )


def event_row(row: sa.Row[Any]) -> EventRow:
    """An event snapshot from a `lease_events` row."""
    return EventRow(
        id=row.id,
        item_id=row.item_id,
        group_id=row.group_id,
        attempt=row.attempt,
        from_state=None if row.from_state is None else State(row.from_state),
        to_state=State(row.to_state),
        at=from_ms(row.at),
        worker_id=row.worker_id,
        lease_token=row.lease_token,
        reason=row.reason,
        correlation_id=row.correlation_id,
    )

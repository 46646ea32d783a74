"""Read operations of the lease manager, and the conversion of rows into snapshot types."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from leases import group_queries, queries
from leases.errors import NoSuchGroup
from leases.executor import Executor
from leases.models import (
    CATEGORISED,
    EventRow,
    GroupSummary,
    ItemRow,
    QueueStats,
    State,
    from_ms,
)


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
        priority=int(group.priority),
        paused=bool(group.paused),
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
        error_message=row.error_message,
        lease_token=getattr(row, "lease_token", None),
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
        message=row.message,
    )


class Reader:
    """The read side of `LeaseManager`: summaries, pages of items and events, audits.

    Every read is one read-only transaction (a deferred BEGIN on SQLite, never queued behind
    writers).
    """

    _db: Executor

    def group(self, group_id: str, *, conn: sa.Connection | None = None) -> GroupSummary:
        """The group's summary from its counters (cost independent of its size). `NoSuchGroup`.

        With `conn`, read in the caller's transaction (a finish hook sees its own moves)."""
        with self._reading(conn) as c:
            found = self._summary(c, group_id)
        if found is None:
            raise NoSuchGroup(group_id)
        return found

    def groups(self, group_ids: Sequence[str]) -> list[GroupSummary]:
        """Summaries of the groups that exist among `group_ids`, in the given order."""
        with self._db.read() as c:
            found = [self._summary(c, group_id) for group_id in group_ids]
        return [s for s in found if s is not None]

    def version(self, group_ids: Sequence[str], *, conn: sa.Connection | None = None) -> str | None:
        """A token that changes whenever the summary of any of `group_ids` may have changed:
        every transition of their items, a cancel, a new deadline, a new priority, a pause or a
        resume, a group among them appearing
        or going (docs/design.md §3, group versions). None when the first group does not exist.

        One statement returning a row per group, whatever their size: compare it with the token
        read alongside an earlier summary before reading the summary again. Read it *before* the
        summaries it stands for (never after), so that it is never newer than they are."""
        params = {"p_group_ids": list(group_ids)}
        with self._reading(conn, single=True) as c:
            found = self._db.rows(c, group_queries.versions(), params)
        rows = {str(r.id): r for r in found}
        if not group_ids or group_ids[0] not in rows:
            return None
        return ";".join(
            f"{r.id}:{int(r.version)}:{r.changed_at}:{int(bool(r.cancel_requested))}"
            f":{int(r.deadline_at)}:{int(r.priority)}:{int(bool(r.paused))}"
            for r in (rows[g] for g in group_ids if g in rows)
        )

    def _summary(self, c: sa.Connection, group_id: str) -> GroupSummary | None:
        group = self._db.one(c, group_queries.group_row(group_id))
        if group is None:
            return None
        totals = self._db.rows(c, group_queries.counter_totals(group_id))
        oldest = self._db.scalar(c, group_queries.oldest_unfinished(group_id))
        return summary(group, totals, oldest)

    def open_groups(self) -> list[str]:
        """Ids of the groups a claim may take from now: sealed, neither cancelled, paused nor past
        their deadline, with unfinished items (a claimer that filters groups by its own rules, and
        passes them as `claim(group_ids=...)`, starts from these)."""
        with self._db.read() as c:
            return [str(row.id) for row in self._db.rows(c, queries.open_groups_with_work())]

    def lane_in_progress(self, name: str) -> int:
        """How many items claimed under lane `name` are in progress now (one index range)."""
        with self._db.read() as c:
            row = self._db.one(c, queries.lane_in_progress(), {"p_lane": name})
        return 0 if row is None else int(row[0])

    def queue(self) -> QueueStats:
        """The whole queue: unfinished items by state and the head of the line's waiting time
        (what an autoscaler scales on). Two cheap reads: the counters and one index probe."""
        with self._db.read() as c:
            rows = self._db.rows(c, group_queries.queue_depth())
            age_ms = self._db.scalar(c, group_queries.head_queued_age_ms())
        counts = {State(r.state): int(r.n or 0) for r in rows}
        age = None if age_ms is None else max(0.0, int(age_ms) / 1000)
        return QueueStats(counts=counts, head_queued_age_seconds=age)

    def item_ids_with_prefix(self, prefix: str, *, group_id: str | None = None) -> list[str]:
        """Up to two ids of items (of `group_id`, if given) that start with `prefix`: one means
        the prefix names that item, two that it is ambiguous. Only `0-9 a-f -` are looked up."""
        if not prefix or not all(c in "0123456789abcdef-" for c in prefix):
            return []
        with self._db.read() as c:
            rows = self._db.rows(c, group_queries.item_ids_with_prefix(prefix, group_id))
        return [str(r.id) for r in rows]

    @contextmanager
    def _reading(
        self, conn: sa.Connection | None, *, single: bool = False
    ) -> Iterator[sa.Connection]:
        """The caller's transaction `conn`, else a read transaction of our own; `single`: the
        caller runs one statement only (no transaction needed on PostgreSQL)."""
        if conn is not None:
            with self._db.translate_errors():
                yield conn
            return
        with self._db.read_one() if single else self._db.read() as c:
            yield c

    def item(self, item_id: str, *, conn: sa.Connection | None = None) -> ItemRow | None:
        """One item, or None (with `conn`: in the caller's transaction)."""
        with self._reading(conn) as c:
            row = self._db.one(c, group_queries.item_row(item_id))
        return None if row is None else item_row(row)

    def items(
        self,
        group_id: str,
        *,
        states: Collection[State] | None = None,
        after_seq: int | None = None,
        limit: int = 100,
    ) -> list[ItemRow]:
        """A page of the group's items ordered by `seq`; page on with `after_seq`."""
        with self._db.read() as c:
            rows = self._db.rows(c, group_queries.item_rows(group_id, states, after_seq, limit))
        return [item_row(row) for row in rows]

    def events(
        self,
        group_id: str | Sequence[str],
        *,
        item_id: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[EventRow]:
        """A page of the group's (or one item's) events ordered by id; page on with `after_id`.
        Several groups' ids: their events merged in id order."""
        group_ids = [group_id] if isinstance(group_id, str) else list(group_id)
        with self._db.read() as c:
            stmt = group_queries.event_rows(group_ids, item_id, after_id, limit)
            rows = self._db.rows(c, stmt)
        return [event_row(row) for row in rows]

    def recount(self, group_id: str) -> dict[tuple[State, str], int]:
        """Items by (state, counted category) from a GROUP BY over the items (a full scan).

        The category is the error category for failed/abandoned items, else ''. For audits and
        tests: it must always equal `counted()`.
        """
        with self._db.read() as c:
            rows = self._db.rows(c, group_queries.recount(group_id))
        return {(State(r.state), r.category): int(r.n) for r in rows}

    def counted(self, group_id: str) -> dict[tuple[State, str], int]:
        """The same view as `recount()` read from the sharded counters (zero entries omitted)."""
        with self._db.read() as c:
            rows = self._db.rows(c, group_queries.counter_totals(group_id))
        return {(State(r.state), r.category): int(r.n) for r in rows if int(r.n) != 0}

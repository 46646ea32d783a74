"""`LeaseManager`: the domain operations of the lease engine (docs/design.md §3, transitions A-J).

Every operation is one database transaction (or runs in the caller's, where a `conn` is taken).
Every write about a held item is one fenced compare-and-set UPDATE whose matched row count is
checked (`LeaseLost` when zero), with its event row and counter deltas in the same transaction.
All times come from the database clock. Methods are thread-safe; share one manager per engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.sql.dml import Update

from leases import (
    creation,
    group_queries,
    held_queries,
    pgqueries,
    queries,
    registry,
    schema,
    transitions,
)
from leases.defaults import (
    LEASE_SECONDS,
    MAX_ATTEMPT_SECONDS,
    PRIORITY_AGING_SECONDS,
    WORKER_TIMEOUT_SECONDS,
)
from leases.engine import creation_turn
from leases.errors import (
    DatabaseUnavailable,
    GroupCancelled,
    GroupEnded,
    GroupExists,
    LeaseLost,
    NoSuchGroup,
    NoSuchItem,
    NotRedoable,
    RequeueNeedsDeadline,
)
from leases.executor import Executor
from leases.models import (
    MESSAGE_MAX_CHARS,
    REDOABLE,
    REQUEUEABLE,
    TERMINAL,
    Claim,
    Ending,
    HeartbeatReply,
    HeldItem,
    ItemPair,
    Lane,
    ReapResult,
    State,
    StopReason,
    WorkerRow,
    check_priority,
    from_ms,
    to_ms,
)
from leases.reads import Reader
from leases.sharing import Sharing, lane_lock_key
from leases.transitions import Source
from leases.wakeups import announce

RETRY_BACKOFF_SECONDS = 5.0
RETRY_BACKOFF_MAX_SECONDS = 300.0
COUNTER_SHARDS = 8
# The most items `add_group` writes in its caller's transaction (creation chunks are sized by
# their own pace: `leases.creation`).
CREATE_BATCH_ROWS = 2000
# Rows per reaper/cancel UPDATE or DELETE (each its own transaction): this bounds how long any one
# of them holds SQLite's write lock and the memory used on million-item groups.
MOVE_BATCH_ROWS = 5000
# Rows per purge DELETE (each its own transaction, a pause after each on SQLite): a purge must
# never hold SQLite's write lock, or PostgreSQL's locks, long enough to delay a claim.
PURGE_BATCH_ROWS = 2000
# SQLite: the gap after each creation chunk (and each purge batch), before the creation's next
# write. A writer that queued behind the chunk (at most about 0.1 s) polls the lock every 25 ms
# or less by then, so it gets its turn in this gap.
CREATE_PAUSE_SECONDS = 0.03
# A group still unsealed this long after its creation began was left by a crashed submitter (a
# million items take well under a minute): the reaper deletes it; it was never visible.
UNSEALED_EXPIRY_SECONDS = 3600.0
# A group at least this large refreshes PostgreSQL's statistics when created: planned against
# stale statistics (say, an empty queue), claims would sort every queued row instead of walking
# the queue index, until autovacuum caught up.
ANALYZE_AFTER_ITEMS = 1000
# The row of a worker not seen for this long is deleted by the reaper (its leases are long
# released); until then operators see it as absent.
WORKER_FORGET_SECONDS = 3600.0
# Worker transitions: out of `in_progress`, logged with the attempt's own correlation id.
WORKER_SOURCE = Source(State.IN_PROGRESS)
# Groups whose `notify_finish` flag (fixed at creation) a manager remembers; past this the memory
# is simply cleared and read again.
WATCHED_CACHE_GROUPS = 10_000

GroupFinished = Callable[[sa.Connection, str], object]
_T = TypeVar("_T")
"""The finish hook: called with the transaction's connection and the group's id, inside the
transaction that ended the last unfinished item of a group created with `notify_finish`."""


class LeaseManager(Sharing, Reader):
    """Claims, heartbeats, fenced transitions, reaper, cancel, requeue and reads on one engine."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        lease_seconds: float = LEASE_SECONDS,
        max_attempt_seconds: float = MAX_ATTEMPT_SECONDS,
        retry_backoff_seconds: float = RETRY_BACKOFF_SECONDS,
        retry_backoff_max_seconds: float = RETRY_BACKOFF_MAX_SECONDS,
        counter_shards: int = COUNTER_SHARDS,
        worker_timeout_seconds: float = WORKER_TIMEOUT_SECONDS,
        on_group_finished: GroupFinished | None = None,
        priority_aging_seconds: float = PRIORITY_AGING_SECONDS,
    ) -> None:
        if priority_aging_seconds <= 0:
            raise ValueError("priority_aging_seconds must be > 0")
        self._aging_ms = max(1, to_ms(priority_aging_seconds))
        if lease_seconds <= 0 or max_attempt_seconds <= 0 or counter_shards < 1:
            raise ValueError("lease_seconds, max_attempt_seconds and counter_shards must be > 0")
        if worker_timeout_seconds <= 0:
            raise ValueError("worker_timeout_seconds must be > 0")
        self.worker_timeout_seconds = worker_timeout_seconds
        self._db = Executor(engine)
        self._engine = engine
        self.lease_seconds = lease_seconds
        self.max_attempt_seconds = max_attempt_seconds
        self._backoff_ms = to_ms(retry_backoff_seconds)
        self._backoff_max_ms = max(self._backoff_ms, to_ms(retry_backoff_max_seconds))
        self._shards = counter_shards
        self.on_group_finished = on_group_finished
        self._watched: dict[str, bool] = {}

    def transaction(self) -> AbstractContextManager[sa.Connection]:
        """A write transaction (BEGIN IMMEDIATE on SQLite) to pass as `conn=`; commits on exit."""
        return self._db.write()

    def reading(self) -> AbstractContextManager[sa.Connection]:
        """A read-only transaction for the caller's queries; outages raise DatabaseUnavailable."""
        return self._db.read()

    # --- creation ---------------------------------------------------------------------------

    def create_group(
        self,
        group_id: str,
        *,
        deadline_seconds: float,
        max_attempts: int,
        items: Iterable[ItemPair],
        on_seal: Callable[[sa.Connection], object] | None = None,
        notify_finish: bool = False,
        priority: int = 0,
    ) -> int:
        """Create a group and its items (`NewItem`s or (id, payload) pairs, all `queued`, in
        iteration order); returns the count.

        Atomic for readers and claimers, yet no transaction is long however many items there are:
        the group is written unsealed, its items in chunks paced to a fraction of a second each
        (`leases.creation`; no events: an item's creation is its row), and one
        short last transaction seals it and runs `on_seal(conn)` (the caller's own rows that must
        appear with the group). Until sealed a group takes no claims and is not found by any read,
        cancel, requeue or reaper pass; its deadline counts from the seal. When creation fails
        part-way its rows are deleted, here or, after a crash, by the reaper once nothing has been
        written for `UNSEALED_EXPIRY_SECONDS`. Raises `GroupExists` if the id is taken.
        `notify_finish`: the finish hook (`on_group_finished`) runs in the transaction that ends
        the group's last unfinished item, every time it does (after a requeue too). `priority`
        ranks its claims (`set_priority`; ValueError outside the bounds).
        """
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        check_priority(priority)
        with creation_turn(self._engine):
            return self._create(
                group_id,
                deadline_seconds,
                max_attempts,
                items,
                on_seal=on_seal,
                notify_finish=notify_finish,
                priority=priority,
            )

    def add_group(
        self,
        conn: sa.Connection,
        group_id: str,
        *,
        deadline_seconds: float,
        max_attempts: int,
        items: Sequence[ItemPair],
    ) -> None:
        """Create a small group (at most `CREATE_BATCH_ROWS` items) sealed at once, in the
        caller's transaction `conn` (`transaction()`, or a finish hook's): it exists when that
        transaction commits, or not at all. Raises `GroupExists` (or `ConstraintViolation` on a
        concurrent creation of the same id)."""
        if max_attempts < 1 or not 1 <= len(items) <= CREATE_BATCH_ROWS:
            raise ValueError(f"a group added in a transaction has 1 to {CREATE_BATCH_ROWS} items")
        with self._db.write(conn) as c:
            now = self._insert_group(
                c, group_id, deadline_seconds, max_attempts, sealed=True, notify_finish=False
            )
            self._insert_items(c, group_id, items, first_seq=0, now=now)
            announce(self._db, c)

    def _create(
        self,
        group_id: str,
        deadline_seconds: float,
        max_attempts: int,
        items: Iterable[ItemPair],
        *,
        on_seal: Callable[[sa.Connection], object] | None,
        notify_finish: bool,
        priority: int,
    ) -> int:
        db = self._db
        with db.session() as session:
            with db.write(on=session) as c:
                self._insert_group(
                    c,
                    group_id,
                    deadline_seconds,
                    max_attempts,
                    sealed=False,
                    notify_finish=notify_finish,
                    priority=priority,
                )
            pacer = creation.Pacer(CREATE_PAUSE_SECONDS if db.dialect_name == "sqlite" else 0.0)
            try:
                created = self._add_items(session, group_id, items, pacer)
                if created >= ANALYZE_AFTER_ITEMS and db.dialect_name == "postgresql":
                    with db.write(on=session) as c:
                        db.execute(c, queries.analyze_items())
                pacer.wait()
                with db.write(on=session) as c:
                    if db.rowcount(c, group_queries.seal(group_id, to_ms(deadline_seconds))) == 0:
                        raise NoSuchGroup(group_id)
                    if on_seal is not None:
                        on_seal(c)
                    announce(db, c)
            except BaseException:
                # Interrupts too (Ctrl-C): half a group would otherwise wait an hour for the
                # reaper. A failing clean-up must not hide why the creation failed; the reaper
                # retries it.
                with contextlib.suppress(Exception):
                    self._discard_unsealed(group_id, expiry_ms=0)
                raise
        return created

    def _add_items(
        self,
        session: sa.Connection,
        group_id: str,
        items: Iterable[ItemPair],
        pacer: creation.Pacer,
    ) -> int:
        """Insert the items of an unsealed group on `session`, one short transaction per
        chunk, each sized by the pace of the last (`creation.ChunkSizer`) and read from `items`
        only once the previous one has committed. A chunk's rows are prepared before its
        transaction begins, in the gap `pacer` leaves other writers (SQLite), as is the WAL
        checkpoint its commit calls for."""
        db = self._db
        locked = group_queries.group_row(group_id, lock=True, sealed_only=False)
        sizer = creation.ChunkSizer(creation.chunk_seconds(db.dialect_name))
        iterator = iter(items)
        seq = 0
        while chunk := list(itertools.islice(iterator, sizer.rows)):
            prepared = creation.prepared_rows(db.dialect_name, chunk)
            pacer.wait()
            try:
                with db.write(on=session) as c:
                    # The write lock is held from here (SQLite's BEGIN IMMEDIATE has returned).
                    started = time.perf_counter()
                    group = db.one(c, locked)
                    if group is None or group.sealed:
                        raise NoSuchGroup(group_id)
                    # Every item and counter is dated at the group's creation, whichever
                    # transaction writes it.
                    self._insert_items(
                        c, group_id, chunk, first_seq=seq, now=group.created_at, prepared=prepared
                    )
                held = time.perf_counter() - started
            finally:
                pacer.ended()
            db.checkpoint(session)
            sizer.took(len(chunk), held)
            seq += len(chunk)
        return seq

    def _insert_group(
        self,
        c: sa.Connection,
        group_id: str,
        deadline_seconds: float,
        max_attempts: int,
        *,
        sealed: bool,
        notify_finish: bool,
        priority: int = 0,
    ) -> int:
        """Write the group's row (GroupExists if the id is taken); returns its creation time."""
        db = self._db
        if db.one(c, group_queries.group_row(group_id, sealed_only=False)) is not None:
            raise GroupExists(group_id)
        now: int = db.scalar(c, queries.select_now())
        group = {
            "id": group_id,
            "created_at": now,
            "deadline_at": now + to_ms(deadline_seconds),
            "max_attempts": max_attempts,
            "cancel_requested": False,
            "sealed": sealed,
            "notify_finish": notify_finish,
            "priority": priority,
            "paused": False,
        }
        db.execute_many(c, group_queries.insert_group(), [group])
        return now

    def _insert_items(
        self,
        c: sa.Connection,
        group_id: str,
        items: Sequence[ItemPair],
        *,
        first_seq: int,
        now: int,
        prepared: str | None = None,
    ) -> int:
        """Write `items` queued from `first_seq` on and their counters (no events: an item's
        creation is its row, ADR 0023); `prepared`: `creation.prepared_rows` of the items."""
        creation.write_items(
            self._db, c, group_id, items, first_seq=first_seq, now=now, prepared=prepared
        )
        per_shard = transitions.shard_counts(first_seq, len(items), self._shards)
        deltas = [((group_id, State.QUEUED.value, "", s), n) for s, n in per_shard.items()]
        transitions.add(self._db, c, deltas, now)
        return len(items)

    def _discard_unsealed(self, group_id: str, *, expiry_ms: int) -> None:
        """Delete an unsealed group created `expiry_ms` ago or more, a batch of rows per
        transaction; every transaction re-checks that under the group's row lock, which the
        creator's own transactions take too, so the last one deletes whatever is left."""
        db = self._db
        locked = group_queries.group_row(group_id, lock=True, sealed_only=False)

        def still_discardable(c: sa.Connection) -> bool:
            group = db.one(c, locked)
            return (
                group is not None and not group.sealed and group.created_at <= group.now - expiry_ms
            )

        self._delete_group(group_id, still_discardable, MOVE_BATCH_ROWS, pause=False)

    def _delete_group(
        self,
        group_id: str,
        deletable: Callable[[sa.Connection], bool],
        batch_rows: int,
        *,
        pause: bool,
    ) -> int:
        """Delete a group's events and items `batch_rows` per transaction, then its counters and
        row, each transaction first checking `deletable` (which takes the group's row lock);
        returns the rows deleted. Stops as soon as the check fails; a call cut short is
        completed by calling again."""
        db = self._db
        total = 0
        for table in (schema.events, schema.items):
            deleted = batch_rows
            while deleted == batch_rows:
                with db.write() as c:
                    if not deletable(c):
                        return total
                    stmt = group_queries.delete_group_rows(table, group_id, batch_rows)
                    deleted = db.rowcount(c, stmt)
                total += deleted
                if pause and db.dialect_name == "sqlite":
                    time.sleep(CREATE_PAUSE_SECONDS)
        with db.write() as c:
            if deletable(c):
                for stmt in (
                    group_queries.delete_group_rows(schema.events, group_id),
                    group_queries.delete_group_rows(schema.items, group_id),
                    group_queries.delete_counters(group_id),
                    group_queries.delete_group(group_id),
                ):
                    total += db.rowcount(c, stmt)
        return total

    # --- retention ----------------------------------------------------------------------------

    def finished_groups(self, older_than_seconds: float) -> list[str]:
        """Ids of the groups whose items are all terminal and whose last transition is at least
        `older_than_seconds` old (database time), oldest first: what `purge` may delete."""
        with self._db.read() as c:
            stmt = group_queries.finished_before(to_ms(older_than_seconds))
            return [str(row.id) for row in self._db.rows(c, stmt)]

    @contextlib.contextmanager
    def if_finished(
        self, group_id: str, *, older_than_seconds: float | None = None
    ) -> Iterator[sa.Connection | None]:
        """A write transaction holding the group's row lock, yielded only while every item of
        the group is terminal (else None): the caller's own rows about a finished group are
        deleted there, safe from a concurrent requeue (which takes the same lock). With
        `older_than_seconds`, also only while its last transition is at least that old: the
        cutoff of `finished_groups` re-checked under the lock, since a group requeued and
        ended again after it was listed is finished but young."""
        with self._db.write() as c:
            yield c if self._finished(c, group_id, older_than_seconds) else None

    def _finished(
        self, c: sa.Connection, group_id: str, older_than_seconds: float | None = None
    ) -> bool:
        locked = group_queries.group_row(group_id, lock=True)
        if self._db.one(c, locked) is None:
            return False
        if older_than_seconds is not None:
            old = group_queries.finished_before(to_ms(older_than_seconds), group_id)
            return self._db.one(c, old) is not None
        return self._db.one(c, group_queries.has_unfinished(group_id)) is None

    def purge(self, group_id: str) -> int:
        """Delete a finished group: its events, items, counters and row, `PURGE_BATCH_ROWS` per
        transaction (each re-checks, under the group's row lock, that no item is unfinished: a
        requeue takes the same lock, and stops the purge). Returns the rows deleted; 0 when the
        group is gone or not finished. A purge cut short is completed by calling it again."""
        return self._delete_group(
            group_id, lambda c: self._finished(c, group_id), PURGE_BATCH_ROWS, pause=True
        )

    # --- worker side: claim, heartbeat, fenced transitions -----------------------------------

    def claim(
        self,
        worker_id: str,
        limit: int,
        *,
        group_ids: Sequence[str] | None = None,
        lane: Lane | None = None,
    ) -> list[Claim]:
        """A: claim up to `limit` items of open groups: due retryable first, then queued ones by
        their group's effective priority (docs/design.md §3, sharing), then by seq.

        Never claims in a group past its deadline, paused or with cancel requested. Safe from
        any number of threads and processes at once: an attempt is given to exactly one
        claimer. With `lane`, claims only while fewer than `lane.max_in_progress` items claimed
        under that lane are in progress, counted in the claim's transaction under a lock of the
        lane (PostgreSQL: a transaction-level advisory lock; SQLite: the write lock), so
        claimers of one lane at once never exceed it.
        """
        if limit < 1 or (group_ids is not None and not group_ids):
            return []
        params: dict[str, Any] = {"p_worker_id": worker_id, "p_lane": None}
        if group_ids is not None:
            params["p_group_ids"] = list(group_ids)
        if lane is None:
            claimed = self._claim(None, params, limit)
        else:
            params["p_lane"] = lane.name
            with self._db.write() as c:
                if self._db.dialect_name == "postgresql":
                    self._db.execute(c, pgqueries.lock_lane(), {"p_key": lane_lock_key(lane.name)})
                counted = self._db.one(c, queries.lane_in_progress(), {"p_lane": lane.name})
                room = lane.max_in_progress - (0 if counted is None else int(counted[0]))
                claimed = self._claim(c, params, min(limit, room)) if room > 0 else []
        return [
            Claim(
                item_id=row.id,
                group_id=row.group_id,
                attempt=row.attempt,
                lease_token=row.lease_token,
                lease_expires_at=from_ms(row.lease_expires_at),
                payload=dict(row.payload),
                correlation_id=row.correlation_id,
            )
            for row in claimed
        ]

    def _claim(
        self, conn: sa.Connection | None, params: dict[str, Any], limit: int
    ) -> list[sa.Row[Any]]:
        lease_ms = to_ms(self.lease_seconds)
        filtered = "p_group_ids" in params
        if self._db.dialect_name == "postgresql":
            stmt = pgqueries.claim(
                limit=limit, lease_ms=lease_ms, filtered=filtered, aging_ms=self._aging_ms
            )
            return list(self._move(stmt, params, Source(None), conn))
        # One writer at a time (BEGIN IMMEDIATE): due retryable items, then queued ones.
        claimed: list[sa.Row[Any]] = []
        moves: list[tuple[Sequence[sa.Row[Any]], Source]] = []
        with self._db.write(conn) as c:
            for from_state in (State.RETRYABLE, State.QUEUED):
                want = limit - len(claimed)
                if want <= 0:
                    break
                stmt = queries.claim(
                    from_state,
                    limit=want,
                    lease_ms=lease_ms,
                    filtered=filtered,
                    aging_ms=self._aging_ms,
                )
                rows = self._db.rows(c, stmt, params)
                moves.append((rows, Source(from_state)))
                claimed.extend(rows)
            transitions.record(self._db, c, moves, self._shards)
        return claimed

    def heartbeat(self, claim: Claim) -> HeartbeatReply:
        """B: extend the lease by `lease_seconds` from now, unless the attempt should stop.

        The lease is not extended, and `stop_reason` says why, when the group is cancelled or
        past its deadline or the attempt has run `max_attempt_seconds` (`queries.stop_reason`
        decides, in the same statement). Raises `LeaseLost`.
        """
        stmt = queries.heartbeat(
            lease_ms=to_ms(self.lease_seconds), max_attempt_ms=to_ms(self.max_attempt_seconds)
        )
        with self._db.single() as c:
            replied = self._db.fetch(c, stmt, _lease(claim))
        if not replied:
            raise LeaseLost(claim.item_id)
        status = replied[0]
        return HeartbeatReply(from_ms(status.lease_expires_at), _reason(status.stop_reason))

    def check(self, claim: Claim) -> StopReason | None:
        """Raise `LeaseLost` unless the lease is still held (read-only); else the reason the
        attempt must stop now, if any, so a holder can stop without waiting for a heartbeat."""
        stmt = queries.check_lease(max_attempt_ms=to_ms(self.max_attempt_seconds))
        with self._db.read() as c:
            held = self._db.fetch(c, stmt, _lease(claim))
        if not held:
            raise LeaseLost(claim.item_id)
        return _reason(held[0].stop_reason)

    def complete(
        self, claim: Claim, *, note: str | None = None, conn: sa.Connection | None = None
    ) -> None:
        """C: `succeeded`. With `conn`, in the caller's transaction (roll it back on LeaseLost).
        A `note` is kept on the success's event only (what the attempt had to work around;
        clipped as a message), never on the item, whose message says why an attempt failed."""
        source = (
            WORKER_SOURCE
            if note is None
            else dataclasses.replace(WORKER_SOURCE, message=note[:MESSAGE_MAX_CHARS])
        )
        self._fenced(queries.finish(State.SUCCEEDED), claim, None, source=source, conn=conn)

    def fail(
        self,
        claim: Claim,
        category: str,
        *,
        message: str | None = None,
        conn: sa.Connection | None = None,
    ) -> None:
        """D: `failed` with a permanent error `category` and, optionally, a `message` saying
        why (kept on the item and its event, clipped to `MESSAGE_MAX_CHARS`; stored as given,
        so the caller makes it safe to show). Raises `LeaseLost`."""
        self._fenced(queries.finish(State.FAILED), claim, category, message=message, conn=conn)

    def retry_later(self, claim: Claim, category: str, *, message: str | None = None) -> State:
        """E: `retryable` after a jittered backoff, or `failed` `attempts_exhausted` at the cap;
        `message` as for `fail` (kept at the cap too: it says why the last attempt failed).

        Returns the state the item is now in. Raises `LeaseLost`.
        """
        stmt = queries.retry_later(base_ms=self._backoff_ms, max_ms=self._backoff_max_ms)
        state = State(self._fenced(stmt, claim, category, message=message).state)
        if state is State.RETRYABLE:
            announce(self._db, due=True)
        return state

    def give_back(self, claim: Claim) -> None:
        """F: back to `queued`, the attempt not counted (graceful shutdown). Raises `LeaseLost`."""
        source = Source(
            State.IN_PROGRESS, attempt_offset=1, reason="interrupted", to_terminal=False
        )
        self._fenced(queries.give_back(), claim, None, source=source)
        announce(self._db)

    def put_off(self, claim: Claim, category: str, *, message: str | None = None) -> None:
        """E': `retryable` after a jittered backoff WITHOUT counting the attempt: a dependency
        (the store, a source) was down, which says nothing about the item. `message` as for
        `fail`. Only the group's deadline bounds how often this happens. Raises `LeaseLost`."""
        stmt = queries.put_off(base_ms=self._backoff_ms, max_ms=self._backoff_max_ms)
        source = Source(State.IN_PROGRESS, attempt_offset=1, to_terminal=False)
        self._fenced(stmt, claim, category, message=message, source=source)

    def release(self, held: HeldItem, *, reason: str, message: str | None = None) -> bool:
        """G'': back to `queued`, the attempt not counted, like a give-back, for a lease its
        holder does not work on (no slot has it in flight); the event carries `reason` and
        `message` (who released it and why). Fenced by the lease token: False when the lease
        was no longer held (the attempt ended or was released meanwhile)."""
        source = Source(State.IN_PROGRESS, attempt_offset=1, reason=reason[:64], to_terminal=False)
        params = {
            "p_item_id": held.item_id,
            "p_lease_token": held.lease_token,
            "p_category": None,
            "p_message": None if message is None else message[:MESSAGE_MAX_CHARS],
        }
        return bool(self._move(queries.give_back(), params, source, None))

    def abandon(self, claim: Claim, category: str = StopReason.CANCELLED.value) -> None:
        """I: `abandoned` (the holder was told to stop: cancel or deadline). Raises `LeaseLost`."""
        self._fenced(queries.finish(State.ABANDONED), claim, category)

    def heartbeat_many(self, claims: Sequence[Claim]) -> list[HeartbeatReply | None]:
        """B for every lease one holder keeps, in ONE statement: each lease is extended by
        `lease_seconds` from now unless its attempt should stop, exactly as `heartbeat` decides
        for one. Returns a reply per claim, in order, None where the lease is lost (its token is
        stale: that row is not touched), so one lost lease never keeps the others from being
        renewed. Writes no event and leaves `updated_at` alone, as `heartbeat`."""
        if not claims:
            return []
        dialect = self._db.dialect_name
        stmt = held_queries.heartbeat_held(
            dialect,
            lease_ms=to_ms(self.lease_seconds),
            max_attempt_ms=to_ms(self.max_attempt_seconds),
        )
        leases = sorted({(c.item_id, c.lease_token) for c in claims})
        params = held_queries.held_params(dialect, held_queries.HELD_COLUMNS, leases)
        with self._db.single() as c:
            rows = self._db.fetch(c, stmt, params)
        held = {(row.id, row.lease_token): row for row in rows}
        replies: list[HeartbeatReply | None] = []
        for claim in claims:
            row = held.get((claim.item_id, claim.lease_token))
            replies.append(
                None
                if row is None
                else HeartbeatReply(from_ms(row.lease_expires_at), _reason(row.stop_reason))
            )
        return replies

    def finish_many(
        self, endings: Sequence[Ending], *, conn: sa.Connection | None = None
    ) -> list[Claim]:
        """C, D and I for several held attempts in one round trip: ONE statement on PostgreSQL
        (autocommit unless `conn`), one write transaction on SQLite. Each attempt is fenced by
        its own token and writes its own event row and counter deltas, as `complete`, `fail`
        and `abandon` do one at a time; the finish hook runs for every group left finished.

        Returns the claims whose lease was lost (stale token: nothing was written about them),
        in order; every other attempt ended whatever happened to those. Raises ValueError when
        one claim comes twice. With `conn`, in the caller's transaction.
        """
        if not endings:
            return []
        rows = sorted(
            (
                (
                    e.claim.item_id,
                    e.claim.lease_token,
                    e.state.value,
                    e.category,
                    None if e.message is None else e.message[:MESSAGE_MAX_CHARS],
                )
                for e in endings
            ),
            key=lambda row: (row[0], row[1]),
        )
        if len({(row[0], row[1]) for row in rows}) != len(rows):
            raise ValueError("each claim can be ended once")
        dialect = self._db.dialect_name
        stmt = held_queries.finish_held(dialect)
        params = held_queries.held_params(dialect, held_queries.ENDING_COLUMNS, rows)
        groups = sorted({e.claim.group_id for e in endings})
        if any(self._watches(group_id) for group_id in groups):
            # The moves, the groups' locks and the finished checks in one transaction.
            with self._db.write(conn) as c:
                moved = self._move(stmt, params, WORKER_SOURCE, c)
                self._after_move(c, moved)
        else:
            moved = self._move(stmt, params, WORKER_SOURCE, conn)
        ended = {(row.id, row.lease_token) for row in moved}
        return [e.claim for e in endings if (e.claim.item_id, e.claim.lease_token) not in ended]

    def complete_many(
        self, claims: Sequence[Claim], *, conn: sa.Connection | None = None
    ) -> list[Claim]:
        """C for several held attempts in one round trip: `finish_many`, every one `succeeded`.
        Returns the claims whose lease was lost."""
        return self.finish_many([Ending(claim) for claim in claims], conn=conn)

    def _fenced(
        self,
        stmt: Update,
        claim: Claim,
        category: str | None,
        *,
        message: str | None = None,
        source: Source = WORKER_SOURCE,
        conn: sa.Connection | None = None,
    ) -> sa.Row[Any]:
        clipped = None if message is None else message[:MESSAGE_MAX_CHARS]
        params = {**_lease(claim), "p_category": category, "p_message": clipped}
        if source.to_terminal and self._watches(claim.group_id):
            # The move, the group's lock and the finished check in one transaction.
            with self._db.write(conn) as c:
                rows = self._move(stmt, params, source, c)
                self._after_move(c, rows)
        else:
            rows = self._move(stmt, params, source, conn)
        if not rows:
            raise LeaseLost("lease not held: item moved on or token superseded")
        return rows[0]

    def _move(
        self, stmt: Update, params: dict[str, Any], source: Source, conn: sa.Connection | None
    ) -> Sequence[sa.Row[Any]]:
        """Run one move with its events and counters, atomically; return the moved rows.

        PostgreSQL: one statement (autocommit unless `conn`). SQLite: the move, then the log,
        in one write transaction (or the caller's).
        """
        if self._db.dialect_name == "postgresql":
            stmt_logged = pgqueries.logged(stmt, transitions.log_spec(source, self._shards))
            if source.correlation_id is not None:
                params = {**params, "log_correlation_id": source.correlation_id}
            if source.message is not None:
                params = {**params, "log_message": source.message}
            with self._db.single(conn) as c:
                return self._db.fetch(c, stmt_logged, params)
        with self._db.write(conn) as c:
            rows = self._db.rows(c, stmt, params)
            transitions.record(self._db, c, [(rows, source)], self._shards)
        return rows

    # --- the finish hook ---------------------------------------------------------------------

    def _watches(self, group_id: str, conn: sa.Connection | None = None) -> bool:
        """Whether `group_id` was created with `notify_finish` (and a hook is installed); the
        flag never changes, so it is read once per group and remembered."""
        if self.on_group_finished is None:
            return False
        watched = self._watched.get(group_id)
        if watched is None:
            stmt = group_queries.notify_finish_of(group_id)
            if conn is None:
                with self._db.read() as c:
                    watched = bool(self._db.scalar(c, stmt))
            else:
                watched = bool(self._db.scalar(conn, stmt))
            if len(self._watched) >= WATCHED_CACHE_GROUPS:
                self._watched.clear()
            self._watched[group_id] = watched
        return watched

    def _after_move(self, conn: sa.Connection, rows: Sequence[sa.Row[Any]]) -> None:
        """In the mover's transaction: for each watched group (sorted by id: one lock order)
        that one of `rows` left terminal, take the group's row lock, then run the finish hook
        if the group has no unfinished item left.

        The lock comes after the moved items' row locks, in every mover; the lock holders that
        move items afterwards (requeue, the closed-group abandons) never wait for an item a
        mover holds (they take failed/abandoned rows, or skip locked ones). They can wait for a
        counter row a mover wrote, though, while the mover waits here for the group: PostgreSQL
        then ends one of them as deadlocked, and the abandons retry (`_retrying_deadlocks`); a
        mover's failed commit is an outage its worker rides out. The lock serialises the last
        movers of a group: whoever takes it last sees the others' moves committed (PostgreSQL
        reads a fresh snapshot per statement), so two items ending at once cannot both miss the
        group's end, and only the last one sees it. SQLite has one writer at a time.
        """
        hook = self.on_group_finished
        if hook is None or not rows:
            return
        ended = sorted({r.group_id for r in rows if State(r.state) in TERMINAL})
        for group_id in ended:
            if not self._watches(group_id, conn):
                continue
            group = self._db.one(conn, group_queries.group_row(group_id, lock=True))
            if group is None or not group.notify_finish:
                continue
            if self._db.scalar(conn, group_queries.oldest_unfinished(group_id)) is None:
                hook(conn, group_id)

    # --- reaper and operator actions -------------------------------------------------------

    def reap(self) -> ReapResult:
        """G and H: one set-based pass; idempotent and safe from many processes at once.

        In cancelled groups and groups past their deadline, queued, retryable and expired
        in-progress items become `abandoned` (`cancelled` / `deadline_exceeded`). Then every
        other expired lease becomes `retryable` (`lease_expired`) or `failed`
        (`attempts_exhausted`) at the cap. Last, groups whose creation began
        `UNSEALED_EXPIRY_SECONDS` ago and never sealed are deleted. Each batch of moves is its
        own transaction. First of all, the leases of registered workers not seen for
        `worker_timeout_seconds` are released like expired ones (`worker_lost`), so that the
        same pass abandons them if their group is closed.
        """
        cid = transitions.new_correlation_id()
        released = self._release_absent(cid)
        moved: Counter[str] = Counter(released)
        with self._db.read() as c:
            closed = self._db.rows(c, queries.closed_groups_with_work())
        for group in closed:
            from_states = (State.QUEUED, State.RETRYABLE, State.IN_PROGRESS)
            moved += self._abandon_closed(group.id, from_states, cid)
        stmt = queries.retry_or_fail_expired(
            MOVE_BATCH_ROWS, base_ms=self._backoff_ms, max_ms=self._backoff_max_ms
        )
        moved += self._move_all(stmt, {}, Source(State.IN_PROGRESS, None, cid))
        expiry_ms = to_ms(UNSEALED_EXPIRY_SECONDS)
        with self._db.read() as c:
            stale = self._db.rows(c, group_queries.stale_unsealed(expiry_ms))
        for group in stale:
            self._discard_unsealed(group.id, expiry_ms=expiry_ms)
        return ReapResult(
            retried=moved[State.RETRYABLE.value],
            failed=moved[State.FAILED.value],
            abandoned=moved[State.ABANDONED.value],
            discarded_groups=len(stale),
            released=released.total(),
        )

    # --- worker registry ---------------------------------------------------------------------

    def worker_seen(
        self,
        worker_id: str,
        info: Mapping[str, Any],
        *,
        in_flight: Collection[str] | None = None,
    ) -> None:
        """Write or refresh `worker_id`'s registry row: seen now (database time), with `info`
        (the application's description of the process) and, when given, the ids of the items
        its slots work on now (`in_flight`, read just before this call). Call it at start and
        every few seconds (well within `worker_timeout_seconds`)."""
        values = dict(info)
        if in_flight is not None:
            values[registry.IN_FLIGHT_KEY] = sorted(in_flight)
        with self._db.write() as c:
            stmt = registry.seen(self._db.dialect_name)
            self._db.execute_many(c, stmt, [{"p_worker_id": worker_id, "p_info": values}])

    def held(self, *, group_id: str | None = None, worker_id: str | None = None) -> list[HeldItem]:
        """The leases held now (of one group, of one holder), by item id."""
        with self._db.read() as c:
            rows = self._db.rows(c, registry.held(group_id=group_id, worker_id=worker_id))
        return [
            HeldItem(
                item_id=row.id,
                group_id=row.group_id,
                worker_id=str(row.worker_id),
                lease_token=row.lease_token,
                attempt_started_at=from_ms(row.attempt_started_at),
            )
            for row in rows
        ]

    def release_not_in_flight(self, group_id: str, *, by: str, why: str) -> int:
        """G'' on purpose, for one group: release every lease of it held by a live worker whose
        last refresh says no slot works on it (`WorkerRow.held_not_in_flight`), each event
        naming `by` and `why`. Leases of absent and unregistered holders are left to G' and G.
        Returns how many were released. Raises `NoSuchGroup`."""
        with self._db.read() as c:
            if self._db.one(c, group_queries.group_row(group_id)) is None:
                raise NoSuchGroup(group_id)
            registered = self._db.rows(c, registry.registered())
            held = self._db.rows(c, registry.held(group_id=group_id))
        orphans = registry.not_in_flight(
            registered, held, timeout_ms=to_ms(self.worker_timeout_seconds)
        )
        message = f"released by {by}: {why}"
        released = 0
        for row in orphans:
            item = HeldItem(
                row.id, row.group_id, str(row.worker_id), row.lease_token,
                from_ms(row.attempt_started_at),
            )  # fmt: skip
            released += self.release(item, reason=registry.RELEASED, message=message)
        return released

    def forget_worker(self, worker_id: str) -> None:
        """Delete `worker_id`'s registry row (a clean shutdown, after its items ended)."""
        with self._db.write() as c:
            self._db.execute(c, registry.forget(worker_id))

    def registered_workers(self) -> dict[str, dict[str, Any]]:
        """Every registered worker's `info`, by id (one read of the registry)."""
        with self._db.read() as c:
            return {row.id: dict(row.info) for row in self._db.rows(c, registry.registered())}

    def mark_absent(self, worker_ids: Sequence[str]) -> None:
        """Mark registered workers absent now, for an application that knows their processes
        ended (one that died on this machine): the next `release_absent` releases their leases
        at once instead of after `worker_timeout_seconds`. A worker that is in fact alive is
        seen again at its next refresh; the leases released meanwhile are fenced like expired
        ones."""
        if not worker_ids:
            return
        with self._db.write() as c:
            self._db.execute(
                c, registry.mark_absent(worker_ids, to_ms(self.worker_timeout_seconds))
            )

    def release_absent(self) -> ReapResult:
        """G': release the leases held by registered workers not seen for
        `worker_timeout_seconds`: `retryable` (`worker_lost`) or `failed` (`attempts_exhausted`)
        at the cap. Idempotent and safe from many processes; a part of every `reap`, and cheap
        enough to run every few seconds (it reads the in-progress items only)."""
        moved = self._release_absent(transitions.new_correlation_id())
        return ReapResult(
            retried=moved[State.RETRYABLE.value],
            failed=moved[State.FAILED.value],
            abandoned=0,
            released=moved.total(),
        )

    def _release_absent(self, cid: str) -> Counter[str]:
        stmt = registry.release_absent(
            MOVE_BATCH_ROWS,
            timeout_ms=to_ms(self.worker_timeout_seconds),
            base_ms=self._backoff_ms,
            max_ms=self._backoff_max_ms,
        )
        moved = self._move_all(stmt, {}, Source(State.IN_PROGRESS, None, cid))
        with self._db.write() as c:
            self._db.execute(c, registry.forget_absent(to_ms(WORKER_FORGET_SECONDS)))
        return moved

    def workers(self, group_id: str | None = None) -> list[WorkerRow]:
        """Every registered worker, then every holder of a lease without a row, with the
        leases each holds (only in `group_id` when given). A worker is `absent` once not seen
        for `worker_timeout_seconds`."""
        with self._db.read() as c:
            rows = self._db.rows(c, registry.registered())
            held = {r.worker_id: r for r in self._db.rows(c, registry.holders(group_id))}
            leases = self._db.rows(c, registry.held(group_id=group_id))
            now: int = self._db.scalar(c, registry.now())
        timeout_ms = to_ms(self.worker_timeout_seconds)
        orphans = Counter(
            r.worker_id for r in registry.not_in_flight(rows, leases, timeout_ms=timeout_ms)
        )
        listed: list[WorkerRow] = []
        for row in rows:
            mine = held.pop(row.id, None)
            in_flight = row.info.get(registry.IN_FLIGHT_KEY)
            listed.append(
                WorkerRow(
                    id=row.id,
                    status="alive" if row.last_seen_at > now - timeout_ms else "absent",
                    started_at=from_ms(row.started_at),
                    last_seen_at=from_ms(row.last_seen_at),
                    seen_seconds_ago=max(0, now - row.last_seen_at) / 1000,
                    info={k: v for k, v in row.info.items() if k != registry.IN_FLIGHT_KEY},
                    leases_held=0 if mine is None else int(mine.held),
                    oldest_lease_started_at=None if mine is None else from_ms(mine.oldest),
                    in_flight=len(in_flight) if isinstance(in_flight, list) else None,
                    held_not_in_flight=orphans[row.id],
                )
            )
        for worker_id, mine in sorted(held.items(), key=lambda kv: str(kv[0])):
            listed.append(
                WorkerRow(
                    id=str(worker_id),
                    status="unregistered",
                    started_at=None,
                    last_seen_at=None,
                    seen_seconds_ago=None,
                    info={},
                    leases_held=int(mine.held),
                    oldest_lease_started_at=from_ms(mine.oldest),
                )
            )
        return listed

    def _move_all(self, stmt: Update, params: dict[str, Any], source: Source) -> Counter[str]:
        moved: Counter[str] = Counter()
        while True:
            if self.on_group_finished is None:
                rows = self._move(stmt, params, source, None)
            else:
                with self._db.write() as c:
                    rows = self._move(stmt, params, source, c)
                    self._after_move(c, rows)
            moved.update(row.state for row in rows)
            if len(rows) < MOVE_BATCH_ROWS:
                break
        # Released and expired leases come back retryable (or queued): wake the claimers.
        if moved[State.QUEUED.value]:
            announce(self._db)
        elif moved[State.RETRYABLE.value]:
            announce(self._db, due=True)
        return moved

    def cancel(self, group_id: str) -> None:
        """Request cancel: no more claims; queued and retryable items `abandoned` (`cancelled`).

        Holders learn it from their next heartbeat. Raises `NoSuchGroup`, and `GroupEnded` for a
        group whose items had all ended (never cancelled: its failed items stay requeueable).
        """
        with self._db.write() as c:
            if self._db.rowcount(c, group_queries.request_cancel(group_id)) == 0:
                if self._db.scalar(c, group_queries.sealed_exists(group_id)):
                    raise GroupEnded(group_id)
                raise NoSuchGroup(group_id)
        cid = transitions.new_correlation_id()
        self._abandon_closed(group_id, (State.QUEUED, State.RETRYABLE), cid)

    def _abandon_closed(
        self, group_id: str, from_states: Sequence[State], cid: str
    ) -> Counter[str]:
        """H (and G for expired leases): abandon a closed group's items, batch by batch, until
        none is left or the group is no longer closed (an operator requeued it)."""
        moved: Counter[str] = Counter()
        for from_state in from_states:
            while True:
                rows = _retrying_deadlocks(
                    functools.partial(self._abandon_batch, group_id, from_state, cid)
                )
                if rows is None:
                    return moved
                moved.update(row.state for row in rows)
                if len(rows) < MOVE_BATCH_ROWS:
                    break
        return moved

    def _abandon_batch(
        self, group_id: str, from_state: State, cid: str
    ) -> Sequence[sa.Row[Any]] | None:
        """One batch of abandons, in a transaction holding the group's row lock, so that it and
        a requeue (which takes the same lock) serialise; None once the group is open again."""
        with self._db.write() as c:
            group = self._db.one(c, group_queries.group_row(group_id, lock=True))
            reason = None if group is None else _closed_reason(group)
            if reason is None:
                return None
            stmt = queries.abandon(from_state, reason.value, MOVE_BATCH_ROWS)
            source = Source(from_state, None, cid, attempt_fields=from_state is State.IN_PROGRESS)
            rows = self._move(stmt, {"p_group_id": group_id}, source, c)
            self._after_move(c, rows)
            return rows

    def requeue(
        self,
        group_id: str,
        *,
        states: Collection[State] = REQUEUEABLE,
        item_ids: Collection[str] | None = None,
        deadline_seconds: float | None = None,
        conn: sa.Connection | None = None,
    ) -> int:
        """J: move the group's `failed`/`abandoned` items (or only `item_ids`) back to `queued`.

        Gives them a fresh attempt budget; attempt numbers keep growing. Clears the cancel flag;
        `deadline_seconds` (from now) replaces the deadline. Returns the number of items moved.
        Raises `NoSuchGroup`, and `RequeueNeedsDeadline` when the group is cancelled or past its
        deadline and no new deadline is given. With `conn`, runs in the caller's transaction,
        whose later statements are then under the group's row lock (taken first, as `redo`).
        """
        wanted = {State(s) for s in states}
        if not wanted <= REQUEUEABLE:
            raise ValueError("only failed and abandoned items can be requeued")
        db = self._db
        cid = transitions.new_correlation_id()
        moves: list[tuple[Sequence[sa.Row[Any]], Source]] = []
        with db.write(conn) as c:
            group = db.one(c, group_queries.group_row(group_id, lock=True))
            if group is None:
                raise NoSuchGroup(group_id)
            if _closed_reason(group) is not None and deadline_seconds is None:
                raise RequeueNeedsDeadline(group_id)
            deadline_ms = None if deadline_seconds is None else to_ms(deadline_seconds)
            db.execute(c, group_queries.reopen_group(group_id, deadline_ms))
            for pair in db.rows(c, queries.requeue_sources(group_id, wanted, item_ids)):
                state, category = State(pair.state), pair.error_category
                source = Source(state, category, cid, attempt_fields=False)
                rows = db.rows(c, queries.requeue(group_id, state, category, item_ids))
                moves.append((rows, source))
            transitions.record(db, c, moves, self._shards)
            if any(rows for rows, _ in moves):
                announce(db, c)
        return sum(len(rows) for rows, _ in moves)

    def redo(
        self,
        group_id: str,
        item_id: str,
        *,
        payload: Mapping[str, Any],
        reason: str,
        open_seconds: float,
        conn: sa.Connection,
    ) -> str:
        """K: move one `succeeded` or `failed` item back to `queued` with a fresh budget and a
        new `payload`, so that its work is done again; returns the event's correlation id.

        Runs in the caller's transaction `conn` (which may write its own rows beside it) and
        takes the group's row lock, as requeue does: of two redos of one item, the second sees
        the first's move and raises `NotRedoable` with the item's state and payload then. The
        event carries `reason` and no worker. A group whose deadline is less than
        `open_seconds` away (or past) gets `now + open_seconds`, so the item is claimed rather
        than abandoned. Raises `NoSuchGroup`, `NoSuchItem`, `GroupCancelled` and `NotRedoable`.
        """
        db = self._db
        with db.write(conn) as c:
            group = db.one(c, group_queries.group_row(group_id, lock=True))
            if group is None:
                raise NoSuchGroup(group_id)
            if group.cancel_requested:
                raise GroupCancelled(group_id)
            item = self.item(item_id, conn=c)
            if item is None or item.group_id != group_id:
                raise NoSuchItem(item_id)
            if item.state not in REDOABLE:
                raise NotRedoable(item_id, item.state.value, dict(item.payload))
            open_until = group.now + to_ms(open_seconds)
            if group.deadline_at < open_until:
                db.execute(c, group_queries.set_deadline(group_id, open_until))
            rows = db.rows(c, queries.redo(item_id, item.state, dict(payload)))
            if not rows:  # moved by someone not holding the group's lock: never, by design
                raise NotRedoable(item_id, item.state.value, dict(item.payload))
            cid = transitions.new_correlation_id()
            source = Source(
                item.state, item.error_category, cid, attempt_fields=False, reason=reason
            )
            transitions.record(db, c, [(rows, source)], self._shards)
            announce(db, c)
        return cid


def _lease(claim: Claim) -> dict[str, Any]:
    """The fence's parameters: the claimed item and the token of this attempt."""
    return {"p_item_id": claim.item_id, "p_lease_token": claim.lease_token}


def _closed_reason(group: sa.Row[Any]) -> StopReason | None:
    """Why a group (a `group_row`, with the database's `now`) takes no more claims, if it is
    closed: cancelled first, then past its deadline."""
    if group.cancel_requested:
        return StopReason.CANCELLED
    if group.deadline_at <= group.now:
        return StopReason.DEADLINE_EXCEEDED
    return None


def _reason(value: str | None) -> StopReason | None:
    return None if value is None else StopReason(value)


DEADLOCK_RETRIES = 3
"""Times a closed group's abandon batch is tried again after PostgreSQL ended it as deadlocked."""
_DEADLOCK_SQLSTATE = "40P01"


def _retrying_deadlocks(attempt: Callable[[], _T]) -> _T:
    """`attempt()`, again (up to `DEADLOCK_RETRIES` times) when PostgreSQL chose its transaction
    as a deadlock's victim: rolled back whole, it is safe to run again, and the other side has
    gone on by then."""
    retried = 0
    while True:
        try:
            return attempt()
        except DatabaseUnavailable as exc:
            driver = getattr(exc.__cause__, "orig", None)
            if retried == DEADLOCK_RETRIES or getattr(driver, "sqlstate", None) != (
                _DEADLOCK_SQLSTATE
            ):
                raise
            retried += 1

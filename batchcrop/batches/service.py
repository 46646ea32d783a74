"""Batches: submit, read status/items/events, cancel and requeue — the operations the CLI and
the HTTP API share. Attempts end through `batchcrop.worker.attempts`.
"""

from __future__ import annotations

import hashlib
import json
import time
import unicodedata
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from batchcrop.batches.allowance import allow_failures_text, failures_allowed
from batchcrop.batches.documents import (
    Batch,
    batch_state,
    delivery_document,
    event_document,
    item_document,
    status_document,
)
from batchcrop.batches.items import ItemList, ItemRequest, time_ordered_uuids
from batchcrop.batches.pruned import missing_batch
from batchcrop.callbacks.delivery import (
    DELIVERY_MAX_ATTEMPTS,
    DELIVERY_WINDOW_SECONDS,
    check_callback_url,
)
from batchcrop.crop.spec import RenderSpec
from batchcrop.db import queries
from batchcrop.errors import BatchcropError
from batchcrop.settings import DEADLINE_SECONDS_MAX, MAX_ATTEMPTS_MAX
from leases import (
    REQUEUEABLE,
    UNFINISHED,
    ConstraintViolation,
    GroupSummary,
    LeaseManager,
    NewItem,
    NoSuchGroup,
    RequeueNeedsDeadline,
    State,
    state_names,
)
from storage import canonical_store_url, object_url

if TYPE_CHECKING:
    pass

RECROP_REASON = "recrop"
"""The `reason` of the event that moves a re-cropped item back to `queued` (`recrop`)."""
PAGE_LIMIT_MAX = 1000
PRUNE_BATCH_ROWS = 500
"""Manifest rows' items per retention transaction (a few rows each: one per ratio and format)."""
PRUNE_PAUSE_SECONDS = 0.01
"""The pause after each retention transaction, so that writers queued behind it get their turn."""
IDEMPOTENCY_KEY_CHARS_MAX = 200
"""The width of `batchcrop_batches.idempotency_key`: a longer key cannot be stored."""
PAGE_LIMIT_DEFAULT = 100
SEARCH_WINDOW_BATCHES = 2000
"""Batches one filtered listing call reads at most (docs/adr/0019): a state or a search that
few batches match cannot make one request walk every batch ever submitted."""


@dataclass
class PruneResult:
    """What a prune deleted: batches, and rows of every table together."""

    batches: int = 0
    rows: int = 0


class NoSuchBatch(BatchcropError):
    """No batch (or item) with this id."""


class IdempotencyConflict(BatchcropError):
    """The idempotency key was used before with a different request."""


class EmptyBatch(BatchcropError):
    """A batch needs at least one item."""


class NeedsNewDeadline(BatchcropError):
    """A requeue of a cancelled or expired batch without a new deadline: the reaper would
    abandon the requeued items at once."""


class AmbiguousId(BatchcropError):
    """An id prefix that several batches (or items) start with."""


_ID_CHARS = frozenset("0123456789abcdef-")


def _one(found: Sequence[str], prefix: str, what: str, where: str = "") -> str:
    if not found:
        raise NoSuchBatch(f"no {what} {prefix}{where}")
    if len(found) > 1:
        raise AmbiguousId(
            f"{prefix} is the start of several ids ({', '.join(found)}, …): give more"
        )
    return found[0]


class NoSuchRef(BatchcropError):
    """No item of the batch (in the asked states) has this ref."""


class BadCursor(BatchcropError):
    """A pagination cursor that this server did not hand out."""


class NothingToRedeliver(BatchcropError):
    """A redelivery of a batch that has no callback, has not ended yet, or whose delivery is
    still under way."""


@dataclass(frozen=True)
class BatchRequest:
    """Everything that defines a batch; two equal requests hash equal. `label` is a human name
    for tables and filters (`batches --label`). `items` is kept as an `ItemList` (any sequence
    of `ItemRequest`s given is converted)."""

    items: Sequence[ItemRequest]
    spec: RenderSpec
    deadline_seconds: float
    max_attempts: int
    label: str | None = None
    callback_url: str | None = None
    allow_failures: str | None = None
    """How many failed items the batch tolerates (`allow_failures_text`: `5`, `2.5%`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", ItemList.of(self.items))
        if self.allow_failures is not None:
            object.__setattr__(self, "allow_failures", allow_failures_text(self.allow_failures))

    @property
    def item_list(self) -> ItemList:
        """`items`, typed as what it is."""
        assert isinstance(self.items, ItemList)
        return self.items

    def fingerprint(self) -> str:
        """sha256 over the canonical request, for idempotency checks: the JSON (sorted keys) of
        the items' `fingerprinted()` forms, the render request's record at the top level beside
        the batch's own fields, `label` and `notify_url` only when set (so requests without
        them keep their fingerprints). The items' text comes from `ItemList.fingerprint_json`,
        spliced where `json.dumps` would write it."""
        body: dict[str, Any] = {
            "items": _ITEMS_PLACEHOLDER,
            **self.spec.fingerprinted(),
            "deadline_seconds": self.deadline_seconds,
            "max_attempts": self.max_attempts,
        }
        if self.label is not None:
            body["label"] = self.label
        if self.callback_url is not None:
            body["notify_url"] = self.callback_url
        if self.allow_failures is not None:
            body["allow_failures"] = self.allow_failures
        slot = '"items": ' + json.dumps(_ITEMS_PLACEHOLDER)
        before, after = json.dumps(body, sort_keys=True).split(slot, 1)
        digest = hashlib.sha256(before.encode())
        digest.update(b'"items": ')
        digest.update(self.item_list.fingerprint_json().encode())
        digest.update(after.encode())
        return digest.hexdigest()


_ITEMS_PLACEHOLDER = "\0items\0"
"""Stands for the items in the fingerprint's JSON until their text is spliced in; its encoded
form (with the key before it) occurs nowhere else in that JSON."""


def _cursor(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    # isascii: str.isdigit() also accepts digits int() refuses, such as "²".
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise BadCursor("cursor is not one this server handed out")
    return int(text)


class BatchService:
    """Batch-level operations over the lease engine and the application tables."""

    def __init__(
        self,
        leases: LeaseManager,
        *,
        poll_margin_seconds: float,
        store: str | None = None,
        callback_hosts: tuple[str, ...] = (),
    ) -> None:
        self.leases = leases
        self.poll_margin_seconds = poll_margin_seconds
        self.store = store
        self.callback_hosts = callback_hosts

    # -- writing ---------------------------------------------------------------------------

    def submit(
        self, request: BatchRequest, *, idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Create a batch and its items, atomically for every reader; returns (status, created).

        The batch records this service's store (its canonical URL): only workers of that store
        serve it. The same idempotency key with the same request and store returns the existing
        batch (created=False); with another request or store it raises IdempotencyConflict (the
        store is not part of the fingerprint, so keys in flight across the upgrade keep matching).
        """
        if not request.items:
            raise EmptyBatch("a batch needs at least one source image")
        _check_limits(request)
        if request.callback_url is not None:
            check_callback_url(request.callback_url, self.callback_hosts)
        store = None if self.store is None else canonical_store_url(self.store)
        fingerprint = request.fingerprint()
        if idempotency_key is not None:
            _check_idempotency_key(idempotency_key)
            existing = self._by_idempotency_key(idempotency_key, fingerprint, store)
            if existing is not None:
                return self.status(existing), False
        batch_id = str(uuid.uuid4())
        # (id, payload text) pairs, made as the lease engine reads them (chunk by chunk).
        items = zip(time_ordered_uuids(), request.item_list.payload_texts(), strict=False)
        row = queries.insert_batch(
            batch_id=batch_id,
            spec=request.spec.to_record(),
            idempotency_key=idempotency_key,
            request_hash=fingerprint,
            store=store,
            label=request.label,
            notify_url=request.callback_url,
            allow_failures=request.allow_failures,
        )
        try:
            # The batch row is written by the transaction that seals the group, so the batch
            # appears whole or not at all, while no transaction holds the write lock for long.
            self.leases.create_group(
                batch_id,
                deadline_seconds=request.deadline_seconds,
                max_attempts=request.max_attempts,
                items=items,
                on_seal=lambda conn: conn.execute(row),
                notify_finish=request.callback_url is not None,
            )
        except ConstraintViolation:
            # Two submissions raced on one idempotency key: the loser returns the winner's batch.
            if idempotency_key is None:
                raise
            existing = self._by_idempotency_key(idempotency_key, fingerprint, store)
            if existing is None:
                raise
            return self.status(existing), False
        return self.status(batch_id), True

    def _by_idempotency_key(self, key: str, fingerprint: str, store: str | None) -> str | None:
        with self.leases.reading() as conn:
            row = conn.execute(queries.batch_by_idempotency_key(key)).mappings().first()
        if row is None:
            return None
        # A batch from before stores were recorded has none: it matches any.
        other_store = None not in (row["store"], store) and row["store"] != store
        if row["request_hash"] != fingerprint or other_store:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )
        return str(row["id"])

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Request cancellation: unclaimed items are abandoned now, held ones at their next
        heartbeat or by the reaper."""
        self.batch(batch_id)
        with _as_batch(batch_id):
            self.leases.cancel(batch_id)
        return self.status(batch_id)

    def requeue(
        self,
        batch_id: str,
        *,
        states: Collection[State] = REQUEUEABLE,
        item_ids: Collection[str] | None = None,
        deadline_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Give failed/abandoned items a fresh attempt budget (J)."""
        document, _ = self.requeue_counted(
            batch_id, states=states, item_ids=item_ids, deadline_seconds=deadline_seconds
        )
        return document

    def requeue_counted(
        self,
        batch_id: str,
        *,
        states: Collection[State] = REQUEUEABLE,
        item_ids: Collection[str] | None = None,
        deadline_seconds: float | None = None,
    ) -> tuple[dict[str, Any], int]:
        """`requeue`, returning (status, number of items requeued). Item ids not of the batch
        are not moved (the CLI resolves its `--item` ids first, refusing unknown ones)."""
        if deadline_seconds is not None:
            check_deadline(deadline_seconds)
        self.batch(batch_id)
        try:
            with _as_batch(batch_id):
                moved = self.leases.requeue(
                    batch_id, states=states, item_ids=item_ids, deadline_seconds=deadline_seconds
                )
        except RequeueNeedsDeadline as exc:
            raise NeedsNewDeadline(
                f"batch {batch_id} is cancelled or past its deadline: requeue it with a new "
                "deadline (--deadline / deadline_seconds), or the reaper would abandon it at once"
            ) from exc
        return self.status(batch_id), moved

    def resolve_id(self, text: str) -> str:
        """The id of the batch `text` names: its whole id, or a prefix only it starts with.
        `NoSuchBatch` when none does; `AmbiguousId` when several do."""
        text = text.strip().lower()
        with self.leases.reading() as conn:
            if conn.execute(queries.batch_by_id(text)).first() is not None:
                return text
            if not text:
                raise NoSuchBatch("no batch: the id given is empty")
            if not _ID_CHARS.issuperset(text):
                raise NoSuchBatch(f"no batch {text}")
            found = [str(r.id) for r in conn.execute(queries.batch_ids_with_prefix(text))]
        if not found:
            raise NoSuchBatch(missing_batch(self.leases, text))
        return _one(found, text, "batch")

    def resolve_item_id(self, batch_id: str, text: str) -> str:
        """The id of the item of `batch_id` that `text` names (its whole id or a unique prefix);
        `NoSuchBatch` when none, `AmbiguousId` when several."""
        text = text.strip().lower()
        row = self.leases.item(text)
        if row is not None and row.group_id == batch_id:
            return text
        found = self.leases.item_ids_with_prefix(text, group_id=batch_id)
        return _one(found, text, "item", f" in batch {batch_id}")

    def prune(self, finished_before_seconds: float) -> PruneResult:
        """Delete every batch whose items all ended at least `finished_before_seconds` ago: its
        batch row, manifest, items, events and counters, and its callback deliveries (outbox rows
        and their lease groups), in small transactions (docs/design.md §4, retention). A batch
        whose delivery is still under way, or ended less long ago, waits for a later run. Stored
        objects are never touched. Safe to run from several processes and to interrupt: a later
        run finishes what one left."""
        result = PruneResult()
        for batch_id, own in self.prunable(finished_before_seconds):
            rows = self.prune_batch(batch_id, own, finished_before_seconds)
            if rows is not None:
                result.rows += rows
                result.batches += 1
        return result

    def prunable(self, finished_before_seconds: float) -> list[tuple[str, list[str]]]:
        """The batches `prune` may delete as listed now, oldest first, each with its deliveries
        (all finished at least as long ago)."""
        finished = self.leases.finished_groups(finished_before_seconds)
        # Deliveries are lease groups too: each goes with its batch, never on its own.
        delivery_groups = self.deliveries_among(finished)
        listed = []
        for batch_id in finished:
            if batch_id in delivery_groups:
                continue
            with self.leases.reading() as conn:
                own = [str(row.id) for row in conn.execute(queries.deliveries_of(batch_id))]
            waiting = [delivery for delivery in own if delivery not in delivery_groups]
            if waiting and self.leases.groups(waiting):
                continue  # a callback still under way, or delivered too recently
            # (An outbox row whose lease group is gone was left by an interrupted prune.)
            listed.append((batch_id, own))
        return listed

    def prune_batch(
        self, batch_id: str, deliveries: Collection[str], finished_before_seconds: float
    ) -> int | None:
        """Delete one batch listed by `prunable` with its listed `deliveries`; the rows deleted
        (the batch row not counted), or None when it is no longer prunable.

        Between the listing and here the batch may have been requeued and ended again, with a
        new notification: so the batch-row transaction re-checks, under the group's lock (which
        requeue, the finish hook and redeliver hold while they write), that the batch is still
        finished that long ago and has exactly the listed deliveries; only those are deleted."""
        with self.leases.if_finished(batch_id, older_than_seconds=finished_before_seconds) as conn:
            if conn is None:
                return None  # requeued (and perhaps ended again) since it was listed
            now = {str(row.id) for row in conn.execute(queries.deliveries_of(batch_id))}
            if now != set(deliveries):
                return None  # a callback written since it was listed
            # First the batch row: from here on the batch is gone for readers and requeue.
            if conn.execute(queries.delete_batch(batch_id)).rowcount:
                conn.execute(queries.insert_pruned(batch_id))
        rows = 0
        for delete in (queries.delete_derivatives, queries.delete_previews):
            deleted = PRUNE_BATCH_ROWS
            while deleted == PRUNE_BATCH_ROWS:
                with self.leases.transaction() as conn:
                    deleted = conn.execute(delete(batch_id, PRUNE_BATCH_ROWS)).rowcount
                rows += deleted
                time.sleep(PRUNE_PAUSE_SECONDS)
        # The outbox rows before their lease groups: a prune interrupted in between leaves
        # finished groups with no outbox row, which a later prune lists and purges like a batch.
        for chunk in queries.chunks(list(deliveries)):
            with self.leases.transaction() as conn:
                rows += conn.execute(queries.delete_deliveries(batch_id, chunk)).rowcount
        for delivery in deliveries:
            rows += self.leases.purge(delivery)
        with self.leases.transaction() as conn:
            rows += conn.execute(queries.delete_recrops(batch_id)).rowcount
        return rows + self.leases.purge(batch_id)

    # -- reading ---------------------------------------------------------------------------

    def batch(self, batch_id: str) -> Batch:
        """The batch row (its render request); NoSuchBatch when unknown."""
        with self.leases.reading() as conn:
            row = conn.execute(queries.batch_by_id(batch_id)).mappings().first()
        if row is None:
            raise NoSuchBatch(missing_batch(self.leases, batch_id))
        return _batch(row)

    # -- completion callbacks (docs/design.md §7, callbacks; ADR 0013) ------------------------

    def on_group_finished(self, conn: Any, group_id: str) -> None:
        """The lease engine's finish hook: the transaction `conn` just ended the last unfinished
        item of batch `group_id`. Writes a new notification's first delivery (the outbox) with
        the status document as it stands in this transaction, so a crash after the commit
        cannot lose it."""
        row = conn.execute(queries.batch_by_id(group_id)).mappings().first()
        if row is None or row["notify_url"] is None:
            return
        batch = _batch(row)
        summary = self.leases.group(group_id, conn=conn)
        document = status_document(
            batch,
            summary,
            poll_margin_seconds=self.poll_margin_seconds,
            deliveries=self.deliveries(group_id, conn),
        )
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        self._add_delivery(conn, batch, str(uuid.uuid4()), body)

    def _add_delivery(self, conn: Any, batch: Batch, notification_id: str, body: str) -> str:
        """One delivery of a notification: its lease group of one item, and its outbox row."""
        delivery_id = str(uuid.uuid4())
        payload = {
            "batch_id": batch.id,
            "notification_id": notification_id,
            "url": batch.callback_url,
            "body": body,
        }
        self.leases.add_group(
            conn,
            delivery_id,
            deadline_seconds=DELIVERY_WINDOW_SECONDS,
            max_attempts=DELIVERY_MAX_ATTEMPTS,
            items=[NewItem(id=delivery_id, payload=payload)],
        )
        conn.execute(
            queries.insert_delivery(
                delivery_id=delivery_id, batch_id=batch.id, notification_id=notification_id
            )
        )
        return delivery_id

    def redeliver(self, batch_id: str) -> dict[str, Any]:
        """An operator's redelivery: a new delivery of the batch's latest notification (same
        body and `Idempotency-Key`, a fresh 24 h window and attempt budget). Refused
        (`NothingToRedeliver`) when the batch has no callback, has not ended yet, or its latest
        delivery is still under way. Written under the batch group's lock while the batch is
        terminal: a batch running again after a requeue notifies anew when it ends, and a prune
        (which takes the same lock) sees the new delivery."""
        batch = self.batch(batch_id)
        with self.leases.if_finished(batch_id) as conn:
            if conn is None:
                raise NothingToRedeliver(
                    f"batch {batch_id} has not ended (it runs again after a requeue): its "
                    "callback is sent when it ends"
                )
            if conn.execute(queries.batch_by_id(batch_id)).first() is None:
                raise NoSuchBatch(f"no batch {batch_id}")  # pruned since it was read
            rows = list(conn.execute(queries.deliveries_of(batch_id)).mappings())
            if batch.callback_url is None or not rows:
                raise NothingToRedeliver(
                    f"batch {batch_id} has no callback to redeliver (no callback_url, or it has "
                    "not ended yet)"
                )
            latest = rows[-1]
            item = self.leases.item(str(latest["id"]), conn=conn)
            if item is None:
                # Its lease rows are gone (a prune cut short): there is no body to send again.
                raise NothingToRedeliver(f"the latest callback of batch {batch_id} is gone")
            if item.state in UNFINISHED:
                raise NothingToRedeliver(f"a delivery of batch {batch_id} is still under way")
            body = str(item.payload["body"])
            self._add_delivery(conn, batch, str(latest["notification_id"]), body)
        return self.status(batch_id)

    def deliveries(self, batch_id: str, conn: Any = None) -> list[dict[str, Any]]:
        """The delivery documents of a batch, oldest first (with `conn`: in that transaction)."""
        if conn is None:
            with self.leases.reading() as reading:
                return self.deliveries(batch_id, reading)
        documents = []
        for row in conn.execute(queries.deliveries_of(batch_id)).mappings():
            item = self.leases.item(str(row["id"]), conn=conn)
            if item is not None:
                documents.append(delivery_document(item, str(row["notification_id"])))
        return documents

    def _delivery_ids(self, batch_id: str) -> list[str]:
        with self.leases.reading() as conn:
            return [str(r["id"]) for r in conn.execute(queries.deliveries_of(batch_id)).mappings()]

    def open_deliveries(self) -> list[str]:
        """The deliveries a deliverer may claim from now: open lease groups that are
        deliveries (one probe per open group, as a worker's list of batches)."""
        open_ids = self.leases.open_groups()
        found = self.deliveries_among(open_ids)
        return [group_id for group_id in open_ids if group_id in found]

    def deliveries_among(self, group_ids: Sequence[str]) -> set[str]:
        """Which of these lease groups are deliveries, read `IN_LIST_IDS_MAX` ids per
        statement."""
        found: set[str] = set()
        with self.leases.reading() as conn:
            for chunk in queries.chunks(group_ids):
                found.update(str(r.id) for r in conn.execute(queries.deliveries_among(chunk)))
        return found

    def summary(self, batch_id: str) -> GroupSummary:
        """The batch's counters and times, read from its lease group (no scan of its items)."""
        with _as_batch(batch_id):
            return self.leases.group(batch_id)

    def status(self, batch_id: str) -> dict[str, Any]:
        """The status document (docs/design.md §7)."""
        return self.status_of(self.batch(batch_id))

    def status_of(self, batch: Batch) -> dict[str, Any]:
        """The status document of a batch whose row the caller has already read (a batch's row
        never changes after submission): its counters, and its deliveries if it has a callback."""
        summary = self.summary(batch.id)
        deliveries = self.deliveries(batch.id) if batch.callback_url is not None else []
        return status_document(
            batch, summary, poll_margin_seconds=self.poll_margin_seconds, deliveries=deliveries
        )

    def version(self, batch: Batch) -> str | None:
        """A token that changes whenever `status_of(batch)` may change (docs/design.md §7,
        polling): the lease version of the batch's group and of its callback deliveries' groups,
        one read of a row per group. None when the batch is gone. Read it before the document."""
        if batch.callback_url is None:
            return self.leases.version([batch.id])  # one statement, no transaction around it
        with self.leases.reading() as conn:
            rows = conn.execute(queries.deliveries_of(batch.id)).mappings()
            group_ids = [batch.id, *(str(row["id"]) for row in rows)]
            return self.leases.version(group_ids, conn=conn)

    def list_batches(
        self,
        *,
        state: State | None = None,
        label: str | None = None,
        search: str | None = None,
        cursor: str | None = None,
        limit: int = PAGE_LIMIT_DEFAULT,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Status documents newest first, filtered by state, label and search (`search`: see
        `queries.batch_search`); (page, next cursor).

        With a state or a search, one call reads at most `SEARCH_WINDOW_BATCHES` batches: the
        page may then hold fewer than `limit` documents, even none, and still have a next cursor
        that goes on below them (docs/adr/0019).
        """
        before = _cursor(cursor)
        limit = max(1, min(limit, PAGE_LIMIT_MAX))
        search = search or None
        floor = None
        if state is not None or search is not None:
            with self.leases.reading() as conn:
                floor = conn.execute(
                    queries.batch_window_floor(before_seq=before, window=SEARCH_WINDOW_BATCHES)
                ).scalar()
        page: list[dict[str, Any]] = []
        while True:
            room = limit - len(page)
            with self.leases.reading() as conn:
                rows = list(
                    conn.execute(
                        queries.batch_page(
                            before_seq=before,
                            limit=room,
                            label=label,
                            search=search,
                            floor_seq=floor,
                        )
                    ).mappings()
                )
            page.extend(self._documents(rows, state))
            if rows:
                before = int(rows[-1]["seq"])
            if len(page) == limit:
                return page, str(before)
            if len(rows) < room:
                # The window is read: go on below it, or stop at the oldest batch.
                return page, None if floor is None else str(floor)

    def _documents(self, rows: Sequence[Any], state: State | None) -> list[dict[str, Any]]:
        """The status documents of these batch rows whose batch is in `state` (any when None)
        and not being purged."""
        summaries = {s.id: s for s in self.leases.groups([r["id"] for r in rows])}
        documents: list[dict[str, Any]] = []
        for row in rows:
            summary = summaries.get(row["id"])
            if summary is None:
                continue  # its group is being purged
            batch = _batch(row)
            allowed = failures_allowed(batch.allow_failures, summary.total)
            if state is not None and batch_state(summary, allowed) is not state:
                continue
            deliveries = self.deliveries(batch.id) if batch.callback_url is not None else []
            documents.append(
                status_document(
                    batch,
                    summary,
                    poll_margin_seconds=self.poll_margin_seconds,
                    deliveries=deliveries,
                )
            )
        return documents

    def items(
        self,
        batch_id: str,
        *,
        states: Collection[State] | None = None,
        cursor: str | None = None,
        from_ref: str | None = None,
        limit: int = PAGE_LIMIT_DEFAULT,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Item documents in submission order; (page, next cursor). `from_ref`: the page starts
        at the first item (among `states`) whose ref is exactly that, instead of at `cursor`;
        `NoSuchRef` when there is none."""
        batch = self.batch(batch_id)
        limit = max(1, min(limit, PAGE_LIMIT_MAX))
        after = _cursor(cursor)
        if from_ref is not None:
            after = self._before_ref(batch_id, from_ref, states)
        rows = self.leases.items(batch_id, states=states, after_seq=after, limit=limit)
        by_item = self._manifests([r.id for r in rows], batch.spec)
        previews = self._previews([r.id for r in rows])
        docs = [
            item_document(r, by_item.get(r.id, []), batch.store, previews.get(r.id)) for r in rows
        ]
        next_cursor = str(rows[-1].seq) if len(rows) == limit else None
        return docs, next_cursor

    def _before_ref(self, batch_id: str, ref: str, states: Collection[State] | None) -> int:
        """The cursor position just before the batch's first item with this ref."""
        with self.leases.reading() as conn:
            seq = conn.execute(queries.first_item_with_ref(batch_id, ref, states)).scalar()
        if seq is None:
            among = f" among the {' and '.join(state_names(states))} items" if states else ""
            raise NoSuchRef(f"no item with ref {ref!r}{among} in batch {batch_id}")
        return int(seq) - 1

    def item(self, batch_id: str, item_id: str) -> dict[str, Any]:
        """One item document; NoSuchBatch when the item is not in this batch."""
        row = self.leases.item(item_id)
        if row is None or row.group_id != batch_id:
            raise NoSuchBatch(f"no item {item_id} in batch {batch_id}")
        batch = self.batch(batch_id)
        manifests = self._manifests([item_id], batch.spec)
        preview = self._previews([item_id]).get(item_id)
        return item_document(row, manifests.get(item_id, []), batch.store, preview)

    def _previews(self, item_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The preview rows of these items by item id (one query; items without one absent)."""
        if not item_ids:
            return {}
        with self.leases.reading() as conn:
            rows = conn.execute(queries.previews_of(item_ids)).mappings()
            return {str(row["item_id"]): dict(row) for row in rows}

    def _manifests(
        self, item_ids: Sequence[str], spec: RenderSpec
    ) -> dict[str, list[dict[str, Any]]]:
        """Manifest rows of these items by item id (one query), in the batch's ratio order and
        each ratio's in its format order."""
        by_item: dict[str, list[dict[str, Any]]] = {}
        if not item_ids:
            return by_item
        with self.leases.reading() as conn:
            for row in conn.execute(queries.derivatives_of(item_ids)).mappings():
                by_item.setdefault(str(row["item_id"]), []).append(dict(row))
        order = {str(ratio): n for n, ratio in enumerate(spec.ratios)}
        formats = {name: n for n, name in enumerate(spec.formats)}
        for rows in by_item.values():
            rows.sort(
                key=lambda row: (
                    order.get(row["ratio"], len(order)),
                    formats.get(row["format"], len(formats)),
                )
            )
        return by_item

    def events(
        self,
        batch_id: str,
        *,
        item_id: str | None = None,
        cursor: str | None = None,
        limit: int = PAGE_LIMIT_DEFAULT,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The transition timeline, oldest first, with the callback deliveries' own transitions
        (`kind` "delivery", `item_id` the delivery's id); (page, next cursor)."""
        batch = self.batch(batch_id)
        limit = max(1, min(limit, PAGE_LIMIT_MAX))
        groups = [batch_id]
        if batch.callback_url is not None:
            groups += self._delivery_ids(batch_id)
        rows = self.leases.events(groups, item_id=item_id, after_id=_cursor(cursor), limit=limit)
        next_cursor = str(rows[-1].id) if len(rows) == limit else None
        boxes = self._recrop_boxes({e.correlation_id for e in rows if e.reason == RECROP_REASON})
        documents = [
            event_document(e, batch_id=batch_id, focus_box=boxes.get(e.correlation_id or ""))
            for e in rows
        ]
        return documents, next_cursor

    def _recrop_boxes(self, correlation_ids: Collection[str | None]) -> dict[str, list[int]]:
        """The focus box of each operator re-crop among these correlation ids (one query)."""
        wanted = [c for c in correlation_ids if c is not None]
        if not wanted:
            return {}
        with self.leases.reading() as conn:
            rows = conn.execute(queries.recrop_boxes(wanted)).all()
        return {str(row.correlation_id): list(row.focus_box) for row in rows}

    def manifest(self, batch_id: str) -> list[dict[str, Any]]:
        """Every manifest row of the batch, each with its `location` in the batch's store (for
        audits and tests)."""
        store = self.batch(batch_id).store
        with self.leases.reading() as conn:
            rows = [
                dict(r) for r in conn.execute(queries.derivatives_of_batch(batch_id)).mappings()
            ]
        for row in rows:
            row["location"] = None if store is None else object_url(store, row["key"])
        return rows

    def stores(self, batch_ids: Collection[str]) -> dict[str, str | None]:
        """The recorded store of each of these batches (None: submitted before stores were
        recorded); unknown ids are left out."""
        if not batch_ids:
            return {}
        with self.leases.reading() as conn:
            rows = conn.execute(queries.batch_stores(batch_ids)).all()
        return {str(row.id): row.store for row in rows}


@contextmanager
def _as_batch(batch_id: str) -> Iterator[None]:
    """The lease engine's "no such group" is this module's "no such batch"."""
    try:
        yield
    except NoSuchGroup as exc:
        raise NoSuchBatch(f"no batch {batch_id}") from exc


def _check_limits(request: BatchRequest) -> None:
    """Refuse what the database cannot store: a database error here would be a crash, not a
    usage error (ValueError: exit 2 on the CLI)."""
    if not 1 <= request.max_attempts <= MAX_ATTEMPTS_MAX:
        raise ValueError(f"max_attempts must be in 1..{MAX_ATTEMPTS_MAX}")
    check_deadline(request.deadline_seconds)
    _check_label(request.label)


def check_deadline(seconds: float) -> None:
    """The one deadline limit of the CLI and the API (ValueError: exit 2, or a 422)."""
    if not 0 < seconds <= DEADLINE_SECONDS_MAX:
        days = round(DEADLINE_SECONDS_MAX / 86400)
        raise ValueError(f"the deadline must be positive and at most {days} days from now")


def _check_idempotency_key(key: str) -> None:
    """Refuse a key the column cannot hold (PostgreSQL would fail the insert, not truncate)."""
    if not 1 <= len(key) <= IDEMPOTENCY_KEY_CHARS_MAX or "\0" in key:
        raise ValueError(
            f"the idempotency key must be 1 to {IDEMPOTENCY_KEY_CHARS_MAX} characters, without NUL"
        )


LABEL_CHARS_MAX = 200
"""The width of `batchcrop_batches.label`."""


LABEL_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Unicode categories a label may not hold: controls; format characters, which reorder what an
operator reads in a table, a page or a terminal (the bidirectional marks, embeddings, overrides
and isolates) or are invisible, so that two labels reading alike differ (U+200B, U+FEFF,
U+00AD, tag characters); line and paragraph separators (U+2028, U+2029), which break a row."""


def label_text(label: str) -> str:
    """`label` if the column can hold it and every reader shows it as typed: 1 to
    `LABEL_CHARS_MAX` characters, none of `LABEL_REFUSED_CATEGORIES`; ValueError otherwise
    (the API's 422, the CLI's exit 2)."""
    if not 1 <= len(label) <= LABEL_CHARS_MAX or any(
        unicodedata.category(c) in LABEL_REFUSED_CATEGORIES for c in label
    ):
        raise ValueError(
            f"the label must be 1 to {LABEL_CHARS_MAX} characters, without control, "
            "invisible or bidirectional formatting characters or line separators"
        )
    return label


def _check_label(label: str | None) -> None:
    if label is not None:
        label_text(label)


def _batch(row: Any) -> Batch:
    return Batch(
        id=str(row["id"]),
        spec=RenderSpec.from_record(row["spec"]),
        store=row["store"],
        label=row["label"],
        callback_url=row["notify_url"],
        allow_failures=row["allow_failures"],
    )

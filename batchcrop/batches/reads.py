"""Reads of batches: a batch's row, status document and polling version; listings (filtered,
searched, paged: docs/adr/0019); a batch's items, events and manifest; which batch or item an
id prefix names. Nothing here writes. A call may read in several short read transactions
(`leases.reading()`), so a document's parts (counters, deliveries, manifest rows) are each as of
their own read; `version` is the token that tells a poller something moved (docs/design.md §7).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from batchcrop.batches.allowance import failures_allowed
from batchcrop.batches.documents import (
    Batch,
    batch_of_row,
    batch_state,
    event_document,
    item_document,
    status_document,
)
from batchcrop.batches.errors import AmbiguousId, BadCursor, NoSuchBatch, NoSuchRef, as_batch
from batchcrop.batches.outbox import Outbox
from batchcrop.batches.pruned import missing_batch
from batchcrop.crop.spec import RenderSpec
from batchcrop.db import queries
from leases import GroupSummary, LeaseManager, State, state_names
from storage import object_url

RECROP_REASON = "recrop"
"""The `reason` of the event that moves a re-cropped item back to `queued` (`recrop`)."""
PAGE_LIMIT_MAX = 1000
PAGE_LIMIT_DEFAULT = 100
SEARCH_WINDOW_BATCHES = 2000
"""Batches one filtered listing call reads at most (docs/adr/0019): a state or a search that
few batches match cannot make one request walk every batch ever submitted."""
_ID_CHARS = frozenset("0123456789abcdef-")


def _one(found: Sequence[str], prefix: str, what: str, where: str = "") -> str:
    if not found:
        raise NoSuchBatch(f"no {what} {prefix}{where}")
    if len(found) > 1:
        raise AmbiguousId(
            f"{prefix} is the start of several ids ({', '.join(found)}, …): give more"
        )
    return found[0]


def _cursor(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    # isascii: str.isdigit() also accepts digits int() refuses, such as "²".
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise BadCursor("cursor is not one this server handed out")
    return int(text)


class Reads:
    """Batch reads over the lease engine and the application tables."""

    def __init__(self, leases: LeaseManager, outbox: Outbox, *, poll_margin_seconds: float) -> None:
        self.leases = leases
        self.outbox = outbox
        self.poll_margin_seconds = poll_margin_seconds

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

    def batch(self, batch_id: str) -> Batch:
        """The batch row (its render request); NoSuchBatch when unknown."""
        with self.leases.reading() as conn:
            row = conn.execute(queries.batch_by_id(batch_id)).mappings().first()
        if row is None:
            raise NoSuchBatch(missing_batch(self.leases, batch_id))
        return batch_of_row(row)

    def summary(self, batch_id: str) -> GroupSummary:
        """The batch's counters and times, read from its lease group (no scan of its items)."""
        with as_batch(batch_id):
            return self.leases.group(batch_id)

    def status(self, batch_id: str) -> dict[str, Any]:
        """The status document (docs/design.md §7)."""
        return self.status_of(self.batch(batch_id))

    def status_of(self, batch: Batch) -> dict[str, Any]:
        """The status document of a batch whose row the caller has already read (a batch's row
        never changes after submission): its counters, and its deliveries if it has a callback."""
        summary = self.summary(batch.id)
        deliveries = self.outbox.deliveries(batch.id) if batch.callback_url is not None else []
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
            batch = batch_of_row(row)
            allowed = failures_allowed(batch.allow_failures, summary.total)
            if state is not None and batch_state(summary, allowed) is not state:
                continue
            deliveries = self.outbox.deliveries(batch.id) if batch.callback_url is not None else []
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
        """Manifest rows of these items by item id (one query), in the batch's ratio order,
        each ratio's in its width order and those in its format order."""
        by_item: dict[str, list[dict[str, Any]]] = {}
        if not item_ids:
            return by_item
        with self.leases.reading() as conn:
            for row in conn.execute(queries.derivatives_of(item_ids)).mappings():
                by_item.setdefault(str(row["item_id"]), []).append(dict(row))
        order = {str(ratio): n for n, ratio in enumerate(spec.ratios)}
        formats = {name: n for n, name in enumerate(spec.formats)}
        widths = {width or 0: n for n, width in enumerate(spec.sizes)}
        for rows in by_item.values():
            rows.sort(
                key=lambda row: (
                    order.get(row["ratio"], len(order)),
                    widths.get(row.get("requested_width") or 0, len(widths)),
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
            groups += self.outbox.delivery_ids(batch_id)
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

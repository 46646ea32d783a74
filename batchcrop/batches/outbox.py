"""The callback outbox (docs/design.md §7, callbacks; ADR 0013): the lease engine's finish hook
writes a batch's notification as a delivery (a lease group of one item and an outbox row) in the
transaction that ends the batch, so a crash after the commit cannot lose it; and the reads of
those deliveries (a batch's delivery documents, which open groups are deliveries).

Writes happen only inside a caller's transaction (`conn`): the one that ends the batch, or the
one `Actions.redeliver` holds under the batch group's lock. Reads open their own unless given
`conn`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from batchcrop.batches.causes import RECROP_SEQ_FIELD, callback_cause
from batchcrop.batches.documents import (
    Batch,
    batch_of_row,
    delivery_document,
    status_document,
)
from batchcrop.callbacks.delivery import DELIVERY_MAX_ATTEMPTS, DELIVERY_WINDOW_SECONDS
from batchcrop.db import queries
from leases import LeaseManager, NewItem


class Outbox:
    """The completion callbacks' outbox over the lease engine and `batchcrop_deliveries`."""

    def __init__(self, leases: LeaseManager, *, poll_margin_seconds: float) -> None:
        self.leases = leases
        self.poll_margin_seconds = poll_margin_seconds

    def on_group_finished(self, conn: Any, group_id: str) -> None:
        """The lease engine's finish hook: the transaction `conn` just ended the last unfinished
        item of batch `group_id`. Writes a new notification's first delivery (the outbox) with
        the status document as it stands in this transaction, so a crash after the commit
        cannot lose it."""
        row = conn.execute(queries.batch_by_id(group_id)).mappings().first()
        if row is None or row["notify_url"] is None:
            return
        batch = batch_of_row(row)
        summary = self.leases.group(group_id, conn=conn)
        document = status_document(
            batch,
            summary,
            poll_margin_seconds=self.poll_margin_seconds,
            deliveries=self.deliveries(group_id, conn),
        )
        earlier = [self.leases.item(d, conn=conn) for d in self.delivery_ids(group_id, conn)]
        cause, recrop_seq = callback_cause(
            conn, self.leases, group_id, [item for item in earlier if item is not None]
        )
        body = json.dumps({**document, **cause}, separators=(",", ":"), ensure_ascii=False)
        self.add_delivery(conn, batch, str(uuid.uuid4()), body, recrop_seq=recrop_seq)

    def add_delivery(
        self, conn: Any, batch: Batch, notification_id: str, body: str, *, recrop_seq: int = 0
    ) -> str:
        """One delivery of a notification: its lease group of one item, and its outbox row
        (`recrop_seq`: the last re-crop the callback covers, `batchcrop.batches.causes`)."""
        delivery_id = str(uuid.uuid4())
        payload = {
            "batch_id": batch.id,
            "notification_id": notification_id,
            "url": batch.callback_url,
            "body": body,
            RECROP_SEQ_FIELD: recrop_seq,
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

    def delivery_ids(self, batch_id: str, conn: Any = None) -> list[str]:
        """The ids of a batch's deliveries, oldest first (with `conn`: in that transaction)."""
        if conn is None:
            with self.leases.reading() as reading:
                return self.delivery_ids(batch_id, reading)
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

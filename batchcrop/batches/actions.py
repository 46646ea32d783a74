"""Operator actions on a batch: cancel, pause, resume, a new priority, requeue (with a new
deadline when it is needed) and redeliver its latest callback. Each acts through the lease
engine under the batch group's lock and returns the batch's status document as it stands
afterwards. (An item's re-crop is `batchcrop.batches.recrop`.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from batchcrop.batches.errors import (
    BatchEnded,
    NeedsNewDeadline,
    NoSuchBatch,
    NothingToRedeliver,
    as_batch,
)
from batchcrop.batches.outbox import Outbox
from batchcrop.batches.reads import Reads
from batchcrop.batches.submission import check_deadline
from batchcrop.db import queries
from leases import (
    REQUEUEABLE,
    UNFINISHED,
    GroupEnded,
    LeaseManager,
    RequeueNeedsDeadline,
    State,
)
from leases.models import check_priority


class Actions:
    """Operator actions over the lease engine; reads the results back through `reads`."""

    def __init__(self, leases: LeaseManager, reads: Reads, outbox: Outbox) -> None:
        self.leases = leases
        self.reads = reads
        self.outbox = outbox

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Request cancellation: unclaimed items are abandoned now, held ones at their next
        heartbeat or by the reaper. `BatchEnded` when every item had ended: the batch is left
        as it is (cancelled, its failed items could no longer be requeued without a new
        deadline)."""
        self.reads.batch(batch_id)
        try:
            with as_batch(batch_id):
                self.leases.cancel(batch_id)
        except GroupEnded:
            state = self.reads.status(batch_id)["state"]
            raise BatchEnded(
                f"batch {batch_id} has already ended ({state}): nothing to cancel"
            ) from None
        return self.reads.status(batch_id)

    def pause(self, batch_id: str) -> dict[str, Any]:
        """Pause the batch: nothing more is claimed from it; attempts under way finish (each
        ends as it would have, counted as usual); its deadline runs on (docs/design.md §3,
        sharing). Idempotent."""
        return self._share(batch_id, lambda conn: self.leases.pause(batch_id, conn=conn))

    def resume(self, batch_id: str) -> dict[str, Any]:
        """Resume a paused batch: its items are claimed again, and idle workers are woken."""
        return self._share(batch_id, lambda conn: self.leases.resume(batch_id, conn=conn))

    def set_priority(self, batch_id: str, priority: int) -> dict[str, Any]:
        """Give the batch a new priority (`PRIORITY_MIN`..`PRIORITY_MAX`, ValueError outside),
        which the next claims rank it by."""
        check_priority(priority)
        return self._share(
            batch_id, lambda conn: self.leases.set_priority(batch_id, priority, conn=conn)
        )

    def _share(self, batch_id: str, change: Callable[[Any], object]) -> dict[str, Any]:
        """Run `change` in a transaction holding the batch group's row lock, refused when the
        batch row is gone (a prune deletes it under the same lock): then it rolls back."""
        self.reads.batch(batch_id)
        with as_batch(batch_id), self.leases.transaction() as conn:
            change(conn)
            require_batch_row(conn, batch_id)
        return self.reads.status(batch_id)

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
        self.reads.batch(batch_id)
        try:
            with as_batch(batch_id), self.leases.transaction() as conn:
                moved = self.leases.requeue(
                    batch_id,
                    states=states,
                    item_ids=item_ids,
                    deadline_seconds=deadline_seconds,
                    conn=conn,
                )
                require_batch_row(conn, batch_id)
        except RequeueNeedsDeadline as exc:
            raise NeedsNewDeadline(
                f"batch {batch_id} is cancelled or past its deadline: requeue it with a new "
                "deadline (--deadline / deadline_seconds), or the reaper would abandon it at once"
            ) from exc
        return self.reads.status(batch_id), moved

    def redeliver(self, batch_id: str) -> dict[str, Any]:
        """An operator's redelivery: a new delivery of the batch's latest notification (same
        body and `Idempotency-Key`, a fresh 24 h window and attempt budget). Refused
        (`NothingToRedeliver`) when the batch has no callback, has not ended yet, or its latest
        delivery is still under way. Written under the batch group's lock while the batch is
        terminal: a batch running again after a requeue notifies anew when it ends, and a prune
        (which takes the same lock) sees the new delivery."""
        batch = self.reads.batch(batch_id)
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
            self.outbox.add_delivery(conn, batch, str(latest["notification_id"]), body)
        return self.reads.status(batch_id)


def require_batch_row(conn: Any, batch_id: str) -> None:
    """`NoSuchBatch` unless the batch row is there, read in `conn` once it holds the batch
    group's row lock (a requeue or redo took it): `prune` deletes the row under that lock and
    purges the group afterwards, so items moved back to `queued` after the row went would be
    left in a group no worker claims and no prune finishes (docs/design.md §4, retention).
    Raised, it rolls the move back."""
    if conn.execute(queries.batch_by_id(batch_id)).first() is None:
        raise NoSuchBatch(f"no batch {batch_id}")  # pruned since it was read

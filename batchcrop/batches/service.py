"""`BatchService`: the batch operations the CLI and the HTTP API share, under one name.

It composes the parts, each a module of its own with its contract in its docstring:
`submission` (create a batch), `actions` (cancel, pause, resume, priority, requeue,
redeliver), `reads` (status, items,
events, listings, id prefixes), `retention` (prune) and `outbox` (the completion callbacks'
deliveries, written by the lease engine's finish hook). Every operation is one part's method,
named here as an attribute, so a caller says `batches.cancel(batch_id)` whichever part answers
(docs/adr/0029). Attempts end through `batchcrop.worker.attempts`.
"""

from __future__ import annotations

from batchcrop.batches.actions import Actions
from batchcrop.batches.outbox import Outbox
from batchcrop.batches.reads import Reads
from batchcrop.batches.retention import Retention
from batchcrop.batches.submission import Submissions
from leases import LeaseManager


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
        self.outbox = Outbox(leases, poll_margin_seconds=poll_margin_seconds)
        self.reads = Reads(leases, self.outbox, poll_margin_seconds=poll_margin_seconds)
        self.submissions = Submissions(
            leases, self.reads, store=store, callback_hosts=callback_hosts
        )
        self.actions = Actions(leases, self.reads, self.outbox)
        self.retention = Retention(leases, self.outbox)

        self.submit = self.submissions.submit

        self.cancel = self.actions.cancel
        self.pause = self.actions.pause
        self.resume = self.actions.resume
        self.set_priority = self.actions.set_priority
        self.requeue = self.actions.requeue
        self.requeue_counted = self.actions.requeue_counted
        self.redeliver = self.actions.redeliver

        self.batch = self.reads.batch
        self.summary = self.reads.summary
        self.status = self.reads.status
        self.status_of = self.reads.status_of
        self.version = self.reads.version
        self.list_batches = self.reads.list_batches
        self.items = self.reads.items
        self.item = self.reads.item
        self.events = self.reads.events
        self.manifest = self.reads.manifest
        self.stores = self.reads.stores
        self.resolve_id = self.reads.resolve_id
        self.resolve_item_id = self.reads.resolve_item_id

        self.prune = self.retention.prune
        self.prunable = self.retention.prunable
        self.prune_batch = self.retention.prune_batch

        self.on_group_finished = self.outbox.on_group_finished
        self.deliveries = self.outbox.deliveries
        self.open_deliveries = self.outbox.open_deliveries
        self.deliveries_among = self.outbox.deliveries_among

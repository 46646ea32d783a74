"""Retention (docs/design.md §4, retention; ADR 0012, 0016): deleting finished batches with
everything recorded about them, in small transactions, safe to run from several processes and
to interrupt. Stored objects are never touched.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from batchcrop.batches.outbox import Outbox
from batchcrop.db import queries
from leases import LeaseManager

PRUNE_BATCH_ROWS = 500
"""Manifest rows' items per retention transaction (a few rows each: one per ratio and format)."""
PRUNE_PAUSE_SECONDS = 0.01
"""The pause after each retention transaction, so that writers queued behind it get their turn."""


@dataclass
class PruneResult:
    """What a prune deleted: batches, and rows of every table together."""

    batches: int = 0
    rows: int = 0


class Retention:
    """Prunes finished batches over the lease engine and the application tables."""

    def __init__(self, leases: LeaseManager, outbox: Outbox) -> None:
        self.leases = leases
        self.outbox = outbox

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
        delivery_groups = self.outbox.deliveries_among(finished)
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

"""What a reader hears about a batch that is not there (docs/design.md §4, retention): a
batch `prune` deleted says so, with the day, instead of reading like a mistyped id."""

from __future__ import annotations

from batchcrop.batches.documents import iso
from batchcrop.db import queries
from leases import LeaseManager


def missing_batch(leases: LeaseManager, batch_id: str) -> str:
    """The `NoSuchBatch` message for `batch_id`: pruned (when) or never submitted here."""
    with leases.reading() as conn:
        when = conn.execute(queries.pruned_at(batch_id)).scalar()
    if when is None:
        return f"no batch {batch_id}"
    return (
        f"batch {batch_id} was pruned at {iso(when)}: `batchcrop prune` deleted its rows "
        "(its derivatives stay in the store)"
    )

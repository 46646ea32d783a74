"""How an attempt ends: the one door every ending goes through (docs/design.md §3).

The worker decides *which* ending an attempt gets from what it raised; `Attempts` makes the
fenced transition and says how it went as an `Outcome`. A lost lease and a database outage are
outcomes too, never exceptions past this point, and never confused with each other: after a lost
lease someone else owns the item; after an outage the lease simply runs out and the reaper
retries the item (nothing of this attempt was committed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from enum import StrEnum

from batchcrop.batches.documents import Derivative, Preview
from batchcrop.db import queries
from batchcrop.errors import Category
from leases import Claim, DatabaseUnavailable, LeaseLost, LeaseManager, State


class Outcome(StrEnum):
    """How one attempt ended: a metric label and a log field."""

    SUCCEEDED = State.SUCCEEDED.value
    FAILED = State.FAILED.value
    RETRYABLE = State.RETRYABLE.value
    ABANDONED = State.ABANDONED.value
    GIVEN_BACK = "given_back"
    LEASE_LOST = "lease_lost"
    DATABASE_UNAVAILABLE = "database_unavailable"


class Attempts:
    """Every ending of a claimed attempt, each one fenced transition (thread-safe)."""

    def __init__(self, leases: LeaseManager) -> None:
        self.leases = leases

    def succeed(
        self, claim: Claim, manifest: Sequence[Derivative], preview: Preview | None = None
    ) -> Outcome:
        """C: write the manifest (and the source's preview row, when one was stored) and move
        the item to `succeeded` in one fenced transaction; they replace the item's rows from an
        earlier success, if any.

        The fenced transition goes first: a stale holder fails its predicate before it writes a
        single manifest row, and the transaction rolls back whole.
        """

        def commit() -> None:
            rows = [_manifest_values(claim, row) for row in manifest]
            with self.leases.transaction() as conn:
                self.leases.complete(claim, conn=conn)
                # An earlier success's rows (kept through a re-crop or requeue) are replaced.
                conn.execute(queries.delete_item_derivatives(claim.item_id))
                conn.execute(queries.delete_item_preview(claim.item_id))
                statement, params = queries.insert_derivatives(rows)
                conn.execute(statement, list(params))
                if preview is not None:
                    values = {**asdict(preview), "item_id": claim.item_id}
                    conn.execute(queries.insert_preview({**values, "batch_id": claim.group_id}))

        return _fenced(commit, Outcome.SUCCEEDED)

    def fail(self, claim: Claim, category: Category, message: str | None = None) -> Outcome:
        """D: `failed` with a permanent error category and the attempt's public message (made
        safe by `batchcrop.errors.public_message`, or None)."""
        return _fenced(
            lambda: self.leases.fail(claim, category.value, message=message), Outcome.FAILED
        )

    def retry(self, claim: Claim, category: Category, message: str | None = None) -> Outcome:
        """E: `retryable` after a backoff, or `failed` `attempts_exhausted` at the cap; the
        message as for `fail`."""
        return _fenced(
            lambda: Outcome(self.leases.retry_later(claim, category.value, message=message).value)
        )

    def give_back(self, claim: Claim) -> Outcome:
        """F: back to `queued`, the attempt not counted (shutdown)."""
        return _fenced(lambda: self.leases.give_back(claim), Outcome.GIVEN_BACK)

    def abandon(self, claim: Claim, category: Category) -> Outcome:
        """I: `abandoned`, because the batch was cancelled or is past its deadline."""
        return _fenced(lambda: self.leases.abandon(claim, category.value), Outcome.ABANDONED)


def _fenced(transition: Callable[[], Outcome | None], done: Outcome | None = None) -> Outcome:
    """Run one ending: its outcome is what `transition` returns, else `done`; a lost lease or
    an outage is the outcome instead (nothing was committed)."""
    try:
        outcome = transition() or done
    except LeaseLost:
        return Outcome.LEASE_LOST
    except DatabaseUnavailable:
        return Outcome.DATABASE_UNAVAILABLE
    assert outcome is not None, "an ending without an outcome"
    return outcome


def _manifest_values(claim: Claim, row: Derivative) -> dict[str, object]:
    """One manifest row to insert: the derivative, its crop box as `l,t,r,b` text."""
    crop_box = ",".join(str(v) for v in row.crop_box)
    return {
        **asdict(row),
        "crop_box": crop_box,
        "item_id": claim.item_id,
        "batch_id": claim.group_id,
    }

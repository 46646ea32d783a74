"""How an attempt ends: the one door every ending goes through (docs/design.md §3).

The worker decides *which* ending an attempt gets from what it raised; `Attempts` makes the
fenced transition and says how it went as an `Outcome`. A lost lease and a database outage are
outcomes too, never exceptions past this point, and never confused with each other: after a lost
lease someone else owns the item; after an outage nothing of this attempt was committed.

An ending that meets a database outage is tried again, with backoff, by the holder of the result,
for as long as its lease is valid by the last renewal it saw (`HeldLease.valid_for`; the
heartbeats go on meanwhile) and `stop` is not set (docs/design.md §3, C'). Only then is the
outcome `database_unavailable`, and the lease is left to run out (the reaper retries the item).
An ending tried again that finds its lease gone checks whether its own earlier try went through
(a commit whose answer the outage swallowed) before it says `lease_lost`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict
from enum import StrEnum

from batchcrop.batches.documents import Derivative, Preview
from batchcrop.db import queries
from batchcrop.errors import Category
from leases import Claim, DatabaseUnavailable, HeldLease, LeaseLost, LeaseManager, State

ENDING_RETRY_MIN_SECONDS = 0.1
ENDING_RETRY_MAX_SECONDS = 2.0
"""An ending the database did not answer is tried again after 0.1 s, doubling up to 2 s (with
jitter): an item is committed at most about 2 s after the database answers again, for one
statement every 2 s per waiting ending meanwhile."""


class Outcome(StrEnum):
    """How one attempt ended: a metric label and a log field."""

    SUCCEEDED = State.SUCCEEDED.value
    FAILED = State.FAILED.value
    RETRYABLE = State.RETRYABLE.value
    ABANDONED = State.ABANDONED.value
    GIVEN_BACK = "given_back"
    PUT_OFF = "put_off"
    LEASE_LOST = "lease_lost"
    DATABASE_UNAVAILABLE = "database_unavailable"


# The states (and category, None: any) an ending leaves its item in, to recognise one's own
# earlier try after an outage.
_LEAVES: dict[Outcome, Collection[State]] = {
    Outcome.SUCCEEDED: (State.SUCCEEDED,),
    Outcome.FAILED: (State.FAILED,),
    Outcome.RETRYABLE: (State.RETRYABLE, State.FAILED),
    Outcome.PUT_OFF: (State.RETRYABLE,),
    Outcome.ABANDONED: (State.ABANDONED,),
    Outcome.GIVEN_BACK: (State.QUEUED,),
}


class Attempts:
    """Every ending of a claimed attempt, each one fenced transition (thread-safe).

    Each ending takes the attempt's `held` lease (None: not tried again after an outage) and a
    `stop` event that ends the retries early (the worker giving everything back).
    """

    def __init__(self, leases: LeaseManager) -> None:
        self.leases = leases

    def succeed(
        self,
        claim: Claim,
        manifest: Sequence[Derivative],
        preview: Preview | None = None,
        *,
        note: str | None = None,
        held: HeldLease | None = None,
        stop: threading.Event | None = None,
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
                self.leases.complete(claim, note=note, conn=conn)
                # An earlier success's rows (kept through a re-crop or requeue) are replaced.
                conn.execute(queries.delete_item_derivatives(claim.item_id))
                conn.execute(queries.delete_item_preview(claim.item_id))
                statement, params = queries.insert_derivatives(rows)
                conn.execute(statement, list(params))
                if preview is not None:
                    values = {**asdict(preview), "item_id": claim.item_id}
                    conn.execute(queries.insert_preview({**values, "batch_id": claim.group_id}))

        return self._fenced(claim, commit, Outcome.SUCCEEDED, None, held=held, stop=stop)

    def fail(
        self,
        claim: Claim,
        category: Category,
        message: str | None = None,
        *,
        held: HeldLease | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome:
        """D: `failed` with a permanent error category and the attempt's public message (made
        safe by `batchcrop.errors.public_message`, or None)."""
        return self._fenced(
            claim,
            lambda: self.leases.fail(claim, category.value, message=message),
            Outcome.FAILED,
            category,
            held=held,
            stop=stop,
        )

    def retry(
        self,
        claim: Claim,
        category: Category,
        message: str | None = None,
        *,
        held: HeldLease | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome:
        """E: `retryable` after a backoff, or `failed` `attempts_exhausted` at the cap; the
        message as for `fail`."""
        return self._fenced(
            claim,
            lambda: Outcome(self.leases.retry_later(claim, category.value, message=message).value),
            Outcome.RETRYABLE,
            None,
            held=held,
            stop=stop,
        )

    def put_off(
        self,
        claim: Claim,
        category: Category,
        message: str | None = None,
        *,
        held: HeldLease | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome:
        """E': `retryable` after a backoff, the attempt not counted: a dependency was down
        (docs/design.md §3, budgets); the message as for `fail`."""
        return self._fenced(
            claim,
            lambda: self.leases.put_off(claim, category.value, message=message),
            Outcome.PUT_OFF,
            category,
            held=held,
            stop=stop,
        )

    def give_back(
        self,
        claim: Claim,
        *,
        held: HeldLease | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome:
        """F: back to `queued`, the attempt not counted (shutdown)."""
        return self._fenced(
            claim,
            lambda: self.leases.give_back(claim),
            Outcome.GIVEN_BACK,
            None,
            held=held,
            stop=stop,
        )

    def abandon(
        self,
        claim: Claim,
        category: Category,
        *,
        held: HeldLease | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome:
        """I: `abandoned`, because the batch was cancelled or is past its deadline."""
        return self._fenced(
            claim,
            lambda: self.leases.abandon(claim, category.value),
            Outcome.ABANDONED,
            category,
            held=held,
            stop=stop,
        )

    def _fenced(
        self,
        claim: Claim,
        transition: Callable[[], Outcome | None],
        done: Outcome,
        category: Category | None,
        *,
        held: HeldLease | None,
        stop: threading.Event | None,
    ) -> Outcome:
        """Run one ending: its outcome is what `transition` returns, else `done`; a lost lease
        or an outage is the outcome instead (nothing was committed). An outage is waited out
        while `held` stays valid and `stop` is not set (see the module docstring)."""
        pause = ENDING_RETRY_MIN_SECONDS
        tried_before = False
        while True:
            try:
                return transition() or done
            except LeaseLost:
                ended = self._went_through(claim, done, category) if tried_before else None
                return Outcome.LEASE_LOST if ended is None else ended
            except DatabaseUnavailable:
                wait = pause * random.uniform(0.5, 1.0)
                if held is None or not held.valid_for(wait):
                    return Outcome.DATABASE_UNAVAILABLE
                if stop is None:
                    time.sleep(wait)
                elif stop.wait(wait):
                    return Outcome.DATABASE_UNAVAILABLE
                tried_before = True
                pause = min(pause * 2, ENDING_RETRY_MAX_SECONDS)

    def _went_through(
        self, claim: Claim, done: Outcome, category: Category | None
    ) -> Outcome | None:
        """The ending's outcome when the item is where it would have left it, still under this
        attempt's token and with its category: an earlier try committed, and only its answer
        was lost. None otherwise (someone else moved the item)."""
        try:
            item = self.leases.item(claim.item_id)
        except DatabaseUnavailable:
            return None
        if item is None or item.lease_token != claim.lease_token:
            return None
        if item.state not in _LEAVES[done]:
            return None
        if category is not None and item.error_category != category.value:
            return None
        return Outcome.FAILED if item.state is State.FAILED else done


def _manifest_values(claim: Claim, row: Derivative) -> dict[str, object]:
    """One manifest row to insert: the derivative, its boxes as `l,t,r,b` text, its requested
    width 0 for the single size."""

    def text(box: tuple[int, int, int, int]) -> str:
        return ",".join(str(v) for v in box)

    return {
        **asdict(row),
        "crop_box": text(row.crop_box),
        "padding": text(row.padding),
        "trim_box": None if row.trim_box is None else text(row.trim_box),
        "requested_width": row.requested_width or 0,
        "item_id": claim.item_id,
        "batch_id": claim.group_id,
    }

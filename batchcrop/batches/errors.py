"""The errors of batch operations, and the translation of the lease engine's "no such group"
into "no such batch". The CLI maps each to an exit code, the API to a problem document."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from batchcrop.errors import BatchcropError
from leases import NoSuchGroup


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


class NoSuchRef(BatchcropError):
    """No item of the batch (in the asked states) has this ref."""


class BadCursor(BatchcropError):
    """A pagination cursor that this server did not hand out."""


class BatchEnded(BatchcropError):
    """A cancel of a batch whose items have all ended: nothing is left to stop."""


class NothingToRedeliver(BatchcropError):
    """A redelivery of a batch that has no callback, has not ended yet, or whose delivery is
    still under way."""


@contextmanager
def as_batch(batch_id: str) -> Iterator[None]:
    """The lease engine's "no such group" is this module's "no such batch"."""
    try:
        yield
    except NoSuchGroup as exc:
        raise NoSuchBatch(f"no batch {batch_id}") from exc

"""The `leases` exception family: catch `LeaseError` for everything this package raises."""

from __future__ import annotations


class LeaseError(Exception):
    """Base of every error the lease engine raises on purpose."""


class LeaseLost(LeaseError):
    """A fenced write matched no row: the item is no longer `in_progress` under this token.

    The holder must stop working on the item and write nothing more about it.
    """


class NoSuchGroup(LeaseError):
    """The group id names no group."""


class GroupEnded(LeaseError):
    """The group's items have all ended: there is nothing left to cancel."""


class GroupExists(LeaseError):
    """A group with this id already exists."""


class RequeueNeedsDeadline(LeaseError):
    """Requeuing a cancelled or expired group needs a new deadline, else it is reaped at once."""


class GroupCancelled(LeaseError):
    """The group was cancelled: its work is not done again (redo, K) until it is requeued."""


class NotRedoable(LeaseError):
    """A redo (K) found the item in a state it does not take (`REDOABLE`): typically queued or
    in progress since another redo. Carries the item's `state` and its current `payload`."""

    def __init__(self, item_id: str, state: str, payload: dict[str, object]) -> None:
        super().__init__(f"item {item_id} is {state}")
        self.item_id = item_id
        self.state = state
        self.payload = payload


class NoSuchItem(LeaseError):
    """The item id names no item of the group."""


class ConstraintViolation(LeaseError):
    """A write in the transaction broke a constraint of the schema (a caller's own tables
    included), typically a unique key someone else wrote first. The transaction was rolled back."""


class SchemaMissing(LeaseError):
    """A statement named a table the database does not have: the schema was never created
    there (often a mistyped database URL), or a migration is missing."""


class DatabaseUnavailable(LeaseError):
    """A transient database failure (connection refused/reset, restart, lock wait exhausted).

    Callers may retry the operation later; nothing was committed by the failed call.
    """


class DatabaseRefused(LeaseError):
    """The database answered, and refused: no such database or role, a wrong password, a
    database file that cannot be opened. Waiting does not help; the configuration must change.
    """

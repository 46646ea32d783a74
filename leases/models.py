"""Values the lease engine hands out: states and frozen row snapshots.

All times are timezone-aware UTC `datetime`s read from the database clock.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

MILLISECONDS_PER_SECOND = 1000
MESSAGE_MAX_CHARS = 200
"""The longest message an attempt's ending keeps (item and event); longer ones are clipped."""


class State(StrEnum):
    """The state of one item (docs/design.md §3)."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    RETRYABLE = "retryable"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABANDONED = "abandoned"


TERMINAL: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED, State.ABANDONED})
"""States an item leaves only through an operator's requeue (J) or redo (K)."""
UNFINISHED: frozenset[State] = frozenset({State.QUEUED, State.IN_PROGRESS, State.RETRYABLE})
"""States whose items the engine will still move on its own."""
REQUEUEABLE: frozenset[State] = frozenset({State.FAILED, State.ABANDONED})
"""States a requeue (J) takes items out of."""
REDOABLE: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED})
"""States a redo (K) takes one item out of: its work ended, and can be done again."""


def state_names(states: Collection[State] = tuple(State)) -> list[str]:
    """The names of `states` in the lifecycle order of `State` (for documents and messages)."""
    return [s.value for s in State if s in states]


class StopReason(StrEnum):
    """Why a held attempt must stop, decided in SQL on the database clock (docs/design.md §3).

    `cancelled`: its group was cancelled (end it abandoned); `deadline_exceeded`: its group is
    past its deadline (abandoned); `max_attempt_seconds`: the attempt ran too long (retry it).
    """

    CANCELLED = "cancelled"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    MAX_ATTEMPT_SECONDS = "max_attempt_seconds"


# Failure categories are counted per category only in these states (see docs/adr/0001).
CATEGORISED: frozenset[State] = frozenset({State.FAILED, State.ABANDONED})


def from_ms(epoch_ms: int) -> datetime:
    """Convert epoch milliseconds (the storage unit) into an aware UTC datetime."""
    return datetime.fromtimestamp(epoch_ms / MILLISECONDS_PER_SECOND, tz=UTC)


def to_ms(seconds: float) -> int:
    """Convert a duration in seconds into whole milliseconds."""
    return round(seconds * MILLISECONDS_PER_SECOND)


class NewItem(NamedTuple):
    """An item to create: its caller-chosen id and an opaque JSON object, given as a mapping or
    as the JSON text of one (stored as given: a caller creating many items encodes each payload
    once, in whatever way is fastest for it, and is answerable for the text being an object).

    `create_group` also takes plain (id, payload) pairs (`ItemPair`), such as a `zip` of ids and
    payload texts: a million-item creation then makes no object per item."""

    id: str
    payload: Mapping[str, Any] | str


ItemPair = tuple[str, Mapping[str, Any] | str]
"""An item to create as a plain (id, payload) pair, which is what a `NewItem` is."""


PRIORITY_MIN = -10
PRIORITY_MAX = 10
"""A group's priority is an integer in [PRIORITY_MIN, PRIORITY_MAX]; 0 by default, higher is
claimed first (docs/design.md §3, sharing)."""


def check_priority(priority: int) -> int:
    """`priority` if it is within the bounds, else ValueError naming them."""
    if isinstance(priority, bool) or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}")
    return priority


@dataclass(frozen=True)
class Lane:
    """A shared resource the claimer's attempts use, with a cap on how many of them may be in
    progress at once across every claimer (say, a bucket's request budget).

    `name` (at most 64 characters) is the application's; every claimer naming the same lane must
    give it the same `max_in_progress` (each enforces its own value against the shared count)."""

    name: str
    max_in_progress: int

    def __post_init__(self) -> None:
        if not 1 <= len(self.name) <= 64:
            raise ValueError("a lane's name has 1 to 64 characters")
        if self.max_in_progress < 1:
            raise ValueError("a lane's max_in_progress must be at least 1")


@dataclass(frozen=True)
class Claim:
    """One claimed attempt. `lease_token` fences every later write about it."""

    item_id: str
    group_id: str
    attempt: int
    lease_token: str
    lease_expires_at: datetime
    payload: dict[str, Any]
    correlation_id: str


ENDING_STATES: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED, State.ABANDONED})
"""The states `LeaseManager.finish_many` ends held attempts in (C, D and I)."""


@dataclass(frozen=True)
class Ending:
    """How `LeaseManager.finish_many` ends one held attempt: C (`succeeded`, the default), D
    (`failed`, with a permanent error `category` and optionally a `message`) or I
    (`abandoned`, with `cancelled` or `deadline_exceeded`), as `complete`, `fail` and `abandon`
    do. Raises ValueError for any other combination."""

    claim: Claim
    state: State = State.SUCCEEDED
    category: str | None = None
    message: str | None = None

    def __post_init__(self) -> None:
        if self.state not in ENDING_STATES:
            raise ValueError(f"an attempt cannot be ended {self.state.value} here")
        if (self.category is None) != (self.state is State.SUCCEEDED):
            raise ValueError("failed and abandoned take a category; succeeded takes none")
        if self.message is not None and self.state is not State.FAILED:
            raise ValueError("only a failed attempt keeps a message")


@dataclass(frozen=True)
class HeartbeatReply:
    """A heartbeat's answer; `stop_reason` set means the lease was NOT extended."""

    lease_expires_at: datetime
    stop_reason: StopReason | None


@dataclass(frozen=True)
class QueueStats:
    """The whole queue at one moment: unfinished items by state (from the counters) and how
    long the item at the head of the queued line has been waiting (None: nothing queued)."""

    counts: Mapping[State, int]
    head_queued_age_seconds: float | None


@dataclass(frozen=True)
class ReapResult:
    """How many items one reaper pass moved, by destination."""

    retried: int
    failed: int
    abandoned: int
    # Groups whose creation was left half-done by a crashed submitter, deleted by the pass.
    discarded_groups: int = 0
    # Of `retried` and `failed`: items released because their worker was no longer seen.
    released: int = 0

    @property
    def total(self) -> int:
        """All items moved by the pass."""
        return self.retried + self.failed + self.abandoned


@dataclass(frozen=True)
class WorkerRow:
    """A lease holder as the registry sees it (docs/design.md §3, worker registry).

    `status`: `alive` (seen within the timeout), `absent` (registered, not seen since: its
    leases are being released) or `unregistered` (holds leases but never wrote a row: only the
    per-item lease bounds them). Times are None for an unregistered holder.
    """

    id: str
    status: str
    started_at: datetime | None
    last_seen_at: datetime | None
    seen_seconds_ago: float | None
    info: dict[str, Any]
    leases_held: int
    oldest_lease_started_at: datetime | None
    in_flight: int | None = None
    """Items the worker's slots said they work on at its last refresh; None when it does not
    say (an older version, an unregistered holder)."""
    held_not_in_flight: int = 0
    """Of `leases_held`, those claimed before that refresh that no slot works on: released
    within seconds by the worker itself, or by `release_not_in_flight` (docs/design.md §3, G'')."""


@dataclass(frozen=True)
class HeldItem:
    """One lease held now: the item, its group, its holder and the attempt's lease token."""

    item_id: str
    group_id: str
    worker_id: str
    lease_token: str
    attempt_started_at: datetime


@dataclass(frozen=True)
class GroupSummary:
    """A group's status read from its counters (no scan of its items)."""

    id: str
    created_at: datetime
    deadline_at: datetime
    max_attempts: int
    cancel_requested: bool
    total: int
    counts: dict[State, int]
    failures: dict[str, int]
    updated_at: datetime
    oldest_updated_at: datetime | None
    priority: int = 0
    paused: bool = False


@dataclass(frozen=True)
class ItemRow:
    """A snapshot of one item."""

    id: str
    group_id: str
    seq: int
    state: State
    attempt: int
    error_category: str | None
    updated_at: datetime
    payload: dict[str, Any]
    error_message: str | None = None
    """Why the last attempt ended, as its ender said it (null when it said nothing)."""
    lease_token: str | None = None
    """The token of the item's last attempt (kept after it ended; None before any claim)."""


@dataclass(frozen=True)
class EventRow:
    """One transition in the event log; `from_state` is None only on a creation event, which
    groups created before creations stopped logging events (ADR 0023) still have."""

    id: int
    item_id: str
    group_id: str
    attempt: int
    from_state: State | None
    to_state: State
    at: datetime
    worker_id: str | None
    lease_token: str | None
    reason: str | None
    correlation_id: str | None
    message: str | None = None
    """The ender's message for a fail or retry (null for every other move)."""

"""Generic lease-and-heartbeat work claiming on SQLAlchemy Core (PostgreSQL and SQLite).

Items belong to groups; workers claim items under time-limited leases held in database time,
renew them with heartbeats, and end each attempt with a fenced transition; a reaper recovers
expired leases. See `LeaseManager` and docs/design.md §3.
"""

from leases.engine import configure_sqlite, make_engine
from leases.errors import (
    ConstraintViolation,
    DatabaseUnavailable,
    GroupExists,
    LeaseError,
    LeaseLost,
    NoSuchGroup,
    RequeueNeedsDeadline,
    SchemaMissing,
)
from leases.heartbeat import Heartbeater
from leases.manager import LEASE_SECONDS, MAX_ATTEMPT_SECONDS, WORKER_TIMEOUT_SECONDS, LeaseManager
from leases.migrate import upgrade
from leases.models import (
    REQUEUEABLE,
    TERMINAL,
    UNFINISHED,
    Claim,
    EventRow,
    GroupSummary,
    HeartbeatReply,
    ItemRow,
    NewItem,
    ReapResult,
    State,
    StopReason,
    WorkerRow,
    state_names,
)
from leases.registry import WORKER_LOST

__all__ = [
    "LEASE_SECONDS",
    "MAX_ATTEMPT_SECONDS",
    "REQUEUEABLE",
    "TERMINAL",
    "UNFINISHED",
    "WORKER_LOST",
    "WORKER_TIMEOUT_SECONDS",
    "Claim",
    "ConstraintViolation",
    "DatabaseUnavailable",
    "EventRow",
    "GroupExists",
    "GroupSummary",
    "HeartbeatReply",
    "Heartbeater",
    "ItemRow",
    "LeaseError",
    "LeaseLost",
    "LeaseManager",
    "NewItem",
    "NoSuchGroup",
    "ReapResult",
    "RequeueNeedsDeadline",
    "SchemaMissing",
    "State",
    "StopReason",
    "WorkerRow",
    "configure_sqlite",
    "make_engine",
    "state_names",
    "upgrade",
]

"""Generic lease-and-heartbeat work claiming on SQLAlchemy Core (PostgreSQL and SQLite).

Items belong to groups; workers claim items under time-limited leases held in database time,
renew them with heartbeats, and end each attempt with a fenced transition; a reaper recovers
expired leases. See `LeaseManager` and docs/design.md §3.

Names are imported from their submodules on first use, so that `import leases` (and a
command line's help) does not load SQLAlchemy and Alembic before they are needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leases.defaults import (
        LEASE_SECONDS,
        MAX_ATTEMPT_SECONDS,
        PRIORITY_AGING_SECONDS,
        WORKER_TIMEOUT_SECONDS,
    )
    from leases.engine import configure_sqlite, make_engine
    from leases.errors import (
        ConstraintViolation,
        DatabaseRefused,
        DatabaseUnavailable,
        GroupCancelled,
        GroupEnded,
        GroupExists,
        LeaseError,
        LeaseLost,
        NoSuchGroup,
        NoSuchItem,
        NotRedoable,
        RequeueNeedsDeadline,
        SchemaMissing,
    )
    from leases.heartbeat import Heartbeater, Heartbeats, HeldLease
    from leases.manager import LeaseManager
    from leases.migrate import upgrade
    from leases.models import (
        MESSAGE_MAX_CHARS,
        PRIORITY_MAX,
        PRIORITY_MIN,
        REDOABLE,
        REQUEUEABLE,
        TERMINAL,
        UNFINISHED,
        Claim,
        Ending,
        EventRow,
        GroupSummary,
        HeartbeatReply,
        HeldItem,
        ItemPair,
        ItemRow,
        Lane,
        NewItem,
        QueueStats,
        ReapResult,
        State,
        StopReason,
        WorkerRow,
        state_names,
    )
    from leases.registry import NOT_IN_FLIGHT, RELEASED, WORKER_LOST
    from leases.wakeups import Signal, Wakeups

_HOMES = {
    "configure_sqlite": "leases.engine",
    "make_engine": "leases.engine",
    "ConstraintViolation": "leases.errors",
    "DatabaseRefused": "leases.errors",
    "DatabaseUnavailable": "leases.errors",
    "GroupEnded": "leases.errors",
    "GroupExists": "leases.errors",
    "LeaseError": "leases.errors",
    "LeaseLost": "leases.errors",
    "NoSuchGroup": "leases.errors",
    "NoSuchItem": "leases.errors",
    "NotRedoable": "leases.errors",
    "GroupCancelled": "leases.errors",
    "RequeueNeedsDeadline": "leases.errors",
    "SchemaMissing": "leases.errors",
    "Heartbeater": "leases.heartbeat",
    "Heartbeats": "leases.heartbeat",
    "HeldLease": "leases.heartbeat",
    "LEASE_SECONDS": "leases.defaults",
    "MAX_ATTEMPT_SECONDS": "leases.defaults",
    "WORKER_TIMEOUT_SECONDS": "leases.defaults",
    "PRIORITY_AGING_SECONDS": "leases.defaults",
    "LeaseManager": "leases.manager",
    "upgrade": "leases.migrate",
    "REDOABLE": "leases.models",
    "MESSAGE_MAX_CHARS": "leases.models",
    "REQUEUEABLE": "leases.models",
    "TERMINAL": "leases.models",
    "UNFINISHED": "leases.models",
    "Claim": "leases.models",
    "Ending": "leases.models",
    "EventRow": "leases.models",
    "GroupSummary": "leases.models",
    "HeartbeatReply": "leases.models",
    "HeldItem": "leases.models",
    "ItemPair": "leases.models",
    "ItemRow": "leases.models",
    "Lane": "leases.models",
    "PRIORITY_MAX": "leases.models",
    "PRIORITY_MIN": "leases.models",
    "NewItem": "leases.models",
    "QueueStats": "leases.models",
    "ReapResult": "leases.models",
    "State": "leases.models",
    "StopReason": "leases.models",
    "WorkerRow": "leases.models",
    "state_names": "leases.models",
    "WORKER_LOST": "leases.registry",
    "NOT_IN_FLIGHT": "leases.registry",
    "RELEASED": "leases.registry",
    "Signal": "leases.wakeups",
    "Wakeups": "leases.wakeups",
}

__all__ = [
    "LEASE_SECONDS",
    "MAX_ATTEMPT_SECONDS",
    "MESSAGE_MAX_CHARS",
    "NOT_IN_FLIGHT",
    "PRIORITY_AGING_SECONDS",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "REDOABLE",
    "RELEASED",
    "REQUEUEABLE",
    "TERMINAL",
    "UNFINISHED",
    "WORKER_LOST",
    "WORKER_TIMEOUT_SECONDS",
    "Claim",
    "ConstraintViolation",
    "DatabaseRefused",
    "DatabaseUnavailable",
    "Ending",
    "EventRow",
    "GroupCancelled",
    "GroupEnded",
    "GroupExists",
    "GroupSummary",
    "HeartbeatReply",
    "Heartbeater",
    "Heartbeats",
    "HeldItem",
    "HeldLease",
    "ItemPair",
    "ItemRow",
    "Lane",
    "LeaseError",
    "LeaseLost",
    "LeaseManager",
    "NewItem",
    "NoSuchGroup",
    "NoSuchItem",
    "NotRedoable",
    "QueueStats",
    "ReapResult",
    "RequeueNeedsDeadline",
    "SchemaMissing",
    "Signal",
    "State",
    "StopReason",
    "Wakeups",
    "WorkerRow",
    "configure_sqlite",
    "make_engine",
    "state_names",
    "upgrade",
]


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value

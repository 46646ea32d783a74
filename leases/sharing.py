"""Sharing one fleet between groups: priority, pause and resume (docs/design.md §3, sharing).

A mixin of `LeaseManager`, as `leases.reads.Reader` is: the claim itself (which ranks groups by
priority, skips paused ones and counts lanes) is the manager's.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from leases import group_queries
from leases.errors import NoSuchGroup
from leases.executor import Executor
from leases.models import check_priority
from leases.wakeups import announce

LANE_LOCK_NAMESPACE = b"leases.lane:"


def lane_lock_key(name: str) -> int:
    """The PostgreSQL advisory-lock key of lane `name`: a signed 64-bit digest, the same in
    every process (Python's `hash` is salted per process)."""
    digest = hashlib.blake2b(LANE_LOCK_NAMESPACE + name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class Sharing:
    """Priority and pause of groups. Each change is one UPDATE of the group's row (which takes
    its row lock, so it serialises with a requeue, a redo or a purge of the group) and changes
    the group's version (`version`), so a poller sees it."""

    _db: Executor

    def set_priority(
        self, group_id: str, priority: int, *, conn: sa.Connection | None = None
    ) -> bool:
        """Set the group's priority (`PRIORITY_MIN`..`PRIORITY_MAX`; ValueError outside): the
        next claims rank it so. Returns False when it had that priority. Raises `NoSuchGroup`.
        With `conn`, in the caller's transaction (as every change here)."""
        check_priority(priority)
        return self._set_flags(group_id, conn, priority=priority)

    def pause(self, group_id: str, *, conn: sa.Connection | None = None) -> bool:
        """Pause the group: from the commit on no claim takes its items; attempts already held
        run to their end as usual (a held item is neither stopped nor given back), and its
        deadline runs on (past it, the reaper abandons its items as for any group). Idempotent:
        returns False when it was already paused. Raises `NoSuchGroup`."""
        return self._set_flags(group_id, conn, paused=True)

    def resume(self, group_id: str, *, conn: sa.Connection | None = None) -> bool:
        """Resume a paused group, and wake the claimers (docs/design.md §3, wake-ups). Returns
        False when it was not paused. Raises `NoSuchGroup`."""
        return self._set_flags(group_id, conn, paused=False)

    def _set_flags(
        self,
        group_id: str,
        conn: sa.Connection | None,
        *,
        priority: int | None = None,
        paused: bool | None = None,
    ) -> bool:
        db = self._db
        with db.write(conn) as c:
            if db.one(c, group_queries.group_row(group_id, lock=True)) is None:
                raise NoSuchGroup(group_id)
            changed = db.rowcount(c, group_queries.set_sharing(group_id, priority, paused)) > 0
            if changed and paused is False:
                announce(db, c)
        return changed

"""The lease engine's default durations, in a module that imports nothing (so a command line
can show them in its help without loading the engine)."""

from __future__ import annotations

LEASE_SECONDS = 900.0
MAX_ATTEMPT_SECONDS = 600.0
# A registered worker not seen for this long is taken for dead: the reaper releases its leases
# (docs/design.md §3, worker registry). Workers refresh their row several times per timeout.
WORKER_TIMEOUT_SECONDS = 30.0
# Claims prefer groups of higher priority; a group's effective priority rises by one level per
# this many seconds since its creation, up to the highest priority among the groups with queued
# work (docs/design.md §3, sharing).
PRIORITY_AGING_SECONDS = 300.0

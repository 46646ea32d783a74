"""Which stores the live fleet serves (docs/design.md §5, the batch knows its store; §7, queue
gauges): a batch of a store no live worker serves waits, unseen, until one starts, so a
submission says so and the queue gauges leave such stores out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from batchcrop.db import queries
from batchcrop.metrics import FleetStats
from leases import LeaseManager, State, WorkerRow

LEGACY_STORE_LABEL = ""
"""The `store` label of batches submitted before stores were recorded (any worker serves them)."""


def served_stores(workers: Sequence[WorkerRow]) -> set[str]:
    """The stores of the workers seen within the worker timeout (`alive`)."""
    return {
        str(row.info["store"])
        for row in workers
        if row.status == "alive" and row.info.get("store") is not None
    }


def serves(row: WorkerRow, store: str | None, batch_id: str) -> bool:
    """Whether this registry row is a live worker that claims from this batch: its store (any,
    for a batch without one) and, when the worker names its batches, among them."""
    if row.status != "alive":
        return False
    if store is not None and row.info.get("store") != store:
        return False
    named = row.info.get("batch_ids")
    return named is None or batch_id in named


def unserved_warning(leases: LeaseManager, store: str | None, batch_id: str) -> str | None:
    """One sentence when no live worker serves the batch (a mistyped bucket, a fleet on another
    database), naming the stores the live workers serve; None when one does."""
    workers = leases.workers()
    if any(serves(row, store, batch_id) for row in workers):
        return None
    where = "its store" if store is None else f"its store {store}"
    others = sorted(served_stores(workers) - {store or ""})
    if others:
        return (
            f"no live worker serves {where}: the batch waits until one starts with that "
            f"--store (live workers serve {', '.join(others)})"
        )
    return f"no live worker serves {where} (none is registered in this database): the batch waits"


def served_queue(
    by_store: Mapping[str | None, Mapping[State, int]], workers: Sequence[WorkerRow]
) -> dict[str, dict[State, int]]:
    """The unfinished items by store (`queries.queue_by_store`), only of stores a live worker
    serves; batches without a recorded store under `LEGACY_STORE_LABEL` while any worker is
    alive."""
    served = served_stores(workers)
    alive = any(row.status == "alive" for row in workers)
    queue: dict[str, dict[State, int]] = {}
    for store, counts in by_store.items():
        if (store is None and alive) or (store is not None and store in served):
            label = LEGACY_STORE_LABEL if store is None else store
            queue[label] = dict(counts)
    return queue


def queue_counts(rows: Sequence[Any]) -> dict[str | None, dict[State, int]]:
    """(store, state, n) rows as counts by store and state."""
    counts: dict[str | None, dict[State, int]] = {}
    for row in rows:
        counts.setdefault(row.store, {})[State(row.state)] = int(row.n or 0)
    return counts


def read_served_queue(leases: LeaseManager) -> dict[str, dict[State, int]]:
    """`served_queue` as it stands: one read of the counters by store, one of the registry."""
    with leases.reading() as conn:
        rows = list(conn.execute(queries.queue_by_store()))
    return served_queue(queue_counts(rows), leases.workers())


DELIVERY_STAGE_OF_STATE = {
    State.QUEUED: "pending",
    State.IN_PROGRESS: "pending",
    State.RETRYABLE: "retrying",
    State.FAILED: "failed",
    State.ABANDONED: "failed",
}
"""The metric's stage of a delivery's lease state (`succeeded`, delivered, is not counted)."""


def read_fleet_stats(leases: LeaseManager) -> FleetStats:
    """The registry (workers by status, live slots by store) and the deliveries by stage."""
    workers = leases.workers()
    statuses: dict[str, int] = {}
    slots: dict[str, int] = {}
    for row in workers:
        if row.status == "unregistered":
            continue
        statuses[row.status] = statuses.get(row.status, 0) + 1
        if row.status == "alive" and row.info.get("store") is not None:
            store = str(row.info["store"])
            slots[store] = slots.get(store, 0) + int(row.info.get("concurrency") or 0)
    stages: dict[str, int] = {}
    with leases.reading() as conn:
        for counted in conn.execute(queries.delivery_counts()):
            stage = DELIVERY_STAGE_OF_STATE.get(State(counted.state))
            if stage is not None:
                stages[stage] = stages.get(stage, 0) + int(counted.n or 0)
    return FleetStats(workers=statuses, slots=slots, deliveries=stages)

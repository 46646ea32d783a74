"""The worker registry as documents (CLI `workers`, `GET /v1/workers`, operator page, `status
--watch`): docs/design.md §7, worker document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchcrop.batches.documents import iso
from leases import WorkerRow


def worker_document(row: WorkerRow) -> dict[str, Any]:
    """One worker (or unregistered lease holder) as a JSON document; field order is contract."""
    info = row.info
    return {
        "id": row.id,
        "status": row.status,
        "host": info.get("host"),
        "pid": info.get("pid"),
        "version": info.get("version"),
        "started_at": iso(row.started_at),
        "last_seen_at": iso(row.last_seen_at),
        "seen_seconds_ago": None
        if row.seen_seconds_ago is None
        else round(row.seen_seconds_ago, 1),
        "concurrency": info.get("concurrency"),
        "batch_ids": info.get("batch_ids"),
        "store": info.get("store"),
        "store_max_concurrent": info.get("store_max_concurrent"),
        "leases_held": row.leases_held,
        "oldest_lease_at": iso(row.oldest_lease_started_at),
        "in_flight": row.in_flight,
        "held_not_in_flight": row.held_not_in_flight,
    }


def worker_documents(rows: Sequence[WorkerRow]) -> list[dict[str, Any]]:
    """Every row as a document, in the registry's order (oldest start first, then holders
    without a row)."""
    return [worker_document(row) for row in rows]


def fleet_summary(documents: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Live workers, and leases held by workers no longer seen (absent or unregistered)."""
    return {
        "alive": sum(1 for d in documents if d["status"] == "alive"),
        "held_by_alive": sum(d["leases_held"] for d in documents if d["status"] == "alive"),
        "held_by_absent": sum(d["leases_held"] for d in documents if d["status"] != "alive"),
    }

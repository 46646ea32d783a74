"""The chaos harness, outages: PostgreSQL restarted and stopped at the moment a worker commits,
and a store outage longer than every retry and the items' attempt budget (ADR 0027)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.backends import ChaosConfig
from tests.chaos.harness import run
from tests.chaos.table import render
from tests.services import rgw as rgw_service

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.rgw]
REPO = Path(__file__).resolve().parents[2]


def test_outages_at_the_commit_and_past_the_retries_fail_and_strand_nothing(
    postgres_binaries: None, rgw: rgw_service.RGWEndpoint, worker_id: str
) -> None:
    """A restart and a 15 s stop of PostgreSQL, each cutting a worker's commit, and S3 down
    for 20 s with two attempts per item: no item fails, none stays in_progress 10 s past an
    outage's end (leases are 60 s: a stranded item would wait for its expiry), 0 violations."""
    config = ChaosConfig(
        root=REPO / ".tmp" / "chaos" / f"outages-{worker_id}",
        items=300,
        cancel_items=30,
        deadline_items=30,
        deadline_seconds=60.0,
        workers=2,
        lease_seconds=60.0,
        max_attempts=2,
        kills=0,
        pauses=0,
        pg_restarts=0,
        pg_drops=0,
        storage_outages=0,
        pg_stalls=0,
        s3_stalls=0,
        storage_fail_fraction=0.02,
        pg_commit_cuts=2,
        pg_commit_cut_seconds=(0.0, 15.0),
        long_storage_outages=1,
        long_storage_outage_seconds=20.0,
        stranded_bound_seconds=10.0,
        timeout_seconds=400.0,
    )
    report = run(config)
    print(render(report))
    assert report.violations == []
    assert (report.faults["pg_commit_cut"], report.faults["long_storage_outage"]) == (2, 1)
    assert (report.stranded, report.failed_by_outage) == (0, 0)
    assert report.batches["main"]["state"] == "succeeded"

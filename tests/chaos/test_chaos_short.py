"""The chaos harness, short: real workers killed and paused, PostgreSQL restarted, S3 faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.backends import ChaosConfig
from tests.chaos.harness import run
from tests.chaos.table import render
from tests.services import rgw as rgw_service

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.rgw]
REPO = Path(__file__).resolve().parents[2]


def test_short_chaos_run_keeps_every_invariant(
    postgres_binaries: None, rgw: rgw_service.RGWEndpoint, worker_id: str
) -> None:
    """150 items, 3 workers, kills, a pause, a PostgreSQL restart, S3 faults: 0 violations,
    and each SIGKILLed worker's items released and claimed again within the recovery bounds."""
    config = ChaosConfig(
        # Under the repository (not tmp_path): the cluster runs as the `postgres` user, which
        # cannot enter pytest's private temporary folders.
        root=REPO / ".tmp" / "chaos" / f"short-{worker_id}",
        items=150,
        cancel_items=30,
        deadline_items=30,
        deadline_seconds=8.0,
        workers=3,
        kills=4,
        pauses=1,
        pg_restarts=1,
        pg_drops=1,
        storage_outages=1,
        pg_stalls=1,
        s3_stalls=0,  # a stall outlasts max_attempt_seconds: too long for the suite
        timeout_seconds=150.0,
    )
    report = run(config)
    print(render(report))
    assert report.violations == []
    assert (report.faults["sigkill"], report.faults["pg_restart"]) == (4, 1)
    assert report.faults["sigstop"] == 1
    assert report.batches["main"]["state"] == "succeeded"
    assert report.audit.reclaims > 0
    # Time-to-recovery after each SIGKILL: every item a killed worker held was released, and
    # those of kills clear of database faults within the bounds (also audited as violations).
    assert report.recoveries, "the SIGKILLed workers held no item"
    assert all(r.released is not None for r in report.recoveries), report.recoveries
    # The lease (3 s) ends first: 3 s + 1.2 reaper intervals + 4 s slack; then 5 s backoff + 2 s.
    assert report.release_bound == pytest.approx(8.2)
    assert report.reclaim_bound == pytest.approx(15.2)
    assert report.api_answers.get(200, 0) > 0

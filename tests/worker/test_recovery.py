"""Recovery in seconds: a SIGKILLed worker's items are released once it is no longer seen
(docs/design.md §3, G'), with real `batchcrop worker` processes on SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from batchcrop.app import App
from batchcrop.worker.presence import REFRESHES_PER_TIMEOUT
from leases import WORKER_LOST, State
from tests.chaos.invariants import all_events
from tests.chaos.recovery import Kill, recoveries
from tests.cli.test_cli import Cli, _submit, cli, held_by, inspect, pg_cli, pg_inspect, wait_for
from tests.images import write_photos

__all__ = ["cli", "inspect", "pg_cli", "pg_inspect"]  # fixtures

pytestmark = pytest.mark.slow
TIMEOUT_SECONDS = 3.0
# A loaded 2-core machine: process start, a reaper pass, scheduling.
SLACK_SECONDS = 4.0
# The first retry waits at most this (RETRY_BACKOFF_SECONDS), plus a slot's idle sleep (1 s).
FIRST_RETRY_SECONDS = 5.0 + 1.0


@dataclass(frozen=True)
class Recovery:
    """Seconds from the SIGKILL until the item was released, and until it was claimed again."""

    item: str
    released: float
    reclaimed: float
    kill: Kill


def _claims(app: App, batch: str, item: str) -> int:
    events = app.leases.events(batch, item_id=item, limit=100)
    return sum(1 for e in events if e.to_state == State.IN_PROGRESS)


def measure_recovery(cli: Cli, app: App, src: Path, *flags: str) -> Recovery:
    """Kill a worker holding an item (default 900 s lease) while another one runs; time how
    long the item takes to come back. The second worker runs from the start, as in a fleet."""
    batch = _submit(cli, src)
    victim = cli.spawn("worker", "--concurrency", "1", *flags)
    item = wait_for(lambda: held_by(app, batch, victim.pid), "the victim to hold an item")
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    kill = Kill(victim.pid, datetime.now(UTC))
    victim.wait(10)
    survivor = cli.spawn("worker", "--concurrency", "1", *flags)
    try:
        wait_for(
            lambda: (
                ((i := app.leases.item(item)) is not None and i.state != State.IN_PROGRESS)
                or _claims(app, batch, item) > 1
            ),
            "the item to be released",
            timeout=120,
        )
        released = time.monotonic() - killed
        wait_for(lambda: _claims(app, batch, item) > 1, "the item to be claimed again", 120)
        reclaimed = time.monotonic() - killed
        wait_for(lambda: app.batches.status(batch)["state"] == "succeeded", "success", 120)
    finally:
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(30) == 0
    return Recovery(item, released, reclaimed, kill)


def test_sigkilled_worker_items_come_back_within_the_worker_timeout(
    cli: Cli, inspect: App, tmp_path: Path
) -> None:
    """With the default 900 s lease, a SIGKILLed worker's item is released `worker_lost` within
    the worker timeout plus one refresh (on one machine at the survivor's first refresh, ADR
    0047), and claimed again after the first retry backoff; the dead worker is listed absent
    and the survivor's clean exit removes its own row."""
    write_photos(tmp_path / "src", 6, size=(2400, 1800))
    flags = ("--worker-timeout-seconds", str(TIMEOUT_SECONDS))
    recovery = measure_recovery(cli, inspect, tmp_path / "src", *flags)
    print(
        f"recovery: released after {recovery.released:.1f} s,"
        f" claimed again after {recovery.reclaimed:.1f} s"
    )
    batch = inspect.leases.item(recovery.item).group_id  # type: ignore[union-attr]
    reasons = [e.reason for e in inspect.leases.events(batch, item_id=recovery.item)]
    assert WORKER_LOST in reasons
    refresh = TIMEOUT_SECONDS / REFRESHES_PER_TIMEOUT
    assert recovery.released <= TIMEOUT_SECONDS + refresh + SLACK_SECONDS, recovery
    assert recovery.reclaimed <= TIMEOUT_SECONDS + refresh + FIRST_RETRY_SECONDS + SLACK_SECONDS
    # The chaos harness's measure (from the event log) agrees with this one (polled).
    (measured,) = recoveries([recovery.kill], all_events(inspect, batch))
    assert (measured.item_id, measured.reason) == (recovery.item, WORKER_LOST)
    assert measured.released is not None
    assert measured.reclaimed is not None
    assert abs(measured.released - recovery.released) < 1.0
    assert abs(measured.reclaimed - recovery.reclaimed) < 1.0
    item = inspect.leases.item(recovery.item)
    assert item is not None
    assert item.state == State.SUCCEEDED
    assert item.attempt == 2
    listed = cli.json("workers", *flags)["workers"]
    assert [(w["status"], w["leases_held"]) for w in listed] == [("absent", 0)]
    # The survivor's log line names the dead worker, not only itself.
    (dead,) = listed
    lost = [
        line
        for proc in cli.processes
        for line in cli.log_of(proc).splitlines()
        if "msg=worker_lost" in line
    ]
    assert lost
    assert all(f"absent={dead['id']}" in line for line in lost), lost


def test_partitioned_worker_is_released_and_fenced(
    pg_cli: Cli, pg_inspect: App, tmp_path: Path
) -> None:
    """A SIGSTOPped worker (a partition, not a death) loses its item `worker_lost` long before
    its lease ends; resumed, its late writes are refused and the item succeeds once.
    PostgreSQL only: a process frozen inside a SQLite write transaction holds the file's lock."""
    cli, app = pg_cli, pg_inspect
    write_photos(tmp_path / "src", 3, size=(2400, 1800))
    batch = _submit(cli, tmp_path / "src")
    flags = ("--concurrency", "1", "--worker-timeout-seconds", str(TIMEOUT_SECONDS))
    paused = cli.spawn("worker", *flags)
    item = wait_for(lambda: held_by(app, batch, paused.pid), "the worker to hold an item")
    token = next(
        e.lease_token
        for e in reversed(app.leases.events(batch, item_id=item))
        if e.to_state == "in_progress"
    )
    paused.send_signal(signal.SIGSTOP)
    other = cli.spawn("worker", *flags)
    try:
        wait_for(lambda: app.batches.status(batch)["state"] == "succeeded", "success", 120)
        paused.send_signal(signal.SIGCONT)
        time.sleep(1.5)  # the resumed worker reaches its next fenced write
    finally:
        for proc in (paused, other):
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        assert (paused.wait(30), other.wait(30)) == (0, 0)
    events = app.leases.events(batch, item_id=item, limit=100)
    released = [e for e in events if e.lease_token == token and e.from_state == "in_progress"]
    assert [(e.to_state, e.reason) for e in released] == [(State.RETRYABLE, WORKER_LOST)]
    assert len([e for e in events if e.to_state == "succeeded"]) == 1
    assert "lease_lost" in cli.log_of(paused)

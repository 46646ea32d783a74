"""`batchcrop release` (docs/design.md §3, G''): an operator puts back in `queued` the leases of
one batch that a live worker holds but none of its slots works on, saying who and why."""

from __future__ import annotations

import json
import time
from pathlib import Path

from batchcrop.app import App
from leases import RELEASED, State
from tests.cli.test_cli import Cli, _submit, cli, inspect
from tests.images import write_photos

__all__ = ["cli", "inspect"]  # fixtures


def test_release_puts_back_the_leases_no_slot_works_on(
    cli: Cli, inspect: App, tmp_path: Path
) -> None:
    """`workers` shows the lease held but not in flight; `release` puts it back with an event
    naming who and why, and the lease in flight stays held."""
    write_photos(tmp_path / "src", 2)
    batch = _submit(cli, tmp_path / "src")
    working, dropped = inspect.leases.claim("w", 2, group_ids=[batch])
    time.sleep(1.1)  # claimed well before the refresh that leaves it out
    inspect.leases.worker_seen("w", {"pid": 1}, in_flight=[working.item_id])

    (listed,) = json.loads(cli("workers", "--json").stdout)["workers"]
    result = cli("release", batch, "--reason", "stuck after the failover", "--by", "alice")

    assert (listed["leases_held"], listed["held_not_in_flight"]) == (2, 1)
    assert (result.returncode, result.stdout) == (0, "released 1 lease\n")
    item = inspect.leases.item(dropped.item_id)
    assert item is not None
    assert item.state == State.QUEUED
    event = inspect.leases.events(batch, item_id=dropped.item_id, limit=10)[-1]
    assert (
        event.reason,
        event.message,
    ) == (RELEASED, "released by alice: stuck after the failover")
    kept = inspect.leases.item(working.item_id)
    assert kept is not None
    assert kept.state == State.IN_PROGRESS


def test_release_needs_a_reason_on_one_line(cli: Cli, tmp_path: Path) -> None:
    """An empty reason, or one with control characters, is a usage error naming the flag."""
    write_photos(tmp_path / "src", 1)
    batch = _submit(cli, tmp_path / "src")
    for reason in ("  ", "a\x1b[2Jb"):
        result = cli("release", batch, "--reason", reason)
        assert result.returncode == 2
        assert "--reason" in result.stderr

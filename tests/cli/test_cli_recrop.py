"""`batchcrop recrop` in subprocesses: an item rendered again with a focus box, and one clear
line per mistake (docs/design.md §7, CLI)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import Cli
from tests.cli.test_cli_operations import _batch, _one_line
from tests.images import write_photos

pytestmark = pytest.mark.slow


@pytest.fixture
def cli(sqlite_url: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(sqlite_url, tmp_path / "out")
    yield runner
    runner.kill_all()


def _work(cli: Cli, batch: str) -> None:
    """Run a worker on `batch` until `wait` says it succeeded."""
    worker = cli.spawn("worker", "--batch", batch)
    try:
        waited = cli("wait", batch, timeout=120)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert waited.returncode == 0, waited.stderr


def test_recrop_renders_an_item_again_and_names_each_mistake(cli: Cli, tmp_path: Path) -> None:
    """A malformed box is exit 2 before the database is asked; an unfinished item is exit 2
    naming its state and pending box; an unknown item exit 5; a re-crop of a succeeded item
    (by id prefixes) queues it with the box, and a worker renders it under new keys, with the
    re-crop and its box in `events`; a box wholly outside the picture is exit 2."""
    write_photos(tmp_path / "src", 1)
    batch = _batch(cli, tmp_path / "src")
    (item,) = cli.json("items", batch)["items"]
    _one_line(cli("recrop", batch, item["id"], "--focus", "1,2,3"), 2, "--focus")
    _one_line(cli("recrop", batch, item["id"], "--focus", "9,0,9,5"), 2, "right")
    _one_line(cli("recrop", batch, item["id"], "--focus", "0,0,9,9"), 2, "is queued")
    _one_line(cli("recrop", batch, "0000dead", "--focus", "0,0,9,9"), 5, "no item 0000dead")
    _work(cli, batch)
    _one_line(
        cli("recrop", batch, item["id"], "--focus", "9000,9000,9010,9010"), 2, "lies outside the"
    )

    queued = cli.json("recrop", batch[:8], item["id"][:8], "--focus", "0,0,60,40")

    assert (queued["state"], queued["focus_box"]) == ("queued", [0, 0, 60, 40])
    _one_line(
        cli("recrop", batch, item["id"], "--focus", "5,5,50,50"),
        2,
        "is queued with focus box [0, 0, 60, 40]",
    )
    _work(cli, batch)
    (redone,) = cli.json("items", batch)["items"]
    assert redone["state"] == "succeeded"
    new_keys = {d["key"] for d in redone["derivatives"]}
    assert len(item["derivatives"] or queued["derivatives"]) == len(new_keys)
    assert not new_keys & {d["key"] for d in queued["derivatives"]}  # the earlier success's
    shown = cli("recrop", batch, item["id"], "--focus", "0,0,30,30")
    assert shown.returncode == 0, shown.stderr
    assert f"re-cropping item {item['id']} with focus box 0,0,30,30" in shown.stderr
    cli.env["COLUMNS"] = "400"
    events = cli("events", batch, "--item", item["id"][:8])
    assert "recrop 0,0,60,40" in events.stdout

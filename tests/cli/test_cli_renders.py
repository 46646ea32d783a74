"""Acceptance tests of render processes: the real `batchcrop` CLI in subprocesses."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import Cli, _running, wait_for
from tests.images import write_photos
from tests.scans import repeated_scans, slow_jpeg

pytestmark = pytest.mark.slow
BOMB_SCANS = 20_000
"""As many scans as the CPU bomb that held a slot for minutes (there over 8900x8900)."""


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Iterator[Cli]:
    """The CLI on this test's database with a store folder in tmp_path."""
    yield from _running(database_url, tmp_path)


def _render_children(pid: int) -> list[int]:
    """The render children of `pid` (started by any of its threads; not the resource tracker
    nor any other child)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with_args = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"batchcrop.renders" in with_args:
                found.append(int(child))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_scan_bomb_beside_good_sources_fails_at_once_and_the_rest_succeed(
    cli: Cli, tmp_path: Path
) -> None:
    """`run` with default settings: the bomb fails `invalid_image` saying why, the three good
    sources succeed, all well within a minute."""
    write_photos(tmp_path / "src", 3)
    (tmp_path / "src" / "bomb.jpg").write_bytes(repeated_scans(512, BOMB_SCANS))
    started = time.monotonic()

    result = cli("run", str(tmp_path / "src"), "--out", str(tmp_path / "d"), "--json")

    assert time.monotonic() - started < 60
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert (document["counts"]["succeeded"], document["failures"]) == (3, {"invalid_image": 1})
    items = cli.json("items", document["id"], "--state", "failed")["items"]
    assert "scans" in items[0]["error_message"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("run", ".", "--out", "o", "--render-processes", "-1"), "--render-processes"),
        (("worker", "--render-deadline-seconds", "0"), "--render-deadline-seconds"),
    ],
)
def test_bad_render_process_flags_exit_2_naming_the_flag(
    cli: Cli, args: tuple[str, ...], needle: str
) -> None:
    """A negative process count or a deadline that is not positive: exit 2, the flag named."""
    result = cli(*args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_a_killed_run_leaves_no_render_child_behind(cli: Cli, tmp_path: Path) -> None:
    """SIGKILL of `run` while its children render: every child exits by itself."""
    source = tmp_path / "src"
    source.mkdir()
    for n in range(2):
        (source / f"slow-{n}.jpg").write_bytes(slow_jpeg())
    run = cli.spawn("run", str(source), "--out", str(tmp_path / "d"), "--workers", "2")
    children = wait_for(
        lambda: len(_render_children(run.pid)) == 2 and _render_children(run.pid), "children"
    )
    time.sleep(1.0)  # warm, claimed, rendering

    run.send_signal(signal.SIGKILL)
    run.wait(10)

    wait_for(lambda: not any(_alive(pid) for pid in children), "the children to exit", 10)


def test_a_run_that_ends_before_rendering_leaves_no_render_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run` starts its render children before its own start-up; one that then fails (here:
    an empty folder) ends them, in a process that goes on (a library caller's)."""
    from batchcrop.cli.main import main  # noqa: PLC0415
    from batchcrop.renders import spawn  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    started: list[spawn.Started] = []
    real_prestart = spawn.prestart

    def watched(count: int) -> None:
        real_prestart(count)
        started.extend(spawn._prestarted)

    monkeypatch.setattr(spawn, "prestart", watched)
    code = main(["run", "--workers", "2", str(tmp_path / "empty"), "--out", str(tmp_path / "d")])
    assert code == 2
    assert len(started) == 2
    assert spawn._prestarted == []
    assert all(child.process.returncode is not None for child in started)

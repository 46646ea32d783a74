"""Acceptance tests: the real `batchcrop` CLI in subprocesses, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from batchcrop.app import App, build
from batchcrop.cli.commands import GIVE_BACK_WAIT_SECONDS
from batchcrop.cli.exit_codes import Exit
from batchcrop.settings import Settings
from leases import State
from storage import LocalStore, S3Store
from tests.images import write_corrupt, write_photos
from tests.services import rgw as rgw_service
from tests.services.proxy import FaultProxy

pytestmark = pytest.mark.slow
WAIT_SECONDS = 60.0


class Cli:
    """Runs `python -m batchcrop` against one database and one store folder."""

    def __init__(self, database_url: str, out: Path) -> None:
        self.out = out
        self.cwd = out.parent
        self.processes: list[subprocess.Popen[str]] = []
        self.env = {
            **os.environ,
            "BATCHCROP_DATABASE_URL": database_url,
            "BATCHCROP_STORE": f"file://{out}",
            "PYTHONFAULTHANDLER": "1",  # a process that hangs shows its threads (`ended`)
        }
        self.env.pop("BATCHCROP_API_TOKEN", None)

    def __call__(
        self, *args: str, timeout: float = WAIT_SECONDS, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command to its end (with `stdin` as its standard input)."""
        return subprocess.run(
            [sys.executable, "-m", "batchcrop", *args],
            env=self.env,
            cwd=self.cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        """Start a long-running command; its output goes to a log file in the test folder."""
        with (self.cwd / f"process-{len(self.processes)}.log").open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "batchcrop", "--log-level", "INFO", *args],
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.processes.append(proc)
        return proc

    def ended(self, proc: subprocess.Popen[str], seconds: float) -> int:
        """The exit code of a spawned process that must end within `seconds`; one that does not
        is made to dump its threads' stacks (SIGABRT, `PYTHONFAULTHANDLER`) and fails the test
        with its log."""
        try:
            return proc.wait(seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            proc.wait(10)
            pytest.fail(f"still running after {seconds} s:\n{self.log_of(proc)}")

    def log_of(self, proc: subprocess.Popen[str]) -> str:
        """What a spawned process wrote."""
        return (self.cwd / f"process-{self.processes.index(proc)}.log").read_text()

    def create_empty_database(self) -> None:
        """Make the database exist without tables: an empty SQLite file (a PostgreSQL test
        database exists already). Commands that only read never create one."""
        url = self.env["BATCHCROP_DATABASE_URL"]
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).touch()

    def kill_all(self) -> None:
        """Leave no process behind, whatever the test did."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def json(self, *args: str) -> Any:
        """Run a reading command with --json and parse its stdout."""
        result = self(*args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


def _running(database_url: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(database_url, tmp_path / "out")
    yield runner
    runner.kill_all()


def _inspecting(cli: Cli) -> Iterator[App]:
    app = build(Settings(database_url=cli.env["BATCHCROP_DATABASE_URL"]))
    yield app
    app.close()


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Iterator[Cli]:
    """The CLI on this test's database with a store folder in tmp_path."""
    yield from _running(database_url, tmp_path)


@pytest.fixture
def inspect(cli: Cli) -> Iterator[App]:
    """An in-process app on the CLI's database, for looking at what the CLI did."""
    yield from _inspecting(cli)


@pytest.fixture
def pg_cli(postgres_url: str, tmp_path: Path) -> Iterator[Cli]:
    """The CLI on PostgreSQL only (see the SIGSTOP test for why)."""
    yield from _running(postgres_url, tmp_path)


@pytest.fixture
def pg_inspect(pg_cli: Cli) -> Iterator[App]:
    """An in-process app on the PostgreSQL database of `pg_cli`."""
    yield from _inspecting(pg_cli)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def held_by(app: App, batch_id: str, pid: int) -> str | None:
    """The item a worker process currently holds, from the event log and the item rows."""
    held = {i.id for i in app.leases.items(batch_id, states=[State.IN_PROGRESS], limit=1000)}
    for event in reversed(app.leases.events(batch_id, limit=1000)):
        if event.to_state == "in_progress" and f":{pid}:" in (event.worker_id or ""):
            return event.item_id if event.item_id in held else None
    return None


def test_run_processes_a_folder_and_resumes_idempotently(cli: Cli, tmp_path: Path) -> None:
    """`run --json` prints only the final document; re-running finds the same batch."""
    write_photos(tmp_path / "src", 3)
    out = tmp_path / "derivs"
    args = (
        "run",
        str(tmp_path / "src"),
        "--out",
        str(out),
        "--ratios",
        "1:1,16:9",
        "--max-side",
        "300",
    )
    first = cli(*args, "--json")
    assert first.returncode == 0, first.stderr
    document = json.loads(first.stdout)
    assert (document["state"], document["counts"]["succeeded"]) == ("succeeded", 3)
    keys = sorted(i.key for i in LocalStore(out).list())
    assert len([k for k in keys if not k.startswith("previews/")]) == 6
    assert len([k for k in keys if k.startswith("previews/")]) == 3  # one per source

    second = cli(*args, "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["id"] == document["id"]
    assert sorted(i.key for i in LocalStore(out).list()) == keys

    watched = cli.json("status", document["id"], "--watch")
    assert (watched["id"], watched["state"]) == (document["id"], "succeeded")
    listed = cli.json("batches", "--state", "succeeded")
    assert [b["id"] for b in listed["batches"]] == [document["id"]]
    assert cli.json("batches", "--state", "failed")["batches"] == []
    items = cli.json("items", document["id"], "--state", "succeeded")["items"]
    # A list of states, as `requeue --state` takes one: the same items here.
    assert cli.json("items", document["id"], "--state", "failed,succeeded")["items"] == items
    assert cli.json("items", document["id"], "--state", "failed,abandoned")["items"] == []
    derivatives = [k for k in keys if not k.startswith("previews/")]
    assert sorted(d["key"] for i in items for d in i["derivatives"]) == derivatives
    assert sorted(i["preview"]["key"] for i in items) == sorted(set(keys) - set(derivatives))
    human = cli("items", document["id"])
    assert human.returncode == 0
    assert "succeeded" in human.stdout


def test_run_exits_1_when_the_batch_failed(cli: Cli, tmp_path: Path) -> None:
    """A corrupt image fails its item and the run exits 1 with the failure in the document."""
    write_photos(tmp_path / "src", 1)
    write_corrupt(tmp_path / "src")
    result = cli("run", str(tmp_path / "src"), "--out", str(tmp_path / "d"), "--json")
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert (document["state"], document["failures"]) == ("failed", {"invalid_image": 2})


def test_run_and_wait_exit_0_when_the_failures_are_within_the_allowance(
    cli: Cli, tmp_path: Path
) -> None:
    """Two corrupt images of three with `--allow-failures 2`: the batch is succeeded with its
    failures counted, and `run` and `wait` exit 0; `--allow-failures 50%` (1 of 3) exits 1."""
    write_photos(tmp_path / "src", 1)
    write_corrupt(tmp_path / "src")
    out = str(tmp_path / "d")
    result = cli("run", str(tmp_path / "src"), "--out", out, "--allow-failures", "2", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["state"], document["counts"]["failed"], document["failures_allowed"]) == (
        "succeeded",
        2,
        2,
    )
    assert cli("wait", document["id"]).returncode == 0
    shown = cli("status", document["id"])
    assert "2 allowed" in shown.stdout
    strict = cli("run", str(tmp_path / "src"), "--out", out, "--allow-failures", "50%", "--json")
    assert strict.returncode == 1, strict.stderr
    assert json.loads(strict.stdout)["failures_allowed"] == 1
    assert cli("wait", json.loads(strict.stdout)["id"]).returncode == 1


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_submit_says_it_created_a_database_and_that_no_worker_serves_the_store(
    cli: Cli, tmp_path: Path
) -> None:
    """The first submission names the SQLite file it created; each submission no live worker
    serves says so on stderr, and still exits 0 with the id alone on stdout."""
    write_photos(tmp_path / "src", 1)
    first = cli("submit", str(tmp_path / "src"))
    assert first.returncode == 0, first.stderr
    database = cli.env["BATCHCROP_DATABASE_URL"].removeprefix("sqlite:///")
    assert f"batchcrop: warning: created a new SQLite database at {database}" in first.stderr
    assert "no live worker serves its store file://" in first.stderr
    assert len(first.stdout.split()) == 1
    second = cli("submit", str(tmp_path / "src"), "--label", "again")
    assert second.returncode == 0, second.stderr
    assert "created a new SQLite database" not in second.stderr
    assert "no live worker serves its store" in second.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("run", "--bogus-flag", "x"), "unrecognized arguments"),
        (("run", "/nonexistent/photos", "--out", "o"), "/nonexistent/photos"),
        (
            ("run", ".", "--out", "o", "--store", "file://o"),
            "--out DIR is short for --store file://DIR: give only one",
        ),
        (("run", ".", "--out", "o", "--ratios", "16:0"), "ratio"),
        (("submit", ".", "--deadline", "soon"), "duration"),
        (("submit",), "nothing to crop: give image files, folders or s3:// prefixes, or"),
        (("submit", ".", "--allow-failures", "101%"), "argument --allow-failures: it must be"),
        (("run", ".", "--out", "o", "--allow-failures", "-1"), "argument --allow-failures"),
    ],
)
def test_bad_command_lines_exit_2_with_one_clear_line(
    cli: Cli, args: tuple[str, ...], needle: str
) -> None:
    """Bad flags and missing sources: exit 2, a message naming the problem, no traceback."""
    result = cli(*args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_batch_exits_5(cli: Cli) -> None:
    """Asking for a batch that does not exist exits 5."""
    assert cli("db", "upgrade").returncode == 0
    result = cli("status", "7b1e4c1e-0000-4000-8000-000000000000")
    assert result.returncode == 5
    assert "no batch" in result.stderr


def test_unreachable_database_exits_3(tmp_path: Path) -> None:
    """A database that does not answer exits 3 with a message and no traceback."""
    cli = Cli("postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2", tmp_path / "o")
    result = cli("batches")
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr


def _submit(cli: Cli, src: Path | str, *extra: str) -> str:
    result = cli("submit", str(src), "--max-side", "600", *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _objects_match_manifest(app: App, batch_id: str, out: Path) -> None:
    manifest = app.batches.manifest(batch_id)
    store = LocalStore(out)
    stored = {i.key: hashlib.sha256(store.get(i.key)).hexdigest() for i in store.list()}
    previews = {k: v for k, v in stored.items() if k.startswith("previews/")}
    assert {k: v for k, v in stored.items() if k not in previews} == {
        m["key"]: m["sha256"] for m in manifest
    }
    items, _ = app.batches.items(batch_id, limit=1000)
    assert previews == {i["preview"]["key"]: i["preview"]["sha256"] for i in items}


def test_sigkilled_worker_is_recovered(cli: Cli, inspect: App, tmp_path: Path) -> None:
    """Two workers; one SIGKILLed mid-item: its item is retried (`worker_lost` at the survivor's
    first registry refresh, the victim's process being gone from this machine: ADR 0047), the
    batch succeeds, no strays. (A frozen worker, whose process lives, loses its item to the
    reaper's lease expiry: `test_paused_worker_past_its_lease_cannot_write_late`.)"""
    write_photos(tmp_path / "src", 8, size=(2400, 1800))
    batch = _submit(cli, tmp_path / "src")
    lease = ("--lease-seconds", "2", "--reaper-interval-seconds", "0.5", "--concurrency", "1")
    victim = cli.spawn("worker", *lease)
    item = wait_for(lambda: held_by(inspect, batch, victim.pid), "the victim to hold an item")
    victim.kill()
    victim.wait(10)
    survivor = cli.spawn("worker", *lease)
    try:
        wait_for(lambda: inspect.batches.status(batch)["state"] == "succeeded", "success")
    finally:
        survivor.send_signal(signal.SIGTERM)
        assert cli.ended(survivor, 30) == 0
    reasons = [e.reason for e in inspect.leases.events(batch, item_id=item, limit=100)]
    assert "worker_lost" in reasons
    assert inspect.leases.item(item).attempt == 2  # type: ignore[union-attr]
    _objects_match_manifest(inspect, batch, cli.out)


def test_paused_worker_past_its_lease_cannot_write_late(
    pg_cli: Cli, pg_inspect: App, tmp_path: Path
) -> None:
    """A SIGSTOPped worker whose lease was reaped has its late writes rejected by the fence.

    PostgreSQL only: on SQLite a process frozen inside a write transaction keeps the file's
    write lock, so every other process waits (docs/operations.md says so); the fencing itself
    is proven on SQLite by the lease engine's tests.
    """
    cli, inspect = pg_cli, pg_inspect
    write_photos(tmp_path / "src", 3, size=(2400, 1800))
    batch = _submit(cli, tmp_path / "src")
    lease = ("--lease-seconds", "1.5", "--reaper-interval-seconds", "0.5", "--concurrency", "1")
    paused = cli.spawn("worker", *lease)
    item = wait_for(lambda: held_by(inspect, batch, paused.pid), "the worker to hold an item")
    stale_token = next(
        e.lease_token
        for e in reversed(inspect.leases.events(batch, item_id=item))
        if e.to_state == "in_progress"
    )
    paused.send_signal(signal.SIGSTOP)
    other = cli.spawn("worker", *lease)
    try:
        wait_for(lambda: inspect.batches.status(batch)["state"] == "succeeded", "success")
        paused.send_signal(signal.SIGCONT)
        time.sleep(1.0)  # let the resumed worker reach its next fenced write
    finally:
        for proc in (paused, other):
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        assert (cli.ended(paused, 30), cli.ended(other, 30)) == (0, 0)
    events = inspect.leases.events(batch, item_id=item, limit=100)
    succeeded = [e for e in events if e.to_state == "succeeded"]
    assert len(succeeded) == 1
    assert succeeded[0].lease_token != stale_token
    assert not [
        e
        for e in events
        if e.lease_token == stale_token
        and e.from_state == "in_progress"
        and e.reason != "lease_expired"
    ]
    _objects_match_manifest(inspect, batch, cli.out)


def test_sigterm_gives_the_item_back_without_counting_the_attempt(
    cli: Cli, inspect: App, tmp_path: Path
) -> None:
    """SIGTERM with no grace: the held item goes back to queued, attempt not counted, exit 0."""
    write_photos(tmp_path / "src", 2, size=(2400, 1800))
    batch = _submit(cli, tmp_path / "src")
    worker = cli.spawn("worker", "--concurrency", "1", "--shutdown-grace-seconds", "0")
    item = wait_for(lambda: held_by(inspect, batch, worker.pid), "the worker to hold an item")
    worker.send_signal(signal.SIGTERM)
    assert cli.ended(worker, 30) == 0
    row = inspect.leases.item(item)
    assert row is not None
    events = inspect.leases.events(batch, item_id=item)
    if row.state == "succeeded":
        pytest.skip("the item finished before the signal arrived")  # a race the test cannot pin
    assert (row.state, row.attempt) == ("queued", 0)
    assert events[-1].from_state == "in_progress"
    assert events[-1].to_state == "queued"
    assert all(e.to_state != "failed" for e in events)


def test_priority_pause_and_resume_through_the_cli(cli: Cli, tmp_path: Path) -> None:
    """submit --priority sets it, `priority` changes it, pause and resume flip `paused`; an
    out-of-range priority is a usage error naming it."""
    write_photos(tmp_path / "src", 2)
    batch = _submit(cli, tmp_path / "src", "--priority", "4")
    assert cli.json("status", batch)["priority"] == 4
    assert cli.json("priority", batch, "-3")["priority"] == -3
    paused = cli("pause", batch)
    assert paused.returncode == 0, paused.stderr
    assert "(paused)" in paused.stdout
    assert cli.json("status", batch)["paused"] is True
    assert cli.json("resume", batch)["paused"] is False
    refused = cli("priority", batch, "11")
    assert (refused.returncode, "-10 to 10" in refused.stderr) == (2, True), refused.stderr
    refused = cli("submit", str(tmp_path / "src"), "--priority", "high")
    assert (refused.returncode, "--priority" in refused.stderr) == (2, True), refused.stderr


def test_cancel_and_requeue_through_the_cli(cli: Cli, tmp_path: Path) -> None:
    """cancel abandons unclaimed items; requeue with a new deadline makes the batch succeed."""
    write_photos(tmp_path / "src", 3)
    batch = _submit(cli, tmp_path / "src")
    cancelled = cli.json("cancel", batch)
    assert (cancelled["state"], cancelled["cancel_requested"]) == ("abandoned", True)
    assert cancelled["failures"] == {"cancelled": 3}

    refused = cli("requeue", batch)
    assert refused.returncode == 2
    assert "deadline" in refused.stderr

    requeued = cli.json("requeue", batch, "--deadline", "1h")
    assert (requeued["state"], requeued["cancel_requested"]) == ("queued", False)
    port = free_port()
    worker = cli.spawn("worker", "--concurrency", "2", "--metrics-port", str(port))
    try:
        wait_for(lambda: cli.json("status", batch)["state"] == "succeeded", "success")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert b"batchcrop_commits_total 3.0" in metrics
        assert b"batchcrop_claims_total 3.0" in metrics
    finally:
        worker.send_signal(signal.SIGTERM)
        assert cli.ended(worker, 30) == 0
    items = cli.json("items", batch)
    assert items["next_cursor"] is None
    assert [i["attempt"] for i in items["items"]] == [1, 1, 1]
    events = cli.json("events", batch)["events"]
    assert [e["to_state"] for e in events].count("succeeded") == 3


def test_ctrl_c_on_run_gives_back_exits_130_and_resumes(cli: Cli, tmp_path: Path) -> None:
    """SIGINT during `run` gives held items back and exits 130; the same command then finishes."""
    write_photos(tmp_path / "src", 6, size=(2400, 1800))
    args = (
        "run",
        str(tmp_path / "src"),
        "--out",
        str(tmp_path / "d"),
        "--workers",
        "1",
        "--no-progress",
    )
    proc = cli.spawn(*args)
    wait_for((tmp_path / "d" / "derivatives").exists, "the first derivative")
    proc.send_signal(signal.SIGINT)
    assert cli.ended(proc, 30) == 130
    (interrupted,) = cli.json("batches")["batches"]
    assert interrupted["counts"]["in_progress"] == 0  # given back, not left to the reaper
    given_back = [
        e
        for e in cli.json("events", interrupted["id"])["events"]
        if (e["from_state"], e["to_state"], e["reason"]) == ("in_progress", "queued", "interrupted")
    ]
    # One slot holds at most one item; it may have been between items when the signal came.
    assert len(given_back) <= 1
    finished = cli(*args, "--json")
    assert finished.returncode == 0, finished.stderr
    document = json.loads(finished.stdout)
    assert document["counts"]["succeeded"] == 6
    assert document["id"] == interrupted["id"]
    attempts = [i["attempt"] for i in cli.json("items", document["id"])["items"]]
    assert attempts == [1] * 6  # the given-back attempt was not counted


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("status", "7b1e4c1e-0000-4000-8000-000000000000"),
        ("items", "7b1e4c1e-0000-4000-8000-000000000000"),
        ("events", "7b1e4c1e-0000-4000-8000-000000000000"),
        ("cancel", "7b1e4c1e-0000-4000-8000-000000000000"),
        ("requeue", "7b1e4c1e-0000-4000-8000-000000000000"),
        ("reap",),
    ],
)
def test_a_database_without_the_schema_is_named_not_a_traceback(
    cli: Cli, args: tuple[str, ...]
) -> None:
    """Read and operator commands on a database that was never set up (a mistyped URL, most
    often) say so in one line and exit 3, the database exit code."""
    cli.create_empty_database()
    result = cli(*args)
    assert (result.returncode, "Traceback" in result.stderr) == (3, False), result.stderr
    assert "no batchcrop tables" in result.stderr
    assert "db upgrade" in result.stderr


@pytest.mark.slow
def test_crafted_refs_are_printed_literally(cli: Cli, tmp_path: Path) -> None:
    """Refs from an items CSV that look like markup or bidi tricks are shown as they are, the
    bidi control escaped: no crash, no faked line; refs holding escape sequences or carriage
    returns are refused at submission, as the API refuses them."""
    write_photos(tmp_path / "src", 3)

    def submit(refs: list[str]) -> subprocess.CompletedProcess[str]:
        with (tmp_path / "items.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["source", "ref"])
            for n, ref in enumerate(refs):
                writer.writerow([tmp_path / "src" / f"photo-{n % 3:03d}.jpg", ref])
        return cli("submit", "--items-csv", str(tmp_path / "items.csv"))

    for control in ("title\x1b]0;owned\x07", "ok\rFAKE"):
        refused = submit(["fine", control])
        assert refused.returncode == Exit.USAGE
        assert ": ref must not contain control characters" in refused.stderr
    submitted = submit(["[/oops]", "[bold red]FAILED[/]", "\u202egpj.exe"])
    assert submitted.returncode == 0, submitted.stderr
    cli.env["COLUMNS"] = "400"  # one table row per line, so each ref reads whole
    listed = cli("items", submitted.stdout.strip())
    assert (listed.returncode, listed.stderr) == (0, "")
    assert "[/oops]" in listed.stdout
    assert "[bold red]FAILED[/]" in listed.stdout
    assert "\\u202egpj.exe" in listed.stdout
    assert "\u202e" not in listed.stdout


def test_items_csv_focus_columns_reach_the_item_document(cli: Cli, tmp_path: Path) -> None:
    """`submit --items-csv` with focus columns: `items --json` shows each focus box (null for
    a row without one) and the table a focus column; a row with three of the four columns is a
    usage error naming the row and the column, and submits nothing."""
    photos = write_photos(tmp_path / "src", 2)
    header = ["source", "ref", "focus_left", "focus_top", "focus_right", "focus_bottom"]
    with (tmp_path / "items.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerow([photos[0], "focused", "500", "100", "700", "300"])
        writer.writerow([photos[1], "plain", "", "", "", ""])
    submitted = cli("submit", "--items-csv", str(tmp_path / "items.csv"))
    assert submitted.returncode == 0, submitted.stderr
    batch_id = submitted.stdout.strip()
    items = cli.json("items", batch_id)["items"]
    assert [(i["ref"], i["focus_box"]) for i in items] == [
        ("focused", [500, 100, 700, 300]),
        ("plain", None),
    ]
    cli.env["COLUMNS"] = "400"
    listed = cli("items", batch_id)
    assert "500,100,700,300" in listed.stdout

    with (tmp_path / "partial.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerow([photos[0], "partial", "500", "100", "700", ""])
    refused = cli("submit", "--items-csv", str(tmp_path / "partial.csv"))
    assert (refused.returncode, "Traceback" in refused.stderr) == (2, False)
    assert "row 2: focus_bottom has no value" in refused.stderr
    assert len(cli.json("batches")["batches"]) == 1


@pytest.mark.rgw
def test_sigterm_stops_a_worker_whose_slot_is_stuck_reading_a_source(
    cli: Cli, inspect: App, rgw: rgw_service.RGWEndpoint, rgw_bucket: S3Store, tmp_path: Path
) -> None:
    """A source on an S3 server that trickles its body (64 bytes every half second) holds the
    slot in its read; SIGTERM still ends the worker within the grace period plus the bounded
    give-back wait, and the stuck item is left to its lease, never failed."""
    photo = tmp_path / "photo.jpg"
    write_photos(tmp_path / "src", 1, size=(1600, 1200))[0].rename(photo)
    rgw_bucket.put_if_absent("sources/photo.jpg", photo.read_bytes())
    upstream = urlsplit(rgw.url)
    proxy = FaultProxy(upstream.hostname or "127.0.0.1", upstream.port or 80).start()
    try:
        cli.env.update(
            BATCHCROP_S3_ENDPOINT_URL=proxy.url,
            AWS_ACCESS_KEY_ID=rgw.access_key,
            AWS_SECRET_ACCESS_KEY=rgw.secret_key,
            AWS_DEFAULT_REGION="us-east-1",
        )
        batch = _submit(cli, f"s3://{rgw_bucket.bucket}/sources/photo.jpg")
        proxy.configure(trickle_bytes=64, trickle_seconds=0.5)
        worker = cli.spawn("worker", "--concurrency", "1", "--shutdown-grace-seconds", "1")
        item = wait_for(lambda: held_by(inspect, batch, worker.pid), "the worker to hold the item")
        time.sleep(1.0)  # well into the read: about 100 KB at 128 bytes a second
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        code = cli.ended(worker, GIVE_BACK_WAIT_SECONDS + 20)
        took = time.monotonic() - signalled
    finally:
        proxy.stop()
    assert took < 1 + GIVE_BACK_WAIT_SECONDS + 5
    assert code in (0, Exit.INTERRUPTED)
    row = inspect.leases.item(item)
    assert row is not None
    assert row.state in ("in_progress", "queued", "retryable"), row.state


READ_COMMANDS = [
    ("status", "7b1e4c1e"),
    ("items", "7b1e4c1e"),
    ("events", "7b1e4c1e"),
    ("cancel", "7b1e4c1e"),
    ("requeue", "7b1e4c1e"),
    ("redeliver", "7b1e4c1e"),
    ("wait", "7b1e4c1e"),
    ("reap",),
    ("workers",),
    ("batches",),
    ("prune", "--finished-before", "1d"),
    ("worker",),
]


@pytest.mark.parametrize("args", READ_COMMANDS)
def test_commands_run_away_from_the_database_create_none(
    sqlite_url: str, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Run where no SQLite database is, a command that does not create one (all but `run`,
    `submit`, `db upgrade` and `--migrate`) names the missing file in one line, exits 3 and
    leaves no empty database behind."""
    cli = Cli(sqlite_url, tmp_path / "out")
    result = cli(*args)
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr.startswith(f"batchcrop: error: no database at {tmp_path}/batchcrop.db")
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("batchcrop.db")) == []


@pytest.mark.parametrize("args", [("run", "."), ("submit", "."), ("db", "upgrade")])
def test_a_database_in_a_missing_folder_is_named_by_the_commands_that_create_one(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`run`, `submit` and `db upgrade` with an SQLite file in a folder that does not exist (a
    typo in the path): exit 3, one line naming the file and the folder (SQLite says only
    "unable to open database file")."""
    missing = tmp_path / "no-such-folder" / "batchcrop.db"
    result = Cli(f"sqlite:///{missing}", tmp_path / "out")(*args)
    assert result.returncode == Exit.DATABASE_UNREACHABLE
    assert result.stderr == (
        f"batchcrop: error: cannot create the database {missing}: the folder "
        f"{missing.parent} does not exist\n"
    )


@pytest.mark.parametrize("args", [("db", "current"), ("db", "check")])
def test_db_current_and_check_without_a_database_say_so_and_create_none(
    sqlite_url: str, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`db current` and `db check` on a missing SQLite file: exit 1 (not at head) with one line
    naming the missing file; no file is created."""
    cli = Cli(sqlite_url, tmp_path / "out")
    result = cli(*args)
    assert result.returncode == 1
    assert result.stderr.startswith("batchcrop: no database at ")
    assert not (tmp_path / "batchcrop.db").exists()


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://", "sqlite:///:memory:"])
def test_an_sqlite_url_without_a_file_is_a_usage_error(url: str, tmp_path: Path) -> None:
    """An SQLite URL naming no file (an in-memory database keeps nothing) is exit 2 in one
    line, never a traceback."""
    result = Cli(url, tmp_path / "out")("status", "7b1e4c1e")
    assert (result.returncode, result.stdout) == (2, "")
    assert "names no database file" in result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", ["run", "status"])
def test_an_sqlite_url_naming_a_folder_says_so(command: str, tmp_path: Path) -> None:
    """A `--database-url` naming a folder (`sqlite:///out`) is one line naming it and saying
    the URL names the file, not SQLite's "unable to open database file"."""
    (tmp_path / "out").mkdir()
    cli = Cli(f"sqlite:///{tmp_path / 'out'}", tmp_path / "store")
    args = (
        ("run", str(tmp_path), "--out", str(tmp_path / "d"))
        if command == "run"
        else (
            "status",
            "7b1e4c1e",
        )
    )
    result = cli(*args)
    assert result.returncode == 3, result.stderr
    assert f"the database {tmp_path / 'out'} is a folder" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_an_empty_out_folder_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    """`run --out ''` is exit 2 saying it needs a folder, not a run into the default store."""
    result = cli("run", str(tmp_path), "--out", "")
    assert (result.returncode, result.stdout) == (2, "")
    assert "--out needs a folder" in result.stderr


def test_sigterm_during_a_large_submission_leaves_nothing_behind(
    cli: Cli, inspect: App, tmp_path: Path
) -> None:
    """SIGTERM (a container's stop, `timeout`) ends `submit` as Ctrl-C does: exit 130 and the
    half-created batch discarded at once, not left for the reaper to find an hour later."""
    rows = tmp_path / "items.csv"
    with rows.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["source", "ref"])
        writer.writerows([f"/photos/{i}.jpg", f"sku-{i}"] for i in range(400_000))
    assert cli("db", "upgrade").returncode == 0
    proc = cli.spawn("submit", "--items-csv", str(rows))

    def items_written() -> int:
        with inspect.engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM lease_items")).scalar_one())

    wait_for(lambda: proc.poll() is not None or items_written() > 0, "the first chunk")
    assert proc.poll() is None, cli.log_of(proc)  # still writing: the signal lands mid-way
    proc.send_signal(signal.SIGTERM)
    assert cli.ended(proc, 60) == 130, cli.log_of(proc)
    with inspect.engine.connect() as conn:
        for table in ("lease_groups", "lease_items", "lease_counters"):
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() == 0
    assert cli.json("batches")["batches"] == []


def test_a_file_name_that_is_not_utf8_is_a_usage_error_on_every_database(
    cli: Cli, tmp_path: Path
) -> None:
    """A folder holding a file whose name is not UTF-8 (its byte becomes a lone surrogate in
    Python) is refused at submission, naming the file safely: PostgreSQL could not store it and
    SQLite must not accept what PostgreSQL refuses."""
    (good,) = write_photos(tmp_path / "src", 1)
    os.link(good, os.fsencode(tmp_path / "src") + b"/caf\xe9.jpg")
    result = cli("submit", str(tmp_path / "src"))
    assert result.returncode == Exit.USAGE, result.stderr
    assert "caf\\udce9.jpg' must be valid Unicode text" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("serve", "--port", "99999"), "argument --port: a port is 0 to 65535, not 99999"),
        (("worker", "--metrics-port", "http"), "argument --metrics-port: not a port number"),
        (("worker", "--metrics-port", "0"), "a metrics port is 1 to 65535: a scraper must know"),
        (("items", "b", "--state", "failed,gone"), "argument --state: states are queued, "),
        (("run", "--quality", "abc", "x"), "argument --quality: invalid int value: 'abc'"),
    ],
)
def test_a_bad_flag_is_one_line_pointing_at_help(
    cli: Cli, args: tuple[str, ...], needle: str
) -> None:
    """A usage mistake is one line on stderr naming the flag and pointing at `--help` (no
    usage block, no traceback), exit 2."""
    result = cli(*args)
    assert result.returncode == Exit.USAGE
    (line,) = result.stderr.splitlines()
    assert needle in line
    assert line.endswith(f"(see batchcrop {args[0]} --help)"), line


def test_serve_on_a_port_in_use_says_so_in_one_line(cli: Cli) -> None:
    """Another program on the port: one line naming the address and why, exit 2."""
    cli("db", "upgrade")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("serve", "--port", str(port))
    assert result.returncode == Exit.USAGE
    assert result.stderr.strip() == (
        f"batchcrop serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_ctrl_c_leaves_a_watch_without_an_error_line(cli: Cli, tmp_path: Path) -> None:
    """Ctrl-C is how a watch ends: exit 130, and no "error" line after the table."""
    write_photos(tmp_path / "src", 1)
    submitted = cli("submit", str(tmp_path / "src"))
    assert submitted.returncode == 0, submitted.stderr
    proc = cli.spawn("status", submitted.stdout.strip(), "--watch")
    time.sleep(3)  # started and watching (off a terminal the table is drawn when it ends)
    assert proc.poll() is None, cli.log_of(proc)
    proc.send_signal(signal.SIGINT)
    assert cli.ended(proc, 30) == Exit.INTERRUPTED
    assert "error" not in cli.log_of(proc)


def test_a_table_too_wide_for_the_terminal_prints_as_records(cli: Cli, tmp_path: Path) -> None:
    """`items` at 80 columns (a terminal, or any pipe): one `name  value` line per field, each
    value whole on its line, instead of a table squeezed to a character per line; wide enough,
    a table."""
    (photo,) = write_photos(tmp_path / "src", 1)
    batch_id = cli("submit", str(photo)).stdout.strip()
    cli.env["COLUMNS"] = "80"
    narrow = cli("items", batch_id).stdout.splitlines()
    assert f"source       {photo}" in narrow
    assert "state        queued" in narrow
    cli.env["COLUMNS"] = "400"
    wide = cli("items", batch_id).stdout
    assert wide.startswith("┏")
    assert str(photo) in wide


def test_a_refused_csv_read_from_a_pipe_names_the_item(cli: Cli) -> None:
    """A CSV given as `/dev/stdin` cannot be read twice to find the refused row's line: the
    error names the item's position instead (never a traceback)."""
    result = cli(
        "submit",
        "--items-csv",
        "/dev/stdin",
        stdin="source,ref\n/photos/a.jpg,ok\n/photos/b.jpg,bad\x1b[0m\n",
    )
    assert result.returncode == Exit.USAGE
    assert result.stderr == (
        "batchcrop: error: /dev/stdin: item 2: ref must not contain control characters\n"
    )


def test_the_former_notify_flags_and_variables_still_work(cli: Cli, tmp_path: Path) -> None:
    """`--notify-url`, `--notify-hosts` and `BATCHCROP_NOTIFY_HOSTS` (ADR 0030) still set
    the callback settings, hidden from `--help`; a former variable is logged once, naming its
    new name."""
    src = tmp_path / "src"
    write_photos(src, count=1)
    url = "http://127.0.0.1:9/hook"
    cli.env["BATCHCROP_NOTIFY_HOSTS"] = "127.0.0.1:9"
    result = cli("submit", str(src), "--max-side", "600", "--notify-url", url, "--json")
    assert result.returncode == 0, result.stderr
    assert url == json.loads(result.stdout)["callback_url"]
    renamed = [line for line in result.stderr.splitlines() if "msg=setting_renamed" in line]
    assert [line.split(" ", 1)[1] for line in renamed] == [
        "level=warning msg=setting_renamed old=BATCHCROP_NOTIFY_HOSTS new=BATCHCROP_CALLBACK_HOSTS"
    ]
    refused = cli("submit", str(src), "--notify-hosts", "https://hooks.example.com/x")
    assert refused.returncode == 2
    assert "BATCHCROP_CALLBACK_HOSTS entry 'https://hooks.example.com/x'" in refused.stderr
    assert "--notify" not in cli("submit", "--help").stdout

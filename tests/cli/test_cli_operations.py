"""The real CLI in subprocesses: its logs, its metrics endpoint, and one clear line per mistake
(docs/design.md §7, CLI; docs/operations.md)."""

from __future__ import annotations

import csv
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from batchcrop import __version__
from tests.app.test_logs_and_metrics import parse_logfmt
from tests.cli.test_cli import Cli, free_port, wait_for
from tests.images import write_corrupt, write_photos

pytestmark = pytest.mark.slow
FAST_SECONDS = 15.0
"""A mistake must be reported well inside the 120 s a worker waits out a real outage."""


@pytest.fixture
def cli(sqlite_url: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(sqlite_url, tmp_path / "out")
    yield runner
    runner.kill_all()


def _one_line(result: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    """Exit `code`, the reason on one stderr line, no traceback."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0], lines[0]


def _batch(cli: Cli, src: Path, *extra: str) -> str:
    result = cli("submit", str(src), "--max-side", "300", *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_worker_logs_json_and_serves_the_operators_metrics(cli: Cli, tmp_path: Path) -> None:
    """`worker --log-format json` (a global flag after the subcommand): a start-up line, one
    line per terminal outcome with its category, shutdown lines, every line a JSON object; the
    metrics endpoint on --metrics-host has the build info, the process collector, the queue
    gauges and no `_created` series."""
    write_photos(tmp_path / "src", 1)
    write_corrupt(tmp_path / "src")
    batch = _batch(cli, tmp_path / "src")
    port = free_port()
    worker = cli.spawn(
        "worker", "--log-format", "json", "--metrics-host", "127.0.0.1", "--metrics-port", str(port)
    )
    try:
        wait_for(lambda: cli.json("status", batch)["state"] == "failed", "the batch to end")
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    lines = [json.loads(line) for line in cli.log_of(worker).splitlines()]
    assert all(list(line)[:3] == ["ts", "level", "msg"] for line in lines)
    by_msg = {line["msg"]: line for line in lines}
    started = by_msg["worker_started"]
    assert (started["version"], started["batches"]) == (__version__, "all")
    assert started["database"].startswith("sqlite:///")
    assert started["store"] == f"file://{cli.out}"
    outcomes = {(t["outcome"], t.get("category")) for t in lines if t["msg"] == "transition"}
    assert outcomes == {("succeeded", None), ("failed", "invalid_image")}
    assert {"worker_stopping", "worker_stopped", "metrics_listening"} <= set(by_msg)

    names = {
        sample.name
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }
    assert {
        "batchcrop_build_info",
        "process_cpu_seconds_total",
        "python_info",
        "batchcrop_queue_items",
        "batchcrop_queue_oldest_queued_age_seconds",
        "batchcrop_items_in_flight",
        "batchcrop_put_if_absent_hits_total",
        "batchcrop_claims_total",
    } <= names
    assert not [name for name in names if name.endswith("_created")]


def test_serve_writes_access_logs_in_logfmt(cli: Cli) -> None:
    """`serve` logs a start-up line and one `http_request` line per answer, strict logfmt."""
    assert cli("db", "upgrade").returncode == 0
    port = free_port()
    server = cli.spawn("serve", "--port", str(port))
    try:
        wait_for(lambda: "serve_started" in cli.log_of(server), "serve to start")
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _get(f"{url}/healthz") == 200, "the API to answer")
        metrics = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
    # No worker serves any store yet: the family is described, with no sample.
    assert "# TYPE batchcrop_queue_items gauge" in metrics
    lines = [parse_logfmt(line) for line in cli.log_of(server).splitlines()]
    requests = [line for line in lines if line["msg"] == "http_request"]
    assert {"method": "GET", "path": "/healthz", "status": "200"}.items() <= requests[-2].items()
    assert [line["msg"] for line in lines if line["msg"].startswith("serve_")] == [
        "serve_started",
        "serve_stopped",
    ]


def _get(url: str) -> int:
    try:
        return int(urllib.request.urlopen(url, timeout=5).status)
    except OSError:
        return 0


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("--log-level", "LOUD", "batches"), 2, "unknown log level 'LOUD'"),
        (("batches", "--log-format", "xml"), 2, "unknown log format 'xml'"),
        (("--database-url", "::not a url::", "batches"), 2, "cannot parse the database URL"),
        (("--database-url", "mysql+nosuch://h/d", "batches"), 2, "unknown database driver"),
        (("submit", ".", "--deadline", "90"), 2, "give a unit"),
        (("submit", ".", "--deadline", "31d"), 2, "at most 30 days"),
        (("status", "\x1b]0;owned\x07"), 5, "no batch \\x1b]0;owned\\x07"),
        (("worker", "--batch", "7b1e4c1e"), 5, "no batch 7b1e4c1e"),
    ],
)
def test_each_mistake_is_one_line_and_its_exit_code(
    cli: Cli, tmp_path: Path, args: tuple[str, ...], code: int, needle: str
) -> None:
    """A bad log level or format, an unparsable URL or unknown driver, a deadline without a unit
    or past the API's limit, an id with terminal escapes (shown escaped), an unknown worker
    batch: one line, the exit code, no traceback."""
    if args[0] in ("submit", "status", "worker"):
        assert cli("db", "upgrade").returncode == 0
        write_photos(tmp_path / "src", 1)
        args = tuple(str(tmp_path / "src") if a == "." else a for a in args)
    if args[0] == "--database-url":
        cli.env.pop("BATCHCROP_DATABASE_URL")
        args = (args[2], args[0], args[1])  # a global-looking flag after the subcommand
    result = cli(*args, timeout=FAST_SECONDS * 2)
    _one_line(result, code, needle)
    assert "\x1b" not in result.stderr


def test_a_taken_metrics_port_is_a_usage_error(cli: Cli) -> None:
    """`worker --metrics-port` on a port someone listens on: exit 2, one line naming it."""
    assert cli("db", "upgrade").returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("worker", "--metrics-port", str(port), timeout=FAST_SECONDS * 2)
    _one_line(result, 2, f"cannot serve metrics on 127.0.0.1:{port}")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("change", "needle"),
    [({"database": "bc_no_such_db"}, "does not exist"), ({"username": "nobody"}, "nobody")],
)
def test_a_missing_database_or_role_fails_at_once(
    postgres_admin_url: str, tmp_path: Path, change: dict[str, str], needle: str
) -> None:
    """No such database or role is a configuration mistake: the worker does not wait it out
    as an outage but exits 3 at once with the server's reason; `postgres://` is accepted."""
    url = sa.make_url(postgres_admin_url).set(**change)  # type: ignore[arg-type]
    pasted = url.render_as_string(hide_password=False).replace("postgresql+psycopg", "postgres")
    cli = Cli(pasted, tmp_path / "out")
    started = time.monotonic()
    result = cli("worker", timeout=FAST_SECONDS * 2)
    assert time.monotonic() - started < FAST_SECONDS
    _one_line(result, 3, "the database refused")
    assert needle in result.stderr


@pytest.mark.postgres
def test_postgres_urls_people_paste_are_accepted(postgres_url: str, tmp_path: Path) -> None:
    """`postgres://` and `postgresql://` mean psycopg 3, the driver batchcrop ships."""
    for scheme in ("postgres", "postgresql"):
        cli = Cli(postgres_url.replace("postgresql+psycopg", scheme), tmp_path / "out")
        assert cli("db", "upgrade").returncode == 0
        result = cli("batches", "--json")
        assert (result.returncode, result.stderr) == (0, "")


def test_a_missing_bucket_fails_at_once_with_exit_4(cli: Cli) -> None:
    """A store bucket that does not exist is not waited out: exit 4 naming the bucket."""
    assert cli("db", "upgrade").returncode == 0
    from moto.server import ThreadedMotoServer  # noqa: PLC0415  (moto is a test dependency)

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        cli.env.update(
            BATCHCROP_STORE="s3://bc-no-such-bucket/derivatives",
            BATCHCROP_S3_ENDPOINT_URL=f"http://127.0.0.1:{port}",
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
        started = time.monotonic()
        result = cli("worker", timeout=FAST_SECONDS * 2)
    finally:
        server.stop()
    assert time.monotonic() - started < FAST_SECONDS
    _one_line(result, 4, "bucket 'bc-no-such-bucket' does not exist")


@pytest.mark.parametrize("form", ["--json", "table"])
def test_output_piped_into_head_ends_quietly(cli: Cli, tmp_path: Path, form: str) -> None:
    """`batchcrop items B --json | head -c 100`, and the table form (written by Rich, whose own
    answer to a broken pipe was exit 1): no traceback, no complaint, exit 141 like any command
    whose reader went away."""
    photo = write_photos(tmp_path / "src", 1)[0]
    with (tmp_path / "items.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["source", "ref"])
        writer.writerows([photo, f"sku-{n}"] for n in range(400))
    batch = cli("submit", "--items-csv", str(tmp_path / "items.csv")).stdout.strip()
    result = subprocess.run(
        [
            "bash",
            "-c",
            f'"{sys.executable}" -m batchcrop items {batch} {"--json" if form == "--json" else ""}'
            " | head -c 100 >/dev/null; "
            'echo "${PIPESTATUS[0]}"',
        ],
        env=cli.env,
        cwd=cli.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.stdout.strip(), result.stderr) == ("141", "")


def test_ids_prefixes_sources_requeue_counts_and_wait(cli: Cli, tmp_path: Path) -> None:
    """A unique id prefix works wherever an id does; `items` shows each source and whole ids
    at 80 columns; `requeue` says how many it requeued and refuses an unknown item (exit 5)
    without touching the batch; `wait` exits 1 for a batch that ended failed, 0 once it
    succeeded."""
    write_photos(tmp_path / "src", 1)
    write_corrupt(tmp_path / "src")
    batch = _batch(cli, tmp_path / "src")
    prefix = batch[:8]
    cli.env["COLUMNS"] = "80"
    listed = cli("items", prefix)
    assert listed.returncode == 0, listed.stderr
    items = cli.json("items", prefix)["items"]
    for item in items:
        assert item["id"] in listed.stdout
    cli.env["COLUMNS"] = "400"
    assert str(tmp_path / "src" / "not-an-image.jpg") in cli("items", prefix).stdout

    worker = cli.spawn("worker", "--batch", prefix)
    try:
        waited = cli("wait", prefix, timeout=120)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert waited.returncode == 1, waited.stderr
    assert f"batch {batch} failed" in waited.stderr

    failed = cli.json("items", batch, "--state", "failed")["items"]
    before = cli.json("status", batch)
    # Item ids of one batch share their first digits (time-ordered, ADR 0023): a prefix that
    # names one item runs into the random tail.
    item_prefix = failed[0]["id"][:-4]
    refused = cli("requeue", prefix, "--item", item_prefix, "--item", "0000dead")
    _one_line(refused, 5, "no item 0000dead")
    assert cli.json("status", batch)["counts"] == before["counts"]

    requeued = cli("requeue", prefix, "--item", item_prefix)
    assert requeued.returncode == 0, requeued.stderr
    assert "requeued 1 item\n" in requeued.stderr
    assert cli("events", prefix, "--item", failed[0]["id"][:-8]).returncode == 0

    ok = _batch(cli, tmp_path / "src" / "photo-000.jpg")
    worker = cli.spawn("worker", "--batch", ok)
    try:
        assert cli("wait", ok[:10], "--json", timeout=120).returncode == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0


def test_run_writes_to_the_store_it_is_given(cli: Cli, tmp_path: Path) -> None:
    """`run --store s3://bucket/prefix` writes its derivatives there (a moto S3 server) and
    nothing into the default folder; the batch records that store."""
    import boto3  # noqa: PLC0415
    from moto.server import ThreadedMotoServer  # noqa: PLC0415  (moto is a test dependency)

    write_photos(tmp_path / "src", 1)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        cli.env.update(
            BATCHCROP_S3_ENDPOINT_URL=endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket="bc-run-store")
        result = cli("run", str(tmp_path / "src"), "--store", "s3://bc-run-store/v1", "--json")
        assert result.returncode == 0, result.stderr
        listed = client.list_objects_v2(Bucket="bc-run-store", Prefix="v1/derivatives/")
        keys = [o["Key"] for o in listed.get("Contents", [])]
    finally:
        server.stop()
    document = json.loads(result.stdout)
    assert (document["state"], document["store"]) == ("succeeded", "s3://bc-run-store/v1")
    assert len(keys) == 4
    assert not cli.out.exists()


def test_a_file_url_source_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    """`batchcrop submit file:///…/photo.jpg` is exit 2 in one line: a local source is its
    plain path."""
    photo = write_photos(tmp_path / "src", 1)[0]
    result = cli("submit", f"file://{photo}")
    assert (result.returncode, result.stdout) == (2, "")
    assert "unsupported source scheme" in result.stderr
    assert len(result.stderr.splitlines()) == 1

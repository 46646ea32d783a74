"""The docs say what the software does: every `batchcrop …` line in README.md and docs/*.md (in
prose, tables and shell blocks) is in `EXAMPLES`, and each one is run — the real CLI in a
subprocess, in a folder holding a real SQLite database, a folder store and an S3 server (moto in
server mode) for the `s3://` sources — and checked against its documented exit code and output
shape. The distributed block of the README runs whole on PostgreSQL. A line no longer in the docs
must leave the table too, so the two cannot drift apart.

Substitutions, made where a literal value cannot work on a test machine: placeholders (BATCH,
ITEM, SRC, `3f0c9a`) become a real batch, item or folder; port 8000 becomes a free port (8000
may be taken on a shared machine); `~` is the test folder (HOME is set to it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import free_port, wait_for
from tests.images import photo, write_photos

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SPAWN_READY_SECONDS = 60.0
RUN_SECONDS = 180.0
CALLBACK_HOST = "hooks.example.com"
TOKEN = "docs-example-token-0123456789-abcdefghijkl"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
COMMAND = re.compile(r"(?:^|&& |\.venv/bin/)(batchcrop [^`]*)")


def documented_lines() -> dict[str, list[str]]:
    """Every `batchcrop …` line of the docs, whitespace folded: inline code spans outside
    fences, and the command lines of fenced blocks (continuations joined, comments dropped)."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        name = doc.relative_to(ROOT).as_posix()
        for block in re.findall(r"```\w*\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                match = COMMAND.search(line.split(" #")[0])
                if match:
                    found.setdefault(" ".join(match.group(1).split()), []).append(name)
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`(batchcrop [^`]*)`", prose):
            # A pipe in a table cell is written `\|`.
            found.setdefault(" ".join(span.replace("\\|", "|").split()), []).append(name)
    return found


@dataclass(frozen=True)
class Run:
    """Run `batchcrop ARGS` (placeholders in braces) and check its exit code and output.

    `out`/`err`: a regular expression stdout/stderr must contain; `json_keys`: stdout is one JSON
    document with these keys; `spawn`: a long-running command (`worker`, `serve`) that must get
    ready, then exit 0 on SIGTERM; `env`: extra environment, as the example sets it."""

    args: str
    exit: int = 0
    out: str = ""
    err: str = ""
    json_keys: tuple[str, ...] = ()
    spawn: str = ""
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InBlock:
    """Run in order with the rest of a fenced block, by the test named here."""

    test: str


DISTRIBUTED = InBlock("test_the_readme_distributed_block_runs_on_postgresql")
PRUNE = Run("prune --finished-before 30d", out=r"^pruned 0 batches \(0 rows\)$")
ITEMS = Run("items {BATCH}", out=r"invalid_image .*cannot identify image file")
EVENTS = Run("events {BATCH}", out=r"invalid_image .*cannot identify image file")
ONE_EVENTS = Run("events {BATCH} --item {ITEM}", out=r"cannot identify image file")
RUN_SAMPLES = Run("run samples --out out", out=r"All 6 items succeeded")
SERVE = Run("serve --port {PORT}", spawn="serve")
WORKER = Run("worker", spawn="worker")
WORKERS = Run("workers", out=r"id .*status")
STATUS_WATCH = Run("status {OK_BATCH} --watch", out=r"succeeded")
CALLBACK = Run(f"submit {{SRC}} --callback-url https://{CALLBACK_HOST}/batchcrop", out=rf"^{UUID}$")
REDELIVER = Run("redeliver {BATCH}", exit=2, err=r"^batchcrop: error: .*callback")
# A box that holds no pixel: refused before the item is touched (the other examples read it).
RECROP = Run("recrop {BATCH} {ITEM} --focus 5,5,5,5", exit=2, err=r"^batchcrop: error: .*focus")

EXAMPLES: dict[str, Run | InBlock] = {
    "batchcrop --help": Run("--help", out=r"usage: batchcrop"),
    "batchcrop batches": Run("batches", out=r"succeeded"),
    "batchcrop batches [--state S] [--label L]": Run(
        "batches --state failed --label docs", out=r"{BATCH}"
    ),
    # The fixture's batch has ended: a cancel says so and leaves it requeueable.
    "batchcrop cancel BATCH": Run(
        "cancel {BATCH}", exit=2, err=r"^batchcrop: error: batch .* has already ended \(failed\)"
    ),
    "batchcrop db check": Run("db check", out=r"^database schema is at head"),
    "batchcrop db current": Run("db current", out=r"leases .*at head"),
    "batchcrop db upgrade": Run(
        "db upgrade", out=r"^database schema (is up to date|upgraded: leases .* -> .*)$"
    ),
    "batchcrop events BATCH": EVENTS,
    "batchcrop events BATCH --item ITEM": ONE_EVENTS,
    "batchcrop events BATCH [--item ID]": ONE_EVENTS,
    "batchcrop items": ITEMS,
    "batchcrop items BATCH": ITEMS,
    "batchcrop items BATCH --state failed": Run(
        "items {BATCH} --state failed", out=r"cannot identify image file"
    ),
    "batchcrop items BATCH [--state S,...] [--limit N] [--cursor C]": Run(
        "items {BATCH} --state failed,succeeded --limit 1000", out=r"succeeded"
    ),
    "batchcrop pause BATCH": Run("pause {BATCH}", out=r"state .*\(paused\)"),
    "batchcrop priority BATCH P": Run("priority {BATCH} 5", out=r"priority .*5"),
    "batchcrop prune": PRUNE,
    "batchcrop prune --finished-before 30d": PRUNE,
    "batchcrop prune --finished-before 30d [--dry-run] [--json]": Run(
        "prune --finished-before 30d --dry-run --json", json_keys=("batches", "batch_ids")
    ),
    "batchcrop prune --finished-before D": PRUNE,
    "batchcrop reap": Run("reap", out=r"^retried \d+, failed \d+, abandoned \d+$"),
    "batchcrop recrop": RECROP,
    "batchcrop release BATCH --reason": Run(
        "release {BATCH} --reason 'documented example'", out=r"^released 0 leases$"
    ),
    "batchcrop recrop BATCH ITEM --focus L,T,R,B": RECROP,
    "batchcrop redeliver BATCH": REDELIVER,
    "batchcrop release BATCH --reason WHY [--by NAME]": Run(
        "release {BATCH} --reason docs-example --by docs", out=r"^released 0 leases$"
    ),
    "batchcrop requeue BATCH [--state failed,abandoned] [--item ID]... [--deadline 2h]": Run(
        "requeue {REQUEUE_BATCH} --state failed,abandoned --item {REQUEUE_ITEM} --deadline 2h",
        out=r"queued +│ 1 ",
        err=r"^requeued 1 item$",
    ),
    "batchcrop resume BATCH": Run("resume {BATCH}", out=r"state "),
    "batchcrop run": RUN_SAMPLES,
    "batchcrop run --workers 2": Run("run samples --out out --workers 2", out=r"succeeded"),
    "batchcrop run SRC... [--out DIR | --store URL] [--allow-failures N|P%]": Run(
        "run samples --store file://./out --allow-failures 2%", out=r"All 6 items succeeded"
    ),
    "batchcrop run samples --out out": RUN_SAMPLES,
    "batchcrop run ~/catalogue/spring s3://photos/incoming/ extra/hero.png --out ./derivatives "
    "--ratios 1:1,4:3,16:9,3:4 --max-side 1200 --quality 85 --formats jpeg,webp,avif "
    "--workers 4": Run(
        "run {HOME}/catalogue/spring s3://photos/incoming/ extra/hero.png --out ./derivatives "
        "--ratios 1:1,4:3,16:9,3:4 --max-side 1200 --quality 85 --formats jpeg,webp,avif "
        "--workers 4",
        out=r"All 4 items succeeded",
    ),
    "batchcrop run ~/catalogue/spring --out ./derivatives --ratios 1:1,4:3,16:9 --fit auto "
    "--trim 16 --pad-colour auto --widths 320,640,1280": Run(
        "run {HOME}/catalogue/spring --out ./derivatives --ratios 1:1,4:3,16:9 --fit auto "
        "--trim 16 --pad-colour auto --widths 320,640,1280",
        out=r"All 2 items succeeded",
    ),
    "batchcrop serve": SERVE,
    "batchcrop serve --host 0.0.0.0 --port 8000": Run(
        "serve --host 0.0.0.0 --port {PORT}", spawn="serve", env={"BATCHCROP_API_TOKEN": TOKEN}
    ),
    "batchcrop serve --host 127.0.0.1 --port 8000": Run(
        "serve --host 127.0.0.1 --port {PORT}", spawn="serve"
    ),
    "batchcrop serve --port 8000": SERVE,
    "batchcrop serve --port 8000 &": SERVE,
    "batchcrop serve [--host 127.0.0.1] [--port 8000] [--prune-finished-before 30d]": Run(
        "serve --host 127.0.0.1 --port {PORT} --prune-finished-before 30d", spawn="serve"
    ),
    "batchcrop status 3f0c9a": Run("status {OK_PREFIX}", out=r"succeeded"),
    "batchcrop status 3f0c… --watch": DISTRIBUTED,
    "batchcrop status BATCH --watch": STATUS_WATCH,
    "batchcrop status BATCH [--watch]": STATUS_WATCH,
    "batchcrop submit": Run("submit {SRC}", out=rf"^{UUID}$", err=r"no live worker serves"),
    "batchcrop submit --callback-url URL": CALLBACK,
    "batchcrop submit --deadline inf": Run(
        "submit {SRC} --deadline inf", exit=2, err=r"^batchcrop: error: not a duration: 'inf'"
    ),
    "batchcrop submit --idempotency-key": Run(
        "submit {SRC} --idempotency-key " + "k" * 201, exit=2, err=r"^batchcrop: error: .*200"
    ),
    "batchcrop submit --items-csv": Run("submit --items-csv items.csv", out=rf"^{UUID}$"),
    "batchcrop submit --items-csv missing.csv": Run(
        "submit --items-csv missing.csv", exit=2, err=r"^batchcrop: error: .*missing\.csv"
    ),
    "batchcrop submit SRC --callback-url https://hooks.example.com/batchcrop": CALLBACK,
    "batchcrop submit SRC... [--items-csv FILE] [--label L] [--store URL] [--callback-url URL] "
    "[--idempotency-key K]": Run(
        "submit {SRC} --items-csv items.csv --label docs --store file://./out "
        f"--callback-url https://{CALLBACK_HOST}/batchcrop --idempotency-key docs-example",
        out=rf"^{UUID}$",
    ),
    "batchcrop submit s3://catalogue-sources/2026-11/ --deadline 6h --max-attempts 3": DISTRIBUTED,
    "batchcrop wait BATCH": Run("wait {OK_BATCH}"),
    "batchcrop worker": WORKER,
    "batchcrop worker --concurrency 4": DISTRIBUTED,
    "batchcrop worker --shutdown-grace-seconds 30": Run(
        "worker --shutdown-grace-seconds 30", spawn="worker"
    ),
    "batchcrop worker [--concurrency N] [--batch ID]...": Run(
        "worker --concurrency 2 --batch {OK_BATCH} --batch {BATCH}", spawn="worker"
    ),
    "batchcrop workers": WORKERS,
    "batchcrop workers --json": Run("workers --json", json_keys=("workers",)),
    "batchcrop workers [--json]": WORKERS,
}


def test_every_documented_command_line_is_in_the_table() -> None:
    """Each `batchcrop …` line of README.md and docs/*.md has its entry, and every entry is
    still documented somewhere."""
    documented = documented_lines()
    assert sorted(set(documented) - set(EXAMPLES)) == [], "document these lines' examples"
    assert sorted(set(EXAMPLES) - set(documented)) == [], "no longer in the docs"


# -- the folder the examples run in ---------------------------------------------------------


@dataclass
class Workspace:
    """A folder with the docs' files, its SQLite database and the batches the examples use."""

    cwd: Path
    env: dict[str, str]
    values: dict[str, str] = field(default_factory=dict)

    def run(self, args: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
        """`batchcrop ARGS` to its end."""
        return subprocess.run(
            [sys.executable, "-m", "batchcrop", *args],
            env={**self.env, **extra},
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
            check=False,
        )

    def fill(self, text: str) -> str:
        """`text` with its placeholders (`{BATCH}`, …) filled in."""
        for name, value in self.values.items():
            text = text.replace(f"{{{name}}}", value)
        return text

    def expand(self, args: str) -> list[str]:
        """The example's words with its placeholders filled in."""
        return [self.fill(word) for word in shlex.split(args)]


def _moto() -> Iterator[str]:
    from moto.server import ThreadedMotoServer  # noqa: PLC0415  (moto is a test dependency)

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _s3_env(endpoint: str) -> dict[str, str]:
    return {
        "BATCHCROP_S3_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def _buckets(endpoint: str, objects: dict[str, bytes], *empty: str) -> None:
    """Create the example's buckets on the S3 server, with `objects` (`bucket/key` ⇒ bytes)."""
    import boto3  # noqa: PLC0415

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    for bucket in {name.split("/")[0] for name in objects} | set(empty):
        client.create_bucket(Bucket=bucket)
    for name, data in objects.items():
        bucket, key = name.split("/", 1)
        client.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """An S3 server (moto) with the buckets the docs' examples name."""
    for endpoint in _moto():
        _buckets(
            endpoint,
            {
                "photos/incoming/boat.jpg": photo(480, 320),
                "catalogue-sources/2026-11/shoe.jpg": photo(320, 480),
            },
            "catalogue-derivatives",
        )
        yield endpoint


def _failed_batch(ws: Workspace, folder: str, *extra: str) -> tuple[str, str]:
    """Run a batch of `folder` in which one item fails; return its id and the failed item's."""
    ran = ws.run(["run", folder, "--out", "out", "--json", *extra])
    assert ran.returncode == 1, ran.stderr
    batch = json.loads(ran.stdout)["id"]
    listed = ws.run(["items", batch, "--state", "failed", "--json"])
    failed = json.loads(listed.stdout)["items"]
    assert len(failed) == 1, failed
    return batch, failed[0]["id"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> Workspace:
    """The folder an operator runs the examples in: the repository's samples, a few sources,
    an items CSV; the default database (`batchcrop.db`) and store (`./derivatives`) of that
    folder; a succeeded batch (the quickstart's) and two batches with a failed item."""
    cwd = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "samples", cwd / "samples")
    (good,) = write_photos(cwd / "src", 1)
    (cwd / "src" / "notes.jpg").write_bytes(b"a text file named like a picture\n")
    write_photos(cwd / "catalogue" / "spring", 2)
    (cwd / "extra").mkdir()
    (cwd / "extra" / "hero.png").write_bytes(photo(300, 200, fmt="PNG"))
    (cwd / "other").mkdir()
    (cwd / "other" / "broken.jpg").write_bytes(b"")
    shutil.copy(good, cwd / "other" / "ok.jpg")
    (cwd / "items.csv").write_text(f"source,ref\n{cwd / 'samples' / 'logo-alpha.png'},logo\n")
    env = {
        **os.environ,
        **_s3_env(s3_endpoint),
        "HOME": str(cwd),
        "COLUMNS": "400",  # tables wide enough that no cell wraps
        "BATCHCROP_CALLBACK_HOSTS": CALLBACK_HOST,
    }
    for name in ("BATCHCROP_DATABASE_URL", "BATCHCROP_STORE", "BATCHCROP_API_TOKEN"):
        env.pop(name, None)
    ws = Workspace(cwd=cwd, env=env)
    quickstart = ws.run(["run", "samples", "--out", "out", "--json"])
    assert quickstart.returncode == 0, quickstart.stderr
    ok_batch = json.loads(quickstart.stdout)["id"]
    batch, item = _failed_batch(ws, "src", "--label", "docs")
    requeue_batch, requeue_item = _failed_batch(ws, "other")
    ws.values = {
        "OK_BATCH": ok_batch,
        "OK_PREFIX": ok_batch[:6],
        "BATCH": batch,
        "ITEM": item,
        "REQUEUE_BATCH": requeue_batch,
        "REQUEUE_ITEM": requeue_item,
        "SRC": "src",
        "HOME": str(cwd),
        "PORT": "0",
    }
    return ws


def _spawned(ws: Workspace, args: list[str], kind: str, env: dict[str, str]) -> None:
    """Start a long-running example, wait until it is ready, stop it with SIGTERM: exit 0."""
    log = ws.cwd / f"{kind}-{time.monotonic_ns()}.log"
    port = args[args.index("--port") + 1] if "--port" in args else ""
    with log.open("w") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "batchcrop", "--log-level", "INFO", *args],
            env={**ws.env, **env},
            cwd=ws.cwd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        if kind == "serve":
            wait_for(lambda: _healthy(port), "serve to answer /healthz", SPAWN_READY_SECONDS)
        else:
            wait_for(lambda: "worker_started" in log.read_text(), "worker", SPAWN_READY_SECONDS)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(SPAWN_READY_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, log.read_text()


def _healthy(port: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


RUNNABLE = {line: example for line, example in EXAMPLES.items() if isinstance(example, Run)}


@pytest.mark.parametrize("line", list(RUNNABLE))
def test_documented_example_does_what_the_docs_say(workspace: Workspace, line: str) -> None:
    """The example exits with its documented code and prints the documented shape."""
    example = RUNNABLE[line]
    ws = workspace
    ws.values["PORT"] = str(free_port())
    args = ws.expand(example.args)
    if example.spawn:
        _spawned(ws, args, example.spawn, example.env)
        return
    result = ws.run(args, **example.env)
    assert example.exit == result.returncode, (result.stdout, result.stderr)
    if example.out:
        assert re.search(ws.fill(example.out), result.stdout, re.M), result.stdout
    if example.err:
        assert re.search(example.err, result.stderr, re.M), result.stderr
    else:
        assert "Traceback" not in result.stderr
    if example.json_keys:
        document: dict[str, Any] = json.loads(result.stdout)
        assert set(example.json_keys) <= set(document)
    if example.exit:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.postgres
def test_the_readme_distributed_block_runs_on_postgresql(
    postgres_url: str, s3_endpoint: str, tmp_path: Path
) -> None:
    """The README's "Many machines" block, in order, on PostgreSQL and S3 (moto): `db upgrade`,
    a `worker --concurrency 4`, `submit s3://catalogue-sources/2026-11/ --deadline 6h
    --max-attempts 3` (prints the id), `status <prefix> --watch` (returns once the worker
    finished it: succeeded), then SIGTERM stops the worker with exit 0."""
    env = {
        **os.environ,
        **_s3_env(s3_endpoint),
        "BATCHCROP_DATABASE_URL": postgres_url,
        "BATCHCROP_STORE": "s3://catalogue-derivatives/v1",
    }
    ws = Workspace(cwd=tmp_path, env=env)
    upgraded = ws.run(["db", "upgrade"])
    assert upgraded.returncode == 0, upgraded.stderr
    log = tmp_path / "worker.log"
    with log.open("w") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "batchcrop", "worker", "--concurrency", "4"],
            env=env,
            cwd=tmp_path,
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        wait_for(lambda: "worker_started" in log.read_text(), "the worker", SPAWN_READY_SECONDS)
        submitted = ws.run(
            [
                "submit",
                "s3://catalogue-sources/2026-11/",
                "--deadline",
                "6h",
                "--max-attempts",
                "3",
            ]
        )
        assert submitted.returncode == 0, submitted.stderr
        batch = submitted.stdout.strip()
        assert re.fullmatch(UUID, batch)
        watched = ws.run(["status", batch[:6], "--watch"])
        assert watched.returncode == 0, watched.stderr
        assert "succeeded" in watched.stdout
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(SPAWN_READY_SECONDS)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert code == 0, log.read_text()


CURL = "HTTP examples against a running `serve`: tests/api drives every route they show"
DEVELOPMENT = "development commands that run (or install) this test suite itself: CI runs them"
NOT_RUN = {
    "curl": CURL,
    "url=$API/v1/batches/$ID;": CURL,
    "sudo": "needs root and systemd on the host; tests/test_deploy_units.py verifies the units",
    "scripts/check": DEVELOPMENT,
    "scripts/mutation": DEVELOPMENT,
    ".venv/bin/pip": DEVELOPMENT,
    ".venv/bin/pytest": DEVELOPMENT,
    ".venv/bin/python": "benchmarks under bench/, run by hand; tests/test_bench_scripts.py runs "
    "each one's --help",
    "kubectl": "needs a Kubernetes cluster; tests/test_deploy_kubernetes.py validates the "
    "manifests against the Kubernetes schemas and renders the overlay",
    "python3": "installs podman-compose for the container deployment; "
    "tests/test_deploy_container.py keeps its files consistent",
}
"""Shell blocks of the docs without a `batchcrop` command, by their first word: not run here,
and why. (The curl lines beside `batchcrop serve` in a block are not run either.)"""


def test_every_other_shell_block_is_listed_as_not_run() -> None:
    """A shell block of the docs without a `batchcrop` command starts with a word `NOT_RUN`
    gives a reason for; every reason is still used."""
    firsts: set[str] = set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S):
            if any(COMMAND.search(line.split(" #")[0]) for line in block.splitlines()):
                continue
            lines = [line for line in block.splitlines() if line.strip()]
            first = next(line for line in lines if not line.lstrip().startswith("#"))
            firsts.add(first.split()[0])
    assert set(NOT_RUN) == firsts

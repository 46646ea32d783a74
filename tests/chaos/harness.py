"""The chaos harness: real worker processes, PostgreSQL and S3 behind fault proxies, faults.

`run(config)` builds everything on loopback — a private PostgreSQL cluster, a bucket on the live
Ceph RGW, a `FaultProxy` in front of each — uploads generated sources (clean JPEGs and the
hostile corpus), submits four batches through the real CLI (main, hostile, to-be-cancelled,
short deadline), starts `config.workers` `batchcrop worker` processes that reach PostgreSQL and
S3 only through the proxies, and injects faults as the main batch progresses: SIGKILLs (the
worker is restarted), SIGSTOP/SIGCONT pauses longer than the lease, `pg_ctl restart -m fast`,
dropped PostgreSQL connections, storage errors and resets on a fraction of S3 requests, short
storage outages, a cancel. Every wait is bounded; the run stops by itself. Then it checks
DESIGN section 8 (`tests.chaos.invariants`) and returns a `Report`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from batchcrop.app import App, build
from batchcrop.settings import Settings
from leases import DatabaseUnavailable
from leases.schema import items as items_table
from leases.sqlfuncs import db_now_ms
from storage import LocalStore, ObjectStore, S3Settings, S3Store
from tests.chaos import corpus, invariants
from tests.chaos.fleet import Fleet
from tests.chaos.pgcluster import PrivateCluster, free_port
from tests.chaos.poller import Poller
from tests.services import rgw
from tests.services.proxy import FAULT_KINDS, FaultProxy

REPO = Path(__file__).resolve().parents[2]
POLL_SECONDS = 0.5
UPLOAD_THREADS = 8
CLI_TIMEOUT_SECONDS = 300.0
# A sample of overdue leases is taken only this long after the last fault that can stop every
# reaper at once (a PostgreSQL restart or dropped connections): reapers must reconnect first.
OUTAGE_SETTLE_SECONDS = 5.0
# Slack on "no item in_progress past its lease + one reaper interval" for a loaded 2-core box.
OVERDUE_SLACK_SECONDS = 3.0
TERMINAL = ("succeeded", "failed", "abandoned")
# A run in which no item reaches a terminal state for this long is stuck: stop and audit it.
STALL_SECONDS = 120.0
STALL_WINDOW_SECONDS = 0.5
DUPLICATE_EVERY = 20
API_STARTUP_SECONDS = 60.0
# Sources deleted between submit and processing: their items must fail `source_not_found`.
VANISHING_SOURCES = ("vanished-1.jpg", "vanished-2.jpg")
# Workers refuse sources above this size (one hostile source is bigger).
MAX_SOURCE_BYTES = 150_000


@dataclass(frozen=True)
class ChaosConfig:
    """The size of a run and the faults it injects (times in seconds)."""

    root: Path
    items: int = 2000
    cancel_items: int = 60
    deadline_items: int = 60
    deadline_seconds: float = 15.0
    workers: int = 4
    concurrency: int = 2
    lease_seconds: float = 3.0
    reaper_interval_seconds: float = 1.0
    max_attempt_seconds: float = 15.0
    max_attempts: int = 5
    kills: int = 20
    pauses: int = 3
    pg_restarts: int = 2
    pg_drops: int = 2
    storage_outages: int = 2
    storage_outage_seconds: float = 2.0
    # Stalls: for STALL_WINDOW_SECONDS every request is held this long before it is forwarded.
    pg_stalls: int = 2  # longer than the lease: heartbeats arrive late, leases expire mid-work
    s3_stalls: int = 1  # longer than max_attempt_seconds: a hung item must lose its lease
    store: str = "s3"  # or "local": derivatives in a local folder (sources stay in S3)
    storage_fail_fraction: float = 0.06
    storage_delay_fraction: float = 0.05
    storage_delay_seconds: float = 0.3
    ratios: str = "1:1,4:3,16:9,3:4"
    max_side: int = 160
    timeout_seconds: float = 1500.0
    pg_port: int = 0  # 0: a free port
    seed: int = 1


@dataclass
class Report:
    """What happened: faults by kind, outcomes, violations (must be empty), timings."""

    items: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    audit: invariants.Audit = field(default_factory=invariants.Audit)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    overdue_samples: int = 0
    wall_seconds: float = 0.0
    work_seconds: float = 0.0
    storage_requests: int = 0
    notes: list[str] = field(default_factory=list)
    api_answers: dict[int, int] = field(default_factory=dict)

    @property
    def violations(self) -> list[str]:
        """Every invariant violation found."""
        return self.audit.violations

    @property
    def throughput(self) -> float:
        """Items per second of the working phase."""
        return self.items / self.work_seconds if self.work_seconds else 0.0


def _schedule(config: ChaosConfig, rng: random.Random) -> list[tuple[float, str]]:
    """Faults keyed by the main batch's progress (fraction of terminal items)."""

    def spread(n: int, low: float, high: float) -> list[float]:
        return [low + (high - low) * (k + rng.random()) / n for k in range(n)] if n else []

    plan = [(f, "sigkill") for f in spread(config.kills, 0.02, 0.9)]
    plan += [(f, "sigstop") for f in spread(config.pauses, 0.1, 0.85)]
    plan += [(f, "pg_restart") for f in spread(config.pg_restarts, 0.25, 0.75)]
    plan += [(f, "pg_drop") for f in spread(config.pg_drops, 0.15, 0.85)]
    plan += [(f, "storage_outage") for f in spread(config.storage_outages, 0.1, 0.8)]
    plan += [(f, "pg_stall") for f in spread(config.pg_stalls, 0.2, 0.8)]
    plan += [(f, "s3_stall") for f in spread(config.s3_stalls, 0.3, 0.6)]
    return sorted(plan)


@dataclass
class Services:
    """The running backends and the proxies in front of them."""

    cluster: PrivateCluster
    endpoint: rgw.RGWEndpoint
    bucket: str
    client: Any
    s3_proxy: FaultProxy
    pg_proxy: FaultProxy

    def stop(self) -> None:
        """Stop the proxies and the cluster; delete the bucket."""
        self.s3_proxy.stop()
        self.pg_proxy.stop()
        self.cluster.remove()
        try:
            from tests.s3_fixtures import empty_and_delete_bucket  # noqa: PLC0415

            empty_and_delete_bucket(self.client, self.bucket)
        except Exception as exc:  # cleanup is best effort; the report is what matters
            print(f"could not delete bucket {self.bucket}: {exc}", file=sys.stderr)


def start_services(config: ChaosConfig) -> Services:
    """Private PostgreSQL, a fresh RGW bucket, and a fault proxy in front of each."""
    cluster = PrivateCluster(config.root / "postgres", config.pg_port).start()
    endpoint = rgw.ensure()
    settings = S3Settings(endpoint_url=endpoint.url, region="us-east-1")
    from tests.s3_fixtures import rgw_session  # noqa: PLC0415

    client = settings.client(rgw_session(endpoint))
    bucket = f"bc-chaos-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    rgw_port = int(endpoint.url.rsplit(":", 1)[1])
    s3_proxy = FaultProxy("127.0.0.1", rgw_port, http=True, seed=config.seed).start()
    pg_proxy = FaultProxy("127.0.0.1", cluster.port, http=False, seed=config.seed + 1).start()
    return Services(cluster, endpoint, bucket, client, s3_proxy, pg_proxy)


def upload_sources(config: ChaosConfig, services: Services) -> dict[str, str]:
    """Put every source in the bucket under `src/{batch}/`; returns hostile names ⇒ expected."""
    uploads: list[tuple[str, bytes]] = []
    n = 0
    for folder, count in (
        ("main", config.items),
        ("cancel", config.cancel_items),
        ("deadline", config.deadline_items),
    ):
        for k in range(count):
            # Some sources repeat the previous one's bytes: their items race for the same keys.
            same_as_previous = folder == "main" and k % DUPLICATE_EVERY == DUPLICATE_EVERY - 1
            data = corpus.clean_jpeg(n - 1 if same_as_previous else n)
            uploads.append((f"src/{folder}/img-{n:06d}.jpg", data))
            n += 1
    expected = {}
    for hostile in corpus.hostile():
        uploads.append((f"src/hostile/{hostile.name}", hostile.data))
        expected[hostile.name] = f"{hostile.state}:{hostile.category or '-'}"
    for k in range(10):
        uploads.append((f"src/hostile/clean-{k}.jpg", corpus.clean_jpeg(n + k)))
    uploads.append(("src/hostile/too-large.jpg", corpus.noise_jpeg(400, 400)))
    expected["too-large.jpg"] = "failed:source_too_large"
    for name in VANISHING_SOURCES:
        uploads.append((f"src/hostile/{name}", corpus.clean_jpeg(n + 20)))
        expected[name] = "failed:source_not_found"
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        list(
            pool.map(
                lambda kv: services.client.put_object(
                    Bucket=services.bucket, Key=kv[0], Body=kv[1]
                ),
                uploads,
            )
        )
    return expected


def _env(services: Services, database_url: str, s3_url: str, store_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BATCHCROP_", "AWS_"))}
    env.update(
        BATCHCROP_DATABASE_URL=database_url,
        BATCHCROP_STORE=store_url,
        BATCHCROP_S3_ENDPOINT_URL=s3_url,
        AWS_ACCESS_KEY_ID=services.endpoint.access_key,
        AWS_SECRET_ACCESS_KEY=services.endpoint.secret_key,
        AWS_DEFAULT_REGION="us-east-1",
        PYTHONPATH=str(REPO),
    )
    return env


def cli(env: dict[str, str], *args: str) -> Any:
    """Run `batchcrop ARGS --json` to its end and parse its output."""
    done = subprocess.run(
        [sys.executable, "-m", "batchcrop", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise RuntimeError(f"batchcrop {args[0]} exited {done.returncode}: {done.stderr[-800:]}")
    return json.loads(done.stdout)


def submit_batches(config: ChaosConfig, services: Services, env: dict[str, str]) -> dict[str, str]:
    """Submit the four batches; returns name ⇒ batch id."""
    common = ("--ratios", config.ratios, "--max-side", str(config.max_side))
    attempts = ("--max-attempts", str(config.max_attempts))
    ids = {}
    for name in ("main", "hostile", "cancel", "deadline"):
        deadline = f"{config.deadline_seconds}s" if name == "deadline" else "2h"
        source = f"s3://{services.bucket}/src/{name}/"
        document = cli(env, "submit", source, *common, *attempts, "--deadline", deadline)
        ids[name] = str(document["id"])
    return ids


class ApiServer:
    """A `batchcrop serve` subprocess on a free loopback port (through the proxies, too)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._env = env
        self._log = log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiServer:
        """Start serving and wait until it answers /healthz."""
        self._log.parent.mkdir(parents=True, exist_ok=True)
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "batchcrop", "serve", "--port", str(self.port)],
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + API_STARTUP_SECONDS
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"batchcrop serve did not start; see {self._log}")

    def stop(self) -> None:
        """SIGTERM and wait."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(30)


def _overdue(app: App, allowed_ms: int) -> int:
    """Items `in_progress` whose lease expired more than `allowed_ms` ago (database clock)."""
    stmt = sa.select(sa.func.count()).where(
        items_table.c.state == "in_progress",
        items_table.c.lease_expires_at < db_now_ms() - allowed_ms,
    )
    with app.leases.reading() as conn:
        return int(conn.execute(stmt).scalar_one())


def config_root_store(config: ChaosConfig) -> Path:
    """The local store folder of a `store="local"` run."""
    return (config.root / "store").resolve()


def _done(status: dict[str, Any]) -> float:
    """The fraction of a batch's items that are terminal."""
    return float(sum(status["counts"][s] for s in TERMINAL) / max(1, status["total"]))


class Run:
    """One chaos run; `execute()` returns the report."""

    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.report = Report()
        self.last_outage = 0.0

    def execute(self) -> Report:
        """Set up, run with faults until every batch is terminal (or the timeout), audit."""
        config = self.config
        started = time.monotonic()
        shutil.rmtree(config.root, ignore_errors=True)
        config.root.mkdir(parents=True)
        services = start_services(config)
        self.services = services
        try:
            return self._execute(services, started)
        finally:
            services.stop()

    def _execute(self, services: Services, started: float) -> Report:
        config = self.config
        expected = upload_sources(config, services)
        store_url = (
            f"file://{config_root_store(config)}"
            if config.store == "local"
            else f"s3://{services.bucket}/out"
        )
        direct = _env(services, services.cluster.url, services.endpoint.url, store_url)
        ids = submit_batches(config, services, direct)
        for name in VANISHING_SOURCES:
            services.client.delete_object(Bucket=services.bucket, Key=f"src/hostile/{name}")
        proxied_db = f"postgresql+psycopg://postgres@127.0.0.1:{services.pg_proxy.port}/postgres"
        env = _env(services, proxied_db, services.s3_proxy.url, store_url)
        app = build(Settings(database_url=services.cluster.url))
        fleet = Fleet(
            config.workers,
            [
                "--concurrency", str(config.concurrency),
                "--lease-seconds", str(config.lease_seconds),
                "--reaper-interval-seconds", str(config.reaper_interval_seconds),
                "--max-attempt-seconds", str(config.max_attempt_seconds),
                "--shutdown-grace-seconds", "5",
                "--max-source-bytes", str(MAX_SOURCE_BYTES),
            ],
            env,
            config.root / "logs",
            self.rng,
        )  # fmt: skip
        self._storage_faults()
        work_started = time.monotonic()
        fleet.start()
        api = ApiServer(env, config.root / "logs" / "serve.log").start()
        poller = Poller(api.url, list(ids.values()))
        poller.start()
        try:
            self._chaos(app, services, fleet, ids)
        finally:
            poller.stop()
            api.stop()
            codes = fleet.stop()
            self.report.work_seconds = time.monotonic() - work_started
            services.s3_proxy.configure()
        self.report.notes += [f"unexpected worker exit: {e}" for e in fleet.unexpected_exits]
        self.report.notes += [f"traceback in {name}" for name in fleet.tracebacks()]
        self.report.notes.append(f"final worker exit codes: {codes}")
        self._audit(app, services, ids, expected)
        self.report.api_answers = dict(poller.answers)
        for violation in poller.violations:
            self.report.audit.violate(f"API: {violation}")
        app.close()
        self.report.wall_seconds = time.monotonic() - started
        return self.report

    def _chaos(self, app: App, services: Services, fleet: Fleet, ids: dict[str, str]) -> None:
        config = self.config
        plan = _schedule(config, self.rng)
        deadline = time.monotonic() + config.timeout_seconds
        allowed_ms = round((config.reaper_interval_seconds * 1.2 + OVERDUE_SLACK_SECONDS) * 1000)
        progress, moved_at = -1.0, time.monotonic()
        while time.monotonic() < deadline:
            self.report.faults["worker_restart"] += fleet.supervise()
            try:
                statuses = {name: app.batches.status(bid) for name, bid in ids.items()}
                quiet = time.monotonic() - self.last_outage > OUTAGE_SETTLE_SECONDS
                if quiet and _overdue(app, allowed_ms):
                    self.report.overdue_samples += 1
            except DatabaseUnavailable:
                time.sleep(POLL_SECONDS)
                continue
            if all(s["state"] in TERMINAL for s in statuses.values()):
                return
            total_done = sum(_done(s) for s in statuses.values())
            if total_done != progress:
                progress, moved_at = total_done, time.monotonic()
            elif time.monotonic() - moved_at > STALL_SECONDS:
                self.report.notes.append(f"no progress for {STALL_SECONDS:.0f} s: stopped")
                return
            if not self.report.faults["cancel"] and _done(statuses["cancel"]) >= 0.1:
                self._inject("cancel", app, services, fleet, ids)  # part-way through, not after
            done = _done(statuses["main"])
            while plan and plan[0][0] <= done:
                self._inject(plan.pop(0)[1], app, services, fleet, ids)
            time.sleep(POLL_SECONDS)
        self.report.notes.append(f"timed out after {config.timeout_seconds:.0f} s")

    def _inject(
        self, kind: str, app: App, services: Services, fleet: Fleet, ids: dict[str, str]
    ) -> None:
        config = self.config
        pause = config.lease_seconds + config.reaper_interval_seconds * 2 + 1.0
        injected = True
        if kind == "sigkill":
            injected = fleet.kill_random() is not None
            self.report.faults["worker_restart"] += fleet.supervise()
        elif kind == "sigstop":
            injected = fleet.pause_random(pause) is not None
        elif kind == "pg_restart":
            services.cluster.restart()
            self.last_outage = time.monotonic()
        elif kind == "pg_drop":
            services.pg_proxy.reset_all()
            self.last_outage = time.monotonic()
        elif kind == "storage_outage":
            services.s3_proxy.outage(config.storage_outage_seconds)
        elif kind == "pg_stall":
            self._stall(services.pg_proxy, config.lease_seconds * 1.5)
            self.last_outage = time.monotonic() + config.lease_seconds * 1.5
        elif kind == "s3_stall":
            self._stall(services.s3_proxy, config.max_attempt_seconds + config.lease_seconds + 2)
        elif kind == "cancel":
            app.batches.cancel(ids["cancel"])
        if injected:
            self.report.faults[kind] += 1

    def _stall(self, proxy: FaultProxy, seconds: float) -> None:
        """Hold every request arriving in the next STALL_WINDOW_SECONDS for `seconds`."""
        proxy.configure(delay_fraction=1.0, delay_seconds=seconds)
        time.sleep(STALL_WINDOW_SECONDS)
        if proxy is self.services.s3_proxy:
            self._storage_faults()
        else:
            proxy.configure()

    def _storage_faults(self) -> None:
        """The background S3 fault plan of the whole run."""
        config = self.config
        self.services.s3_proxy.configure(
            fail_fraction=config.storage_fail_fraction,
            delay_fraction=config.storage_delay_fraction,
            delay_seconds=config.storage_delay_seconds,
        )

    def _audit(
        self, app: App, services: Services, ids: dict[str, str], expected: dict[str, str]
    ) -> None:
        report = self.report
        store: ObjectStore = (
            LocalStore(config_root_store(self.config))
            if self.config.store == "local"
            else S3Store(services.bucket, "out", client=services.client)
        )
        report.audit = invariants.check(app, store, ids.values())
        report.items = sum(app.leases.group(bid).total for bid in ids.values())
        report.batches = {name: app.batches.status(bid) for name, bid in ids.items()}
        counts = services.s3_proxy.counts()
        report.storage_requests = counts.get("requests", 0)
        for kind in (*FAULT_KINDS, "delay", "refused"):
            report.faults[f"s3_{kind}"] += counts.get(kind, 0)
        report.faults["pg_connections_reset"] += services.pg_proxy.counts().get("reset_all", 0)
        if report.overdue_samples:
            report.audit.violate(
                f"{report.overdue_samples} samples saw items in_progress past lease + reaper"
            )
        self._expect(app, ids, expected)

    def _expect(self, app: App, ids: dict[str, str], expected: dict[str, str]) -> None:
        """The batches whose outcome is known: hostile items, the cancelled and late batches."""
        audit = self.report.audit
        docs = invariants.all_items(app, ids["hostile"])
        for item in docs:
            name = str(item.payload["source"]).rsplit("/", 1)[1]
            got = f"{item.state.value}:{item.error_category or '-'}"
            want = expected.get(name, "succeeded:-")
            if got != want:
                audit.violate(f"hostile {name}: ended {got}, expected {want}")
        cancel = self.report.batches["cancel"]
        if cancel["state"] != "abandoned" or set(cancel["failures"]) - {"cancelled"}:
            audit.violate(f"cancelled batch ended {cancel['state']} {cancel['failures']}")
        late = self.report.batches["deadline"]
        if late["state"] not in ("succeeded", "abandoned") or (
            set(late["failures"]) - {"deadline_exceeded"}
        ):
            audit.violate(f"late batch ended {late['state']} {late['failures']}")


def run(config: ChaosConfig) -> Report:
    """Run the harness once with `config`; see the module docstring."""
    return Run(config).execute()

"""The backends of a chaos run: its configuration, PostgreSQL, RGW, proxies, CLI, API server.

`start_services` starts a private PostgreSQL cluster and a fresh bucket on the live Ceph RGW, each
behind a `FaultProxy`; `upload_sources` and `submit_batches` prepare the four batches through the
real CLI; `ApiServer` runs `batchcrop serve`. Everything is on loopback and stopped by `stop()`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from storage import S3Settings
from tests import receiver
from tests.chaos import corpus
from tests.chaos.pgcluster import PrivateCluster, free_port
from tests.s3_fixtures import empty_and_delete_bucket, rgw_session
from tests.services import rgw
from tests.services.proxy import FaultProxy

REPO = Path(__file__).resolve().parents[2]
UPLOAD_THREADS = 8
CLI_TIMEOUT_SECONDS = 300.0
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
    # Short, as in tests/worker/test_recovery.py: a SIGKILLed worker's items come back `worker_lost`
    # within about this (or `lease_expired` after the lease, whichever is first).
    worker_timeout_seconds: float = 3.0
    max_attempt_seconds: float = 15.0
    max_attempts: int = 5
    kills: int = 20
    pauses: int = 3
    pg_restarts: int = 2
    pg_drops: int = 2
    storage_outages: int = 2
    storage_outage_seconds: float = 2.0
    # Store outages longer than the S3 client's retries and the item's attempt budget.
    long_storage_outages: int = 0
    long_storage_outage_seconds: float = 20.0
    # PostgreSQL stopped at the moment a worker commits an item (the proxy sees the manifest
    # INSERT, then the COMMIT: it cuts that connection and the cluster goes down). Each cut's
    # downtime in turn: 0 is `pg_ctl restart -m fast`, else stopped this many seconds.
    pg_commit_cuts: int = 0
    pg_commit_cut_seconds: tuple[float, ...] = (0.0,)
    # After a database or long store outage ends, no item claimed before its end may still be
    # in_progress this long after it (docs/design.md §8: no stranded work).
    stranded_bound_seconds: float = 10.0
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


def config_root_store(config: ChaosConfig) -> Path:
    """The local store folder of a `store="local"` run."""
    return (config.root / "store").resolve()


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
            empty_and_delete_bucket(self.client, self.bucket)
        except Exception as exc:  # cleanup is best effort; the report is what matters
            print(f"could not delete bucket {self.bucket}: {exc}", file=sys.stderr)


def start_services(config: ChaosConfig) -> Services:
    """Private PostgreSQL, a fresh RGW bucket, and a fault proxy in front of each."""
    cluster = PrivateCluster(config.root / "postgres", config.pg_port).start()
    endpoint = rgw.ensure()
    settings = S3Settings(endpoint_url=endpoint.url, region="us-east-1")
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


CALLBACK_RETRY_SECONDS = 0.5
"""Callback retries in a run: short, so a receiver's scripted failures cost seconds."""


def env_for(services: Services, database_url: str, s3_url: str, store_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BATCHCROP_", "AWS_"))}
    env.update(
        BATCHCROP_CALLBACK_SECRET=receiver.SECRET,
        BATCHCROP_CALLBACK_HOSTS="127.0.0.1:*",
        BATCHCROP_CALLBACK_RETRY_SECONDS=str(CALLBACK_RETRY_SECONDS),
    )
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


def submit_batches(
    config: ChaosConfig, services: Services, env: dict[str, str], callback_url: str
) -> dict[str, str]:
    """Submit the four batches, each with the run's callback receiver; returns name ⇒ id."""
    common = ("--ratios", config.ratios, "--max-side", str(config.max_side))
    common += ("--callback-url", callback_url)  # type: ignore[assignment]
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

"""Benchmark: `S3Store.put_if_absent` (conditional PUT + sha256) vs plain `put_object`, one run.

Against the local Ceph RGW test gateway (`tests/services/rgw.py`, started if needed), writes
`--objects` distinct random objects of `--size-kb` KiB per mode from `--threads` threads sharing
one client. Modes: plain put_object (the peer); put_object with If-None-Match; the same plus the
sha256 computed and sent inline; our put_if_absent. They alternate in rotating rounds on a fresh
bucket so drift on a shared machine hits all alike. Per mode it prints median and p95 latency,
objects/s, and CPU per object of this client process and of the gateway's daemons (radosgw +
ceph-osd, from /proc): CPU cost does not depend on how busy the machine is, latency does. Also
times re-putting existing objects (the 412 + HEAD idempotent path).

    .venv/bin/python bench/storage.py [--objects 800] [--threads 8] [--size-kb 200] [--rounds 8]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage import S3Store
from tests.s3_fixtures import empty_and_delete_bucket, rgw_session, rgw_settings
from tests.services import rgw

OBJECTS = 800
THREADS = 8
SIZE_KB = 200
ROUNDS = 8
WARMUP_OBJECTS = 32
OVERHEAD_BUDGET_PERCENT = 10.0
GATEWAY_PID_FILES = ("client.rgw.a.pid", "osd.0.pid")
CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")

Writer = Callable[[str, bytes], object]


@dataclass
class Figures:
    """Accumulated measurements of one mode."""

    latencies: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    client_cpu_seconds: float = 0.0
    server_cpu_seconds: float = 0.0

    def add(self, other: Figures) -> None:
        self.latencies += other.latencies
        self.wall_seconds += other.wall_seconds
        self.client_cpu_seconds += other.client_cpu_seconds
        self.server_cpu_seconds += other.server_cpu_seconds

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latencies) * 1000

    @property
    def objects_per_s(self) -> float:
        return len(self.latencies) / self.wall_seconds

    @property
    def cpu_ms_per_object(self) -> float:
        return (self.client_cpu_seconds + self.server_cpu_seconds) * 1000 / len(self.latencies)


def _gateway_cpu_seconds() -> float:
    """User + system CPU seconds consumed so far by the gateway's radosgw and OSD processes."""
    total = 0.0
    for name in GATEWAY_PID_FILES:
        pid = (rgw.ROOT / "run" / name).read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND
    return total


def _timed_batch(keys: list[str], bodies: list[bytes], write: Writer, threads: int) -> Figures:
    """Write each (key, body) from `threads` threads and measure it."""

    def one(index: int) -> float:
        started = time.perf_counter()
        write(keys[index], bodies[index])
        return time.perf_counter() - started

    client_cpu, server_cpu = time.process_time(), _gateway_cpu_seconds()
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        latencies = list(pool.map(one, range(len(keys))))
    return Figures(
        latencies=latencies,
        wall_seconds=time.perf_counter() - started,
        client_cpu_seconds=time.process_time() - client_cpu,
        server_cpu_seconds=_gateway_cpu_seconds() - server_cpu,
    )


def _print(name: str, figures: Figures) -> None:
    ordered = sorted(figures.latencies)
    count = len(ordered)
    print(
        f"{name:<37} median {figures.median_ms:6.2f} ms  "
        f"p95 {ordered[int(0.95 * (count - 1))] * 1000:6.2f} ms  "
        f"{figures.objects_per_s:6.1f} obj/s  CPU/object: client "
        f"{figures.client_cpu_seconds * 1000 / count:5.2f} ms + gateway "
        f"{figures.server_cpu_seconds * 1000 / count:5.2f} ms  ({count} objects)"
    )


def _writers(store: S3Store) -> dict[str, Writer]:
    client, bucket = store.client, store.bucket

    def plain_put(key: str, body: bytes) -> object:
        return client.put_object(Bucket=bucket, Key=f"plain/{key}", Body=body)

    def raw_conditional(key: str, body: bytes) -> object:
        return client.put_object(Bucket=bucket, Key=f"raw/{key}", Body=body, IfNoneMatch="*")

    def hashed_conditional(key: str, body: bytes) -> object:
        digest = hashlib.sha256(body).hexdigest()
        return client.put_object(
            Bucket=bucket,
            Key=f"hashed/{key}",
            Body=body,
            IfNoneMatch="*",
            Metadata={"sha256": digest},
        )

    def ours(key: str, body: bytes) -> object:
        return store.put_if_absent(key, body)

    return {"plain": plain_put, "raw": raw_conditional, "hashed": hashed_conditional, "ours": ours}


LABELS = {
    "plain": "plain put_object (peer)",
    "raw": "put_object + If-None-Match",
    "hashed": "+ sha256 computed, in metadata",
    "ours": "put_if_absent (ours)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--objects", type=int, default=OBJECTS, help="objects per mode")
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--size-kb", type=int, default=SIZE_KB)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()

    endpoint = rgw.ensure()
    settings = rgw_settings(endpoint)
    client = settings.client(rgw_session(endpoint))
    bucket = f"bc-bench-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    store = S3Store(bucket, "ours", settings=settings, client=client)
    writers = _writers(store)
    size, per_round = args.size_kb * 1024, args.objects // args.rounds
    print(
        f"RGW {endpoint.url}, {args.threads} threads, {args.size_kb} KiB objects, "
        f"{per_round * args.rounds} objects per mode in {args.rounds} rotating rounds, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"
    )
    try:
        warm = [os.urandom(size) for _ in range(WARMUP_OBJECTS)]
        for write in writers.values():
            _timed_batch([f"warmup/{index}" for index in range(WARMUP_OBJECTS)], warm, write, 8)

        results = {mode: Figures() for mode in writers}
        written: list[tuple[str, bytes]] = []
        modes = list(writers)
        for round_index in range(args.rounds):
            keys = [f"r{round_index}/{index:05d}.jpg" for index in range(per_round)]
            bodies = [os.urandom(size) for _ in range(per_round)]
            # Rotate the order each round so no mode always runs first (or last) on a busy box.
            shift = round_index % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                results[mode].add(_timed_batch(keys, bodies, writers[mode], args.threads))
            written.extend(zip(keys, bodies, strict=True))

        for mode, figures in results.items():
            _print(LABELS[mode], figures)
        retry = written[:per_round]
        _print(
            "put_if_absent, key exists (412+HEAD)",
            _timed_batch(
                [k for k, _ in retry], [b for _, b in retry], writers["ours"], args.threads
            ),
        )
        plain, ours = results["plain"], results["ours"]
        overheads = {
            "median latency": (ours.median_ms / plain.median_ms - 1) * 100,
            "throughput": (plain.objects_per_s / ours.objects_per_s - 1) * 100,
            "CPU per object": (ours.cpu_ms_per_object / plain.cpu_ms_per_object - 1) * 100,
        }
        print(
            "put_if_absent vs plain put_object: "
            + ", ".join(f"{name} {value:+.1f} %" for name, value in overheads.items())
            + f" (budget {OVERHEAD_BUDGET_PERCENT:.0f} %)"
        )
        print(f"load average {os.getloadavg()[0]:.1f} at end")
    finally:
        empty_and_delete_bucket(client, bucket)


if __name__ == "__main__":
    main()

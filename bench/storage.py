"""Benchmark: `S3Store.put_if_absent` (conditional PUT + sha256) vs plain `put_object`, one run.

Against the local Ceph RGW test gateway (`tests/services/rgw.py`, started if needed), writes
`--objects` distinct random objects of `--size-kb` KiB per mode from `--threads` threads sharing
one client. The modes alternate in rounds on a fresh bucket so drift on a shared machine hits
both alike. Prints per mode (plain put_object, raw put_object with If-None-Match, our
put_if_absent): median and p95 latency per object, objects/s, and the overhead of ours over
plain, overall and as the median of per-round paired wall times (the verdict uses the latter).
Also times re-putting existing objects (the 412 + HEAD idempotent path).

    .venv/bin/python bench/storage.py [--objects 800] [--threads 8] [--size-kb 200] [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


def _timed_batch(
    keys: list[str], bodies: list[bytes], write: Callable[[str, bytes], object], threads: int
) -> tuple[list[float], float]:
    """Write each (key, body) from `threads` threads; return per-object and wall seconds."""

    def one(index: int) -> float:
        started = time.perf_counter()
        write(keys[index], bodies[index])
        return time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        latencies = list(pool.map(one, range(len(keys))))
    return latencies, time.perf_counter() - started


def _summary(name: str, latencies: list[float], wall_seconds: float) -> dict[str, float]:
    ordered = sorted(latencies)
    figures = {
        "median_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1000,
        "objects_per_s": len(ordered) / wall_seconds,
    }
    print(
        f"{name:<34} median {figures['median_ms']:7.2f} ms   p95 {figures['p95_ms']:7.2f} ms   "
        f"{figures['objects_per_s']:8.1f} objects/s   ({len(ordered)} objects)"
    )
    return figures


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

    def plain_put(key: str, body: bytes) -> object:
        return client.put_object(Bucket=bucket, Key=f"peer/{key}", Body=body)

    def raw_conditional(key: str, body: bytes) -> object:
        return client.put_object(Bucket=bucket, Key=f"raw/{key}", Body=body, IfNoneMatch="*")

    def ours(key: str, body: bytes) -> object:
        return store.put_if_absent(key, body)

    writers = {"plain": plain_put, "raw": raw_conditional, "ours": ours}

    size = args.size_kb * 1024
    per_round = args.objects // args.rounds
    print(
        f"RGW {endpoint.url}, {args.threads} threads, {args.size_kb} KiB objects, "
        f"{per_round * args.rounds} objects per mode in {args.rounds} alternating rounds, "
        f"{os.cpu_count()} CPUs"
    )
    try:
        warm = [os.urandom(size) for _ in range(WARMUP_OBJECTS)]
        warm_keys = [f"warmup/{index}" for index in range(WARMUP_OBJECTS)]
        for write in writers.values():
            _timed_batch(warm_keys, warm, write, args.threads)

        results: dict[str, tuple[list[float], float]] = {mode: ([], 0.0) for mode in writers}
        written: list[tuple[str, bytes]] = []
        round_overheads: list[float] = []
        modes = list(writers)
        for round_index in range(args.rounds):
            keys = [f"r{round_index}/{index:05d}.jpg" for index in range(per_round)]
            bodies = [os.urandom(size) for _ in range(per_round)]
            # Rotate the order each round so no mode always runs first (or last) on a busy box.
            shift = round_index % len(modes)
            walls: dict[str, float] = {}
            for mode in modes[shift:] + modes[:shift]:
                latencies, walls[mode] = _timed_batch(keys, bodies, writers[mode], args.threads)
                results[mode] = (results[mode][0] + latencies, results[mode][1] + walls[mode])
            # Paired per round: both modes wrote the same bodies within seconds of each other.
            round_overheads.append((walls["ours"] / walls["plain"] - 1) * 100)
            written.extend(zip(keys, bodies, strict=True))

        plain = _summary("plain put_object (peer)", *results["plain"])
        _summary("put_object If-None-Match (raw)", *results["raw"])
        conditional = _summary("put_if_absent (ours)", *results["ours"])
        retry_sample = written[:per_round]
        _summary(
            "put_if_absent, key exists (412+HEAD)",
            *_timed_batch(
                [key for key, _ in retry_sample],
                [body for _, body in retry_sample],
                ours,
                args.threads,
            ),
        )
        overhead_median = (conditional["median_ms"] / plain["median_ms"] - 1) * 100
        overhead_rate = (plain["objects_per_s"] / conditional["objects_per_s"] - 1) * 100
        overhead_paired = statistics.median(round_overheads)
        verdict = "within" if overhead_paired < OVERHEAD_BUDGET_PERCENT else "OVER"
        print(
            f"conditional-write overhead: median latency {overhead_median:+.1f} %, "
            f"throughput {overhead_rate:+.1f} %; median of per-round paired wall-time "
            f"overheads {overhead_paired:+.1f} % (rounds {min(round_overheads):+.1f} .. "
            f"{max(round_overheads):+.1f} %): {verdict} the {OVERHEAD_BUDGET_PERCENT:.0f} % budget"
        )
    finally:
        empty_and_delete_bucket(client, bucket)


if __name__ == "__main__":
    main()

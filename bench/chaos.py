"""Chaos run: prove docs/design.md §8 under SIGKILLs, pauses, PostgreSQL restarts, S3 faults.

Real `batchcrop worker` processes reach a private PostgreSQL cluster and the live Ceph RGW only
through fault proxies of our own (`tests/services/proxy.py`); the harness (`tests/chaos/`)
injects the faults as the main batch progresses, then audits the database and the store. Prints
one table — with the time from each SIGKILL until the killed worker's items were released and
claimed again, against their bounds — and exits 1 if any invariant or bound was violated.

    .venv/bin/python bench/chaos.py [--items 2000] [--workers 4] [--kills 20] [--store s3|local]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos.backends import ChaosConfig
from tests.chaos.harness import Report, run
from tests.chaos.table import render


def main() -> int:
    """Parse flags, run once, print the table; exit 1 on any violation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000, help="clean items in the main batch")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2, help="slots per worker")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--pauses", type=int, default=3)
    parser.add_argument("--pg-restarts", type=int, default=2)
    parser.add_argument("--lease-seconds", type=float, default=3.0)
    parser.add_argument(
        "--worker-timeout-seconds",
        type=float,
        default=3.0,
        help="a worker not seen this long is absent and its items are released (every process)",
    )
    parser.add_argument("--storage-fail-fraction", type=float, default=0.06)
    parser.add_argument("--timeout-seconds", type=float, default=1500.0)
    parser.add_argument("--store", choices=["s3", "local"], default="s3", help="derivative store")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--root", type=Path, default=Path(".tmp/chaos/full"))
    args = parser.parse_args()
    config = ChaosConfig(
        root=args.root,
        items=args.items,
        workers=args.workers,
        concurrency=args.concurrency,
        kills=args.kills,
        pauses=args.pauses,
        pg_restarts=args.pg_restarts,
        lease_seconds=args.lease_seconds,
        worker_timeout_seconds=args.worker_timeout_seconds,
        storage_fail_fraction=args.storage_fail_fraction,
        timeout_seconds=args.timeout_seconds,
        seed=args.seed,
        store=args.store,
    )
    report: Report = run(config)
    print(render(report))
    for violation in report.violations[:50]:
        print(f"VIOLATION: {violation}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())

"""Items failed by a store outage: a batch on S3 whose store goes away part-way through.

A moto S3 server on loopback behind the tests' fault proxy, a SQLite database, one in-process
worker (`--concurrency` slots) on a batch of `--items` small photos with `--max-attempts`; once
a tenth of the batch is done the proxy refuses every S3 request for `--outage-seconds`. Prints
how the items ended and how long the batch took.

    .venv/bin/python bench/outages.py [--items 156] [--outage-seconds 90] [--max-attempts 3]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3
from moto.server import ThreadedMotoServer

from batchcrop.app import build
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.settings import Settings
from batchcrop.worker.worker import WorkerOptions
from leases import TERMINAL
from storage import S3Settings, S3Store
from tests.cli.test_cli import free_port
from tests.images import write_photos
from tests.services.proxy import FaultProxy

TIMEOUT_SECONDS = 1800.0


def main() -> int:
    """Run the batch through the outage once and print its outcome."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=156)
    parser.add_argument("--outage-seconds", type=float, default=90.0)
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's access log
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    proxy = FaultProxy("127.0.0.1", port).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            session = boto3.session.Session(
                aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1"
            )
            client = S3Settings(endpoint_url=proxy.url, region="us-east-1").client(session)
            client.create_bucket(Bucket="bench")
            store = S3Store("bench", client=client)
            app = build(Settings(database_url=f"sqlite:///{root / 'bench.db'}", store=store.url))
            app.upgrade()
            sources = write_photos(root / "src", args.items, size=(400, 300))
            status, _ = app.batches.submit(
                BatchRequest(
                    items=tuple(ItemRequest(source=str(p)) for p in sources),
                    spec=RenderSpec(ratios=(Ratio(1, 1), Ratio(4, 3)), max_side=160),
                    deadline_seconds=TIMEOUT_SECONDS,
                    max_attempts=args.max_attempts,
                )
            )
            batch_id = str(status["id"])
            worker = app.worker(
                store, WorkerOptions(concurrency=args.concurrency, batch_ids=[batch_id])
            )
            started = time.monotonic()
            worker.start()
            outage_at = None
            try:
                while (status := app.batches.status(batch_id))["state"] not in TERMINAL:
                    done = sum(status["counts"][s] for s in ("succeeded", "failed", "abandoned"))
                    if outage_at is None and done >= args.items / 10:
                        proxy.outage(args.outage_seconds)
                        outage_at = time.monotonic()
                    if time.monotonic() - started > TIMEOUT_SECONDS:
                        print("timed out", file=sys.stderr)
                        return 1
                    time.sleep(0.2)
            finally:
                worker.stop()
                worker.join(60)
            items = app.leases.items(batch_id, limit=args.items)
            ended = Counter(f"{i.state.value}:{i.error_category or '-'}" for i in items)
            print(
                f"{args.items} items, max_attempts {args.max_attempts}, S3 down "
                f"{args.outage_seconds:g} s from {(outage_at or started) - started:.1f} s: "
                f"batch {status['state']} after {time.monotonic() - started:.1f} s; "
                + ", ".join(f"{k} {n}" for k, n in sorted(ended.items()))
            )
            app.close()
    finally:
        proxy.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

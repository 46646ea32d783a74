"""A demonstration S3 server for deploy/container/compose.yaml: moto's server with one bucket.

moto keeps every object in memory and forgets them when it stops; it stands in for a real
S3-compatible store (Ceph RGW, AWS S3) so that the compose file runs where no image registry
is reachable. Listens on 0.0.0.0:$S3_PORT (default 5000) and creates $S3_BUCKET (default
derivatives) as soon as it listens; a worker whose start-up check falls in between finds no
bucket, exits 4 and is restarted.
"""

from __future__ import annotations

import os
import signal
import threading

import boto3
from moto.server import ThreadedMotoServer

DEFAULT_PORT = 5000
DEFAULT_BUCKET = "derivatives"


def main() -> None:
    """Serve until SIGTERM or SIGINT."""
    port = int(os.environ.get("S3_PORT", DEFAULT_PORT))
    bucket = os.environ.get("S3_BUCKET", DEFAULT_BUCKET)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = ThreadedMotoServer(ip_address="0.0.0.0", port=port)  # noqa: S104
    server.start()
    boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "demo"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "demo"),
    ).create_bucket(Bucket=bucket)
    print(f"s3-demo-server: listening on 0.0.0.0:{port}, bucket {bucket}", flush=True)
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()

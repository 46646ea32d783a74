"""Time to recovery after a SIGKILL: how long a killed worker's item stays held.

Two real `batchcrop worker` processes on a SQLite file (or `--database-url`) and a local store,
default settings unless given (lease 900 s, worker timeout 30 s, reaper every 30 s); one is
SIGKILLed while it holds an item; prints when the item was released and claimed again.

    .venv/bin/python bench/recovery.py [--runs 3] [--worker-timeout-seconds 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchcrop.app import build
from batchcrop.settings import Settings
from tests.cli.test_cli import Cli
from tests.images import write_photos
from tests.worker.test_recovery import measure_recovery


def main() -> int:
    """Measure `--runs` recoveries and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url")
    parser.add_argument("--worker-timeout-seconds", type=float)
    args = parser.parse_args()
    flags = []
    if args.worker_timeout_seconds is not None:
        flags = ["--worker-timeout-seconds", str(args.worker_timeout_seconds)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url = args.database_url or f"sqlite:///{root / 'bench.db'}"
        write_photos(root / "src", 6, size=(2400, 1800))
        cli = Cli(url, root / "out")
        app = build(Settings(database_url=url))
        try:
            for n in range(args.runs):
                r = measure_recovery(cli, app, root / "src", *flags)
                print(
                    f"run {n + 1}: released {r.released:.1f} s, claimed again {r.reclaimed:.1f} s"
                )
        finally:
            cli.kill_all()
            app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

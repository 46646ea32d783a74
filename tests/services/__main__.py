"""`python -m tests.services status|down [--run ID]`: this checkout's test services at once.

`status` prints where PostgreSQL and the Ceph RGW of this checkout run. `down` stops both (and
any that this tooling's own tests left in `.tmp/checkouts/`); `down --run ID` stops only those
that run ID started (`tests/services/runs.py`): `scripts/check` and `.ci/run` call it when they
end, so a service that was already running before them stays.
"""

from __future__ import annotations

import argparse
import sys

from tests.services import postgres, rgw, runs


def main(argv: list[str]) -> int:
    """Parse the command line and run it; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.services")
    parser.add_argument("command", choices=("status", "down"))
    parser.add_argument(
        "--run", metavar="ID", help="with down: stop only the services that run ID started"
    )
    args = parser.parse_args(argv)
    if args.run is not None and args.command != "down":
        parser.error("--run goes with down only")
    if args.run is not None and not args.run.strip():
        parser.error("--run needs a non-empty run id")
    try:
        cluster, gateway = postgres.default_cluster(), rgw.default_gateway()
    except ValueError as exc:  # a malformed port variable
        parser.error(str(exc))
    if args.command == "status":
        port = cluster.running_port()
        print(f"postgres: {postgres.url_for(port) if port else 'not running'} ({cluster.root})")
        ports = gateway.running_ports()
        where = rgw.endpoint_for(ports.rgw).url if ports else "not running"
        print(f"rgw: {where} ({gateway.root})")
        return 0
    for name, root, stop in (
        ("postgres", cluster.root, cluster.stop),
        ("rgw", gateway.root, gateway.stop),
    ):
        if args.run is None or runs.started_by(root, args.run):
            stopped = stop()
            print(f"{name}: {'stopped' if stopped else 'was not running'} ({root})")
    for tmp in sorted((postgres.ROOT.parent / runs.SCRATCH_CHECKOUTS).glob("*/.tmp")):
        for name, root, stop in (
            ("postgres", tmp / "postgres", postgres.Cluster(tmp / "postgres").stop),
            ("rgw", tmp / "rgw", rgw.Gateway(tmp / "rgw").stop),
        ):
            if (args.run is None or runs.started_by(root, args.run)) and stop():
                print(f"{name}: stopped ({root}, left by a test)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A throwaway PostgreSQL cluster on loopback for the test suite and the benchmarks.

`python -m tests.services.postgres up` starts (or reuses) a cluster in `.tmp/postgres` and prints
its SQLAlchemy URL; `down` stops it. The test fixtures call `ensure()` themselves, so a developer
with Debian's `postgresql` package needs no setup; `.ci/run` installs the package first.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

PORT = int(os.environ.get("BATCHCROP_TEST_PG_PORT", "54329"))
STARTUP_TIMEOUT_SECONDS = 30.0
ROOT = Path(__file__).resolve().parents[2] / ".tmp" / "postgres"
URL = f"postgresql+psycopg://postgres@127.0.0.1:{PORT}/postgres"


class PostgresUnavailableError(RuntimeError):
    """PostgreSQL binaries are not installed on this machine."""


def _bin_dir() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    if not candidates:
        raise PostgresUnavailableError("initdb not found (install Debian's postgresql package)")
    return candidates[0].parent


def _as_postgres(args: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root; run them as the packaged `postgres` user.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


def _accepting() -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", PORT)) == 0


def ensure() -> str:
    """Start the cluster unless it already answers; return its URL."""
    if _accepting():
        return URL
    bin_dir = _bin_dir()
    data = ROOT / "data"
    if not (data / "PG_VERSION").exists():
        shutil.rmtree(ROOT, ignore_errors=True)
        data.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(ROOT, "postgres")
            shutil.chown(data, "postgres")
        subprocess.run(
            _as_postgres(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                ]
            ),
            check=True,
            capture_output=True,
        )
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={PORT} -c unix_socket_directories={data} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    subprocess.run(
        _as_postgres(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(data / "log.txt"),
                "-o",
                options,
                "-w",
                "-t",
                str(int(STARTUP_TIMEOUT_SECONDS)),
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not _accepting():
        if time.monotonic() > deadline:
            raise RuntimeError(f"PostgreSQL did not start; see {data / 'log.txt'}")
        time.sleep(0.2)
    return URL


def stop() -> None:
    """Stop the cluster if it runs."""
    data = ROOT / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(
            _as_postgres([str(_bin_dir() / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
            check=False,
            capture_output=True,
        )


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    if command == "up":
        print(ensure())
    elif command == "down":
        stop()
    else:
        sys.exit("usage: python -m tests.services.postgres up|down")

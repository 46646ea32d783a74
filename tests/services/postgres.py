"""A throwaway PostgreSQL cluster on loopback for the test suite and the benchmarks.

`python -m tests.services.postgres up` starts (or reuses) a cluster in `.tmp/postgres` and prints
its SQLAlchemy URL; `down` stops it. The test fixtures call `ensure()` themselves, so a developer
with Debian's `postgresql` package needs no setup; `.ci/run` installs the package first.
"""

from __future__ import annotations

import fcntl
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
    """Start the cluster unless it already answers; return its URL.

    Test processes (pytest-xdist workers, benchmarks) call this at the same moment on a fresh
    machine; a lock file makes one of them create and start the cluster while the others wait, so
    two `initdb` runs never share (and wipe) one data folder.
    """
    if _accepting():
        return URL
    ROOT.parent.mkdir(parents=True, exist_ok=True)
    with open(ROOT.parent / "postgres.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _accepting():
            return URL
        return _create_and_start()


def _run(args: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(args, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        tail = ""
        if log is not None and log.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(
            f"{what} failed (exit {done.returncode}): {done.stdout}{done.stderr}\n{tail}".strip()
        )


def _create_and_start() -> str:
    bin_dir = _bin_dir()
    data = ROOT / "data"
    initialised = ROOT / "initialised"  # written after initdb succeeds, so a cut-off one is redone
    if not initialised.exists():
        shutil.rmtree(ROOT, ignore_errors=True)
        data.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(ROOT, "postgres")
            shutil.chown(data, "postgres")
        _run(
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
            "initdb",
        )
        initialised.touch()
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={PORT} -c unix_socket_directories={data} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    _run(
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
        "pg_ctl start",
        data / "log.txt",
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

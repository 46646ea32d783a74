"""A throwaway PostgreSQL cluster on loopback for the test suite and the benchmarks.

`python -m tests.services.postgres up` starts (or reuses) this checkout's cluster in
`.tmp/postgres` and prints its SQLAlchemy URL; `status` prints it or says it is stopped; `down`
stops it. The test fixtures call `ensure()` themselves, so a developer with Debian's `postgresql`
package needs no setup; `.ci/run` installs the package first.

Each checkout gets a port of its own (`tests/services/ports.py`): the one recorded in
`.tmp/postgres/port` when still free, else a free one; `BATCHCROP_TEST_PG_PORT` pins it. A
running cluster is recognised by its own `postmaster.pid`, never by the port answering, so a
second checkout never uses this one's server.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.services import runs
from tests.services.ports import LOOPBACK, PortTakenError, env_port, pick_port, port_free

PORT_ENV = "BATCHCROP_TEST_PG_PORT"
STARTUP_TIMEOUT_SECONDS = 30.0
START_ATTEMPTS = 3  # a freshly picked port can be taken by another checkout before we bind it
ROOT = Path(__file__).resolve().parents[2] / ".tmp" / "postgres"
# postmaster.pid lines (PostgreSQL's pidfile.h): 1 pid, 2 data folder, 4 port, 8 status.
PIDFILE_PID_LINE, PIDFILE_PORT_LINE, PIDFILE_STATUS_LINE = 0, 3, 7
PIDFILE_READY = "ready"


class PostgresUnavailableError(RuntimeError):
    """PostgreSQL is not installed here, or this checkout's cluster cannot start."""


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


def url_for(port: int) -> str:
    """The SQLAlchemy URL of the `postgres` database of a cluster on 127.0.0.1:`port`."""
    return f"postgresql+psycopg://postgres@{LOOPBACK}:{port}/postgres"


class Cluster:
    """The cluster whose files live in `root` (data in `root/data`), on loopback.

    `port` pins the port; None lets `ensure()` pick one (recorded in `root/port`).
    """

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.data = root / "data"
        self.pinned_port = port

    def running_port(self) -> int | None:
        """The port this cluster serves on, or None when it does not run (ready) right now.

        Proof of ownership is the data folder's `postmaster.pid`: its pid is alive and works in
        this data folder (the postmaster's working directory), and it says `ready`.
        """
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
            pid = int(lines[PIDFILE_PID_LINE])
            port = int(lines[PIDFILE_PORT_LINE])
            ready = lines[PIDFILE_STATUS_LINE].strip() == PIDFILE_READY
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except (OSError, ValueError, IndexError):
            return None
        return port if ready and cwd == self.data.resolve() else None

    def ensure(self) -> str:
        """Start the cluster unless it already runs; return its URL.

        Test processes (pytest-xdist workers, benchmarks) call this at the same moment on a
        fresh machine; a lock file makes one of them create and start the cluster while the
        others wait, so two `initdb` runs never share (and wipe) one data folder.
        """
        port = self.running_port()
        if port is None:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            with open(self.root.parent / f"{self.root.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                port = self.running_port()
                if port is None:
                    port = self._create_and_start()
        if self.pinned_port is not None and port != self.pinned_port:
            raise PostgresUnavailableError(
                f"this checkout's cluster ({self.data}) runs on port {port}, not on "
                f"{PORT_ENV}={self.pinned_port}: stop it first "
                "(`python -m tests.services.postgres down`)"
            )
        return url_for(port)

    def stop(self) -> int | None:
        """Stop the cluster if it runs; return the port it served on (None: it was stopped)."""
        port = self.running_port()
        if (self.data / "postmaster.pid").exists():
            # Also when not yet ready (cut off mid-start); a stale pid file just fails here.
            subprocess.run(
                _as_postgres([str(_bin_dir() / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                              "-w", "stop"]),
                check=False, capture_output=True,
            )  # fmt: skip
        return port

    def _recorded_port(self) -> int | None:
        try:
            return int((self.root / "port").read_text())
        except (OSError, ValueError):
            return None

    def _create_and_start(self) -> int:
        bin_dir = _bin_dir()
        port = pick_port(self.pinned_port, self._recorded_port(), (), PORT_ENV)
        initialised = self.root / "initialised"  # written after initdb, so a cut-off one is redone
        if not initialised.exists():
            shutil.rmtree(self.root, ignore_errors=True)
            self.data.mkdir(parents=True)
            if os.geteuid() == 0:
                shutil.chown(self.root, "postgres")
                shutil.chown(self.data, "postgres")
            _run(
                _as_postgres([str(bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres",
                              "-A", "trust", "-E", "UTF8"]),
                "initdb",
            )  # fmt: skip
            initialised.touch()
        runs.mark_started(self.root)
        for attempt in range(1, START_ATTEMPTS + 1):
            if attempt > 1:
                port = pick_port(self.pinned_port, None, (), PORT_ENV)
            (self.root / "port").write_text(f"{port}\n")
            try:
                self._pg_ctl_start(bin_dir, port)
            except PostgresUnavailableError:
                # Retry on a new port only when someone else took this one meanwhile.
                if attempt == START_ATTEMPTS or self.pinned_port is not None or port_free(port):
                    raise
                continue
            return port
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _pg_ctl_start(self, bin_dir: Path, port: int) -> None:
        options = (
            f"-c listen_addresses={LOOPBACK} -c port={port} "
            f"-c unix_socket_directories={self.data} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        log = self.data / "log.txt"
        _run(
            _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(log),
                          "-o", options, "-w", "-t", str(int(STARTUP_TIMEOUT_SECONDS)), "start"]),
            "pg_ctl start",
            log,
        )  # fmt: skip
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while self.running_port() != port:
            if time.monotonic() > deadline:
                raise PostgresUnavailableError(f"PostgreSQL did not start; see {log}")
            time.sleep(0.2)


def _run(args: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(args, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        tail = ""
        if log is not None and log.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise PostgresUnavailableError(
            f"{what} failed (exit {done.returncode}): {done.stdout}{done.stderr}\n{tail}".strip()
        )


def default_cluster() -> Cluster:
    """This checkout's cluster (`.tmp/postgres`), on the port `BATCHCROP_TEST_PG_PORT` pins."""
    return Cluster(ROOT, env_port(PORT_ENV))


def ensure() -> str:
    """Start this checkout's cluster unless it already runs; return its URL."""
    return default_cluster().ensure()


def stop() -> int | None:
    """Stop this checkout's cluster if it runs; return the port it served on."""
    return default_cluster().stop()


def main(argv: list[str]) -> int:
    """`up`, `status` or `down`; each says where the cluster is."""
    command = argv[0] if argv else "up"
    try:
        cluster = default_cluster()
        url = cluster.ensure() if command == "up" else ""
    except (PostgresUnavailableError, PortTakenError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if command == "up":
        print(url)
        print(f"PostgreSQL of {cluster.root} on port {cluster.running_port()}", file=sys.stderr)
    elif command == "status":
        port = cluster.running_port()
        if port is None:
            print(f"PostgreSQL of {cluster.root} is not running")
            return 1
        print(url_for(port))
    elif command == "down":
        port = cluster.stop()
        where = f"on port {port}" if port is not None else "(was not running)"
        print(f"stopped PostgreSQL of {cluster.root} {where}")
    else:
        print("usage: python -m tests.services.postgres up|status|down", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

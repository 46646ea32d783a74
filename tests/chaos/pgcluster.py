"""A private PostgreSQL cluster for chaos runs, which may be restarted at will.

This checkout's test cluster (`tests.services.postgres`) serves every other test of the run, so
chaos never restarts it: `PrivateCluster` runs its own `initdb`/`pg_ctl` cluster
in its own folder on its own port, and `restart()` is `pg_ctl restart -m fast` on it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.services.postgres import _as_postgres, _bin_dir

STARTUP_TIMEOUT_SECONDS = 60
MAX_CONNECTIONS = 200


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """One throwaway cluster in `root` listening on 127.0.0.1:`port` (trust auth).

    `port` 0 picks a free one.
    """

    def __init__(self, root: Path, port: int = 0) -> None:
        self.root = root.resolve()
        self.port = port or free_port()
        self.data = self.root / "data"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._bin = _bin_dir()

    def start(self) -> PrivateCluster:
        """initdb a fresh cluster (removing an older one in `root`) and start it."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        self.data.mkdir(parents=True)
        if _is_root():  # initdb and postgres refuse to run as root
            shutil.chown(self.root, "postgres")
            shutil.chown(self.data, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        self._pg_ctl("start")
        return self

    def restart(self) -> float:
        """`pg_ctl restart -m fast`: every connection is cut; returns the seconds it took."""
        started = time.monotonic()
        self._pg_ctl("restart", "-m", "fast")
        return time.monotonic() - started

    def down_for(self, seconds: float) -> float:
        """Stop (fast mode), stay down `seconds`, start again with the same data; returns the
        seconds from the stop's start until it accepts again."""
        started = time.monotonic()
        self.stop()
        time.sleep(seconds)
        self._pg_ctl("start")
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop the cluster if it runs (fast mode)."""
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                _as_postgres(
                    [str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop"]
                ),
                check=False,
                capture_output=True,
            )

    def remove(self) -> None:
        """Stop and delete the cluster's files."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def accepting(self) -> bool:
        """True when the server accepts TCP connections."""
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def _pg_ctl(self, *args: str) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.data} -c fsync=off -c synchronous_commit=off "
            f"-c full_page_writes=off -c max_connections={MAX_CONNECTIONS}"
        )
        log = str(self.data / "log.txt")
        timeout = str(STARTUP_TIMEOUT_SECONDS)
        command = [args[0], "-D", str(self.data), "-l", log, "-o", options, "-w", "-t", timeout]
        self._run("pg_ctl", *command, *args[1:])

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            _as_postgres([str(self._bin / program), *args]),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} {args[0]} failed: {done.stderr.strip()[-400:]}")


def _is_root() -> bool:
    return os.geteuid() == 0

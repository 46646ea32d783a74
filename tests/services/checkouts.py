"""Other checkouts for the tests of the services' isolation: copies of `tests/services` in a
temporary folder, so their `.tmp/` (and so their services) are theirs, run as real subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from tests.services import postgres, rgw, runs

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_SECONDS = 120
# Variables of the calling run that would leak into a copy's services. The run id is passed on
# (a test may override it), so the run's clean-up also reaches a copy an interrupted test left.
SERVICE_ENV = (
    postgres.PORT_ENV,
    rgw.RGW_PORT_ENV,
    rgw.MON_PORT_ENV,
    "BATCHCROP_TEST_POSTGRES_URL",
)


class Checkout:
    """A copy of the service tooling as a second checkout of the repository.

    It lives under this checkout's `.tmp/checkouts/` rather than in pytest's `tmp_path`:
    PostgreSQL runs as the `postgres` user, which cannot enter pytest's private folders.
    """

    def __init__(self) -> None:
        root = REPO / ".tmp" / runs.SCRATCH_CHECKOUTS / uuid.uuid4().hex[:12]
        self.root = root
        shutil.copytree(
            REPO / "tests" / "services",
            root / "tests" / "services",
            ignore=shutil.ignore_patterns("__pycache__", "test_*.py"),
        )
        (root / "tests" / "__init__.py").touch()
        self.tmp = root / ".tmp"

    def run(self, module: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """`python -m module args` in this checkout, with the given service variables and the
        calling run's id, none of its pinned ports."""
        environ = {k: v for k, v in os.environ.items() if k not in SERVICE_ENV}
        environ["PYTHONPATH"] = str(self.root)
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=self.root,
            env={**environ, **env},
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )

    def ok(self, module: str, *args: str, **env: str) -> str:
        """Like `run`, failing the test unless it exits 0; returns its stdout, stripped."""
        done = self.run(module, *args, **env)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    def seed_postgres(self, template: Checkout) -> None:
        """Copy `template`'s stopped, initialised cluster here (owners kept), as if this checkout
        had run `initdb` itself: it saves the tests an `initdb` (seconds) per checkout."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        source = template.tmp / "postgres"
        subprocess.run(["cp", "-a", str(source), str(self.tmp / "postgres")], check=True)
        for name in ("port", runs.MARKER_NAME):
            (self.tmp / "postgres" / name).unlink(missing_ok=True)

    def remove(self) -> None:
        """Stop this checkout's services and delete it."""
        self.run("tests.services", "down")
        shutil.rmtree(self.root, ignore_errors=True)


def fake_daemon(conf: Path) -> subprocess.Popen[bytes]:
    """A process whose command line names `conf`, as a Ceph daemon started with it does.

    Reaped by a thread as soon as it dies, as init reaps a real (forked-off) daemon, so a
    stopped one does not linger as a zombie that still answers signal 0.
    """
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", str(conf)],
        stdin=subprocess.DEVNULL,
    )
    threading.Thread(target=process.wait, daemon=True).start()
    return process

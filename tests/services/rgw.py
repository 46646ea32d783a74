"""A throwaway single-node Ceph RADOS Gateway (a real S3 server) on loopback for tests and benches.

`python -m tests.services.rgw up` starts (or reuses) one monitor, one memstore OSD (objects in
RAM) and one radosgw in `.tmp/rgw`, installing Debian's `radosgw ceph-mon ceph-osd` with apt-get
when missing, and prints the endpoint; `down` stops it. `ensure()` is safe to call from several
pytest-xdist workers at once: the first takes a file lock and bootstraps, the others wait on the
lock and then reuse the running gateway. Every wait is bounded.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

RGW_PORT = int(os.environ.get("BATCHCROP_TEST_RGW_PORT", "57480"))
MON_PORT = int(os.environ.get("BATCHCROP_TEST_RGW_MON_PORT", "56789"))
ROOT = Path(__file__).resolve().parents[2] / ".tmp" / "rgw"
ACCESS_KEY = "batchcroptestaccess"
SECRET_KEY = "batchcroptestsecretkey0123456789"
MEMSTORE_DEVICE_BYTES = 2 * 1024**3
APT_PACKAGES = ("radosgw", "ceph-mon", "ceph-osd")
APT_TIMEOUT_SECONDS = 300.0
LOCK_TIMEOUT_SECONDS = 400.0
COMMAND_TIMEOUT_SECONDS = 30.0
MON_STARTUP_TIMEOUT_SECONDS = 30.0
OSD_STARTUP_TIMEOUT_SECONDS = 60.0
RGW_STARTUP_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 10.0
POLL_INTERVAL_SECONDS = 0.25


class RGWUnavailableError(RuntimeError):
    """The gateway could not be installed or started on this machine."""


@dataclass(frozen=True)
class RGWEndpoint:
    """Where the gateway answers and the S3 credentials of its test user."""

    url: str
    access_key: str
    secret_key: str


ENDPOINT = RGWEndpoint(f"http://127.0.0.1:{RGW_PORT}", ACCESS_KEY, SECRET_KEY)


def ensure() -> RGWEndpoint:
    """Start the gateway unless it already answers with our test user; return its endpoint."""
    if _ready():
        return ENDPOINT
    ROOT.parent.mkdir(parents=True, exist_ok=True)
    with _locked(ROOT.parent / "rgw.lock"):
        if _ready():  # another worker finished the bootstrap while we waited for the lock
            return ENDPOINT
        _install_packages()
        stop()
        _bootstrap()
    return ENDPOINT


def stop() -> None:
    """Stop the daemons named by the run folder's pid files (SIGTERM, then SIGKILL).

    A pid is signalled only while its command line still names our config file, so a stale pid
    file (after a reboot) can never hit an unrelated process that reused the number.
    """
    run = ROOT / "run"
    pids = []
    for pid_file in sorted(run.glob("*.pid")) if run.exists() else []:
        try:
            pid = int(pid_file.read_text().strip())
        except ValueError:
            continue
        if _runs_our_config(pid):
            pids.append(pid)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_SECONDS)
    for pid in pids:
        if _runs_our_config(pid):
            _signal(pid, signal.SIGKILL)
    (ROOT / "ready").unlink(missing_ok=True)


def _ready() -> bool:
    """True when our bootstrap completed (test user included) and the gateway answers HTTP."""
    return (ROOT / "ready").exists() and _answers_http()


def _answers_http() -> bool:
    try:
        with urllib.request.urlopen(ENDPOINT.url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer (403 for anonymous) means the gateway is up
    except OSError:
        return False


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RGWUnavailableError(f"timed out waiting for {path}") from None
                time.sleep(POLL_INTERVAL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _install_packages() -> None:
    if all(shutil.which(name) for name in ("radosgw", "ceph-mon", "ceph-osd", "monmaptool")):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RGWUnavailableError("Ceph is not installed and apt-get cannot run here")
    apt = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=120"]
    install = [*apt, "install", "-y", "--no-install-recommends", *APT_PACKAGES]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        # A fresh machine may have no package lists yet: refresh them once if install fails.
        for command in (install, [*apt, "update"], install):
            done = subprocess.run(
                command, check=False, capture_output=True, timeout=APT_TIMEOUT_SECONDS, env=env
            )
            if done.returncode == 0 and command is install:
                return
    except (subprocess.SubprocessError, OSError) as exc:
        raise RGWUnavailableError(f"could not install {' '.join(APT_PACKAGES)}: {exc}") from exc
    raise RGWUnavailableError(f"apt-get could not install {' '.join(APT_PACKAGES)}")


def _config(fsid: str) -> str:
    return f"""[global]
fsid = {fsid}
mon initial members = a
mon host = v2:127.0.0.1:{MON_PORT}
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = {ROOT}/keyring
run dir = {ROOT}/run
pid file = {ROOT}/run/$name.pid
admin socket = {ROOT}/run/$name.asok
log file = {ROOT}/log/$name.log
mon data = {ROOT}/mon/$name
osd data = {ROOT}/osd/$name
osd objectstore = memstore
memstore device bytes = {MEMSTORE_DEVICE_BYTES}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:{RGW_PORT}
rgw data = {ROOT}/rgw
"""


def _bootstrap() -> None:
    """Create a fresh cluster: keys, monitor, OSD, gateway, test user (about 15 s)."""
    shutil.rmtree(ROOT, ignore_errors=True)
    for folder in ("run", "log", "mon/mon.a", "osd/osd.0", "rgw"):
        (ROOT / folder).mkdir(parents=True)
    conf = ROOT / "ceph.conf"
    conf.write_text(_config(str(uuid.uuid4())))
    keyring = str(ROOT / "keyring")
    _run("ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", "mon.",
         "--cap", "mon", "allow *")  # fmt: skip
    for name, caps in (
        ("client.admin", ["mon", "allow *", "osd", "allow *", "mgr", "allow *"]),
        ("osd.0", ["mon", "allow profile osd", "osd", "allow *"]),
        ("client.rgw.a", ["mon", "allow rw", "osd", "allow rwx"]),
    ):
        cap_args = [arg for pair in zip(caps[::2], caps[1::2], strict=True)
                    for arg in ("--cap", *pair)]  # fmt: skip
        _run("ceph-authtool", keyring, "--gen-key", "-n", name, *cap_args)
    fsid = _conf_value(conf, "fsid")
    monmap = str(ROOT / "monmap")
    _run(
        "monmaptool",
        "--create",
        "--addv",
        "a",
        f"[v2:127.0.0.1:{MON_PORT}]",
        "--fsid",
        fsid,
        monmap,
    )
    _run("ceph-mon", "-c", str(conf), "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", keyring)
    _start("ceph-mon", "-c", str(conf), "-i", "a")
    _wait("monitor", MON_STARTUP_TIMEOUT_SECONDS, lambda: _ceph_ok(conf, "-s"))
    _run("ceph", "-c", str(conf), "osd", "create")
    _run("ceph-osd", "-c", str(conf), "-i", "0", "--mkfs")
    _start("ceph-osd", "-c", str(conf), "-i", "0")
    _wait("OSD", OSD_STARTUP_TIMEOUT_SECONDS, lambda: "1 up" in _ceph_out(conf, "osd", "stat"))
    _start("radosgw", "-c", str(conf), "-n", "client.rgw.a")
    _wait("radosgw", RGW_STARTUP_TIMEOUT_SECONDS, _answers_http)
    _run("radosgw-admin", "-c", str(conf), "user", "create", "--uid=batchcrop-test",
         "--display-name=batchcrop test", f"--access-key={ACCESS_KEY}",
         f"--secret={SECRET_KEY}")  # fmt: skip
    # Last: other processes treat the gateway as usable only once this marker exists.
    (ROOT / "ready").touch()


def _conf_value(conf: Path, name: str) -> str:
    for line in conf.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    raise RGWUnavailableError(f"{name} missing from {conf}")


def _run(*args: str) -> str:
    try:
        done = subprocess.run(
            list(args), check=True, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS
        )
    except subprocess.CalledProcessError as exc:
        raise RGWUnavailableError(f"{args[0]} failed: {exc.stderr.strip()[-500:]}") from exc
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise RGWUnavailableError(f"{args[0]} failed: {exc}") from exc
    return done.stdout


def _start(*args: str) -> None:
    """Launch a daemon that forks itself into the background; its output goes to its log file."""
    try:
        # No pipes: a daemon inheriting our pipe would keep `run` waiting for EOF forever.
        subprocess.run(
            list(args), check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_SECONDS,
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError) as exc:
        raise RGWUnavailableError(f"{args[0]} did not start: {exc}; see {ROOT}/log") from exc


def _ceph_out(conf: Path, *args: str) -> str:
    try:
        return _run("ceph", "-c", str(conf), "--connect-timeout", "5", *args)
    except RGWUnavailableError:
        return ""


def _ceph_ok(conf: Path, *args: str) -> bool:
    return bool(_ceph_out(conf, *args))


def _wait(what: str, timeout_seconds: float, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not done():
        if time.monotonic() > deadline:
            raise RGWUnavailableError(
                f"{what} did not start in {timeout_seconds:.0f} s; see {ROOT}/log"
            )
        time.sleep(POLL_INTERVAL_SECONDS)


def _runs_our_config(pid: int) -> bool:
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(ROOT / "ceph.conf").encode() in command_line.split(b"\0")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        return


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    if command == "up":
        endpoint = ensure()
        print(f"{endpoint.url} access_key={endpoint.access_key} secret_key={endpoint.secret_key}")
    elif command == "down":
        stop()
    else:
        sys.exit("usage: python -m tests.services.rgw up|down")

"""A throwaway single-node Ceph RADOS Gateway (a real S3 server) on loopback for tests and benches.

`python -m tests.services.rgw up` starts (or reuses) this checkout's monitor, memstore OSD (objects
in RAM) and radosgw in `.tmp/rgw`, installing Debian's `radosgw ceph-mon ceph-osd` with apt-get
when missing, and prints the endpoint; `status` prints it or says it is stopped; `down` stops it.
`ensure()` is safe to call from several pytest-xdist workers at once: the first takes a file lock
and bootstraps, the others wait on the lock and then reuse the running gateway. Every wait is
bounded.

Each checkout gets ports of its own (`tests/services/ports.py`), recorded in its `ceph.conf`: the
previous run's when still free, else free ones; `BATCHCROP_TEST_RGW_PORT` and
`BATCHCROP_TEST_RGW_MON_PORT` pin them. A gateway counts as running only when this folder's
radosgw pid file names a live process started with this folder's config, never because a port
answers, so a second checkout never uses this one's gateway.
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

from tests.services import apt, runs
from tests.services.ports import LOOPBACK, PortTakenError, env_port, pick_port

RGW_PORT_ENV = "BATCHCROP_TEST_RGW_PORT"
MON_PORT_ENV = "BATCHCROP_TEST_RGW_MON_PORT"
ROOT = Path(__file__).resolve().parents[2] / ".tmp" / "rgw"
ACCESS_KEY = "batchcroptestaccess"
SECRET_KEY = "batchcroptestsecretkey0123456789"
MEMSTORE_DEVICE_BYTES = 2 * 1024**3
APT_PACKAGES = ("radosgw", "ceph-mon", "ceph-osd")
PROGRAMS = ("radosgw", "ceph-mon", "ceph-osd", "monmaptool")
LOCK_TIMEOUT_SECONDS = 400.0
COMMAND_TIMEOUT_SECONDS = 30.0
MON_STARTUP_TIMEOUT_SECONDS = 30.0
OSD_STARTUP_TIMEOUT_SECONDS = 60.0
RGW_STARTUP_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 10.0
POLL_INTERVAL_SECONDS = 0.25
GATEWAY_PID_FILE = "client.rgw.a.pid"


class RGWUnavailableError(RuntimeError):
    """The gateway could not be installed or started on this machine."""


@dataclass(frozen=True)
class RGWEndpoint:
    """Where the gateway answers and the S3 credentials of its test user."""

    url: str
    access_key: str
    secret_key: str


@dataclass(frozen=True)
class Ports:
    """The gateway's two listening ports on 127.0.0.1 (the OSD takes Ceph's 6800+ range)."""

    rgw: int
    mon: int


def endpoint_for(port: int) -> RGWEndpoint:
    """The endpoint of a test gateway on 127.0.0.1:`port`."""
    return RGWEndpoint(f"http://{LOOPBACK}:{port}", ACCESS_KEY, SECRET_KEY)


class Gateway:
    """The monitor, OSD and radosgw whose files live in `root`, on loopback.

    `rgw_port` / `mon_port` pin the ports; None lets `ensure()` pick them (recorded in
    `root/ceph.conf`, which every daemon is started with).
    """

    def __init__(self, root: Path, rgw_port: int | None = None, mon_port: int | None = None):
        self.root = root
        self.conf = root / "ceph.conf"
        self.pinned = (rgw_port, mon_port)

    def running_ports(self) -> Ports | None:
        """The ports of this gateway when its bootstrap completed (test user included), its
        radosgw process still runs with this folder's config and answers HTTP; else None."""
        ports = self.recorded_ports()
        if ports is None or not (self.root / "ready").exists():
            return None
        try:
            pid = int((self.root / "run" / GATEWAY_PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        if not self._runs_our_config(pid) or not _answers_http(endpoint_for(ports.rgw).url):
            return None
        return ports

    def recorded_ports(self) -> Ports | None:
        """The ports named by this folder's config (running or not), None without one."""
        try:
            mon_host = _conf_value(self.conf, "mon host")  # v2:127.0.0.1:PORT
            frontends = _conf_value(self.conf, "rgw frontends")  # beast endpoint=127.0.0.1:PORT
            return Ports(rgw=int(frontends.rsplit(":", 1)[1]), mon=int(mon_host.rsplit(":", 1)[1]))
        except (OSError, ValueError, IndexError, RGWUnavailableError):
            return None

    def ensure(self) -> RGWEndpoint:
        """Start the gateway unless it already runs; return its endpoint."""
        ports = self.running_ports()
        if ports is None:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.root.parent / f"{self.root.name}.lock"):
                ports = self.running_ports()  # another worker may have bootstrapped meanwhile
                if ports is None:
                    try:
                        apt.install_missing(PROGRAMS, APT_PACKAGES)
                    except apt.PackagesUnavailableError as exc:
                        raise RGWUnavailableError(str(exc)) from exc
                    self.stop()  # the remains of a cut-off bootstrap, freeing their ports
                    ports = self.pick_ports()
                    self._bootstrap(ports)
        for env, pinned, actual in zip(
            (RGW_PORT_ENV, MON_PORT_ENV), self.pinned, (ports.rgw, ports.mon), strict=True
        ):
            if pinned is not None and pinned != actual:
                raise RGWUnavailableError(
                    f"this checkout's gateway ({self.root}) runs on port {actual}, not on "
                    f"{env}={pinned}: stop it first (`python -m tests.services.rgw down`)"
                )
        return endpoint_for(ports.rgw)

    def stop(self) -> bool:
        """Stop the daemons named by the run folder's pid files (SIGTERM, then SIGKILL); return
        whether any was running.

        A pid is signalled only while its command line still names our config file, so a stale
        pid file (after a reboot) can never hit an unrelated process that reused the number, nor
        another checkout's daemon.
        """
        run = self.root / "run"
        pids = []
        for pid_file in sorted(run.glob("*.pid")) if run.exists() else []:
            try:
                pid = int(pid_file.read_text().strip())
            except ValueError:
                continue
            if self._runs_our_config(pid):
                pids.append(pid)
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_SECONDS)
        for pid in pids:
            if self._runs_our_config(pid):
                _signal(pid, signal.SIGKILL)
        (self.root / "ready").unlink(missing_ok=True)
        return bool(pids)

    def pick_ports(self) -> Ports:
        """Ports for a new bootstrap: the pinned ones (refused when held by anyone), else the
        recorded ones still free, else fresh free ones (never one port for both daemons)."""
        recorded = self.recorded_ports()
        try:
            rgw = pick_port(self.pinned[0], recorded.rgw if recorded else None, (), RGW_PORT_ENV)
            mon = pick_port(
                self.pinned[1], recorded.mon if recorded else None, (rgw,), MON_PORT_ENV
            )
        except PortTakenError as exc:
            raise RGWUnavailableError(str(exc)) from exc
        return Ports(rgw=rgw, mon=mon)

    def _config(self, fsid: str, ports: Ports) -> str:
        root = self.root
        return f"""[global]
fsid = {fsid}
mon initial members = a
mon host = v2:{LOOPBACK}:{ports.mon}
public addr = {LOOPBACK}
cluster addr = {LOOPBACK}
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = {root}/keyring
run dir = {root}/run
pid file = {root}/run/$name.pid
admin socket = {root}/run/$name.asok
log file = {root}/log/$name.log
mon data = {root}/mon/$name
osd data = {root}/osd/$name
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
rgw frontends = beast endpoint={LOOPBACK}:{ports.rgw}
rgw data = {root}/rgw
"""

    def _bootstrap(self, ports: Ports) -> None:
        """Create a fresh cluster: keys, monitor, OSD, gateway, test user (about 15 s)."""
        root, conf = self.root, self.conf
        shutil.rmtree(root, ignore_errors=True)
        for folder in ("run", "log", "mon/mon.a", "osd/osd.0", "rgw"):
            (root / folder).mkdir(parents=True)
        runs.mark_started(root)  # before any daemon starts, so a cut-off bootstrap is claimed
        conf.write_text(self._config(str(uuid.uuid4()), ports))
        keyring = str(root / "keyring")
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
        monmap = str(root / "monmap")
        _run("monmaptool", "--create", "--addv", "a", f"[v2:{LOOPBACK}:{ports.mon}]",
             "--fsid", fsid, monmap)  # fmt: skip
        _run("ceph-mon", "-c", str(conf), "--mkfs", "-i", "a", "--monmap", monmap,
             "--keyring", keyring)  # fmt: skip
        self._start("ceph-mon", "-c", str(conf), "-i", "a")
        self._wait("monitor", MON_STARTUP_TIMEOUT_SECONDS, lambda: _ceph_ok(conf, "-s"))
        _run("ceph", "-c", str(conf), "osd", "create")
        _run("ceph-osd", "-c", str(conf), "-i", "0", "--mkfs")
        self._start("ceph-osd", "-c", str(conf), "-i", "0")
        self._wait("OSD", OSD_STARTUP_TIMEOUT_SECONDS,
                   lambda: "1 up" in _ceph_out(conf, "osd", "stat"))  # fmt: skip
        self._start("radosgw", "-c", str(conf), "-n", "client.rgw.a")
        url = endpoint_for(ports.rgw).url
        self._wait("radosgw", RGW_STARTUP_TIMEOUT_SECONDS, lambda: _answers_http(url))
        _run("radosgw-admin", "-c", str(conf), "user", "create", "--uid=batchcrop-test",
             "--display-name=batchcrop test", f"--access-key={ACCESS_KEY}",
             f"--secret={SECRET_KEY}")  # fmt: skip
        # Last: other processes treat the gateway as usable only once this marker exists.
        (root / "ready").touch()

    def _start(self, *args: str) -> None:
        """Launch a daemon that forks itself into the background; its output goes to its log."""
        try:
            # No pipes: a daemon inheriting our pipe would keep `run` waiting for EOF forever.
            subprocess.run(
                list(args), check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_SECONDS,
            )  # fmt: skip
        except (subprocess.SubprocessError, OSError) as exc:
            raise RGWUnavailableError(
                f"{args[0]} did not start: {exc}; see {self.root}/log"
            ) from exc

    def _wait(self, what: str, timeout_seconds: float, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout_seconds
        while not done():
            if time.monotonic() > deadline:
                raise RGWUnavailableError(
                    f"{what} did not start in {timeout_seconds:.0f} s; see {self.root}/log"
                )
            time.sleep(POLL_INTERVAL_SECONDS)

    def _runs_our_config(self, pid: int) -> bool:
        try:
            command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self.conf).encode() in command_line.split(b"\0")


def _answers_http(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
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


def _ceph_out(conf: Path, *args: str) -> str:
    try:
        return _run("ceph", "-c", str(conf), "--connect-timeout", "5", *args)
    except RGWUnavailableError:
        return ""


def _ceph_ok(conf: Path, *args: str) -> bool:
    return bool(_ceph_out(conf, *args))


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


def default_gateway() -> Gateway:
    """This checkout's gateway (`.tmp/rgw`), on the ports the environment pins."""
    return Gateway(ROOT, env_port(RGW_PORT_ENV), env_port(MON_PORT_ENV))


def ensure() -> RGWEndpoint:
    """Start this checkout's gateway unless it already runs; return its endpoint."""
    return default_gateway().ensure()


def stop() -> bool:
    """Stop this checkout's gateway; return whether any of its daemons was running."""
    return default_gateway().stop()


def main(argv: list[str]) -> int:
    """`up`, `status` or `down`; each says where the gateway is."""
    command = argv[0] if argv else "up"
    try:
        gateway = default_gateway()
        endpoint = gateway.ensure() if command == "up" else None
    except (RGWUnavailableError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if endpoint is not None:
        print(f"{endpoint.url} access_key={endpoint.access_key} secret_key={endpoint.secret_key}")
        ports = gateway.recorded_ports()
        mon = ports.mon if ports else "?"
        print(f"Ceph RGW of {gateway.root} (monitor on port {mon})", file=sys.stderr)
    elif command == "status":
        ports = gateway.running_ports()
        if ports is None:
            print(f"Ceph RGW of {gateway.root} is not running")
            return 1
        print(f"{endpoint_for(ports.rgw).url} (monitor on port {ports.mon})")
    elif command == "down":
        recorded = gateway.recorded_ports()
        where = f"on port {recorded.rgw}" if recorded is not None else ""
        if not gateway.stop():
            where = "(was not running)"
        print(f"stopped Ceph RGW of {gateway.root} {where}".rstrip())
    else:
        print("usage: python -m tests.services.rgw up|status|down", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

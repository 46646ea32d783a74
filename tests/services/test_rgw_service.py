"""This checkout's Ceph RGW: ports of its own, never another checkout's gateway, and `down`
stops only its own daemons (real processes and sockets standing in for the Ceph daemons, whose
bootstrap takes a quarter of a minute and the live gateway tests cover)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import rgw, runs
from tests.services.checkouts import Checkout, fake_daemon

DEATH_TIMEOUT_SECONDS = 15.0


def _listener() -> socket.socket:
    """A socket listening on a free loopback port (another checkout's daemon holding it)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _lay_out(root: Path, ports: rgw.Ports) -> Path:
    """A gateway folder as a finished bootstrap leaves it: config, run folder, ready marker."""
    (root / "run").mkdir(parents=True)
    conf = root / "ceph.conf"
    conf.write_text(
        f"[global]\nmon host = v2:127.0.0.1:{ports.mon}\n\n"
        f"[client.rgw.a]\nrgw frontends = beast endpoint=127.0.0.1:{ports.rgw}\n"
    )
    (root / "ready").touch()
    return conf


def _pid_file(root: Path, name: str, process: subprocess.Popen[bytes]) -> None:
    (root / "run" / name).write_text(f"{process.pid}\n")


def _dead(process: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + DEATH_TIMEOUT_SECONDS
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process.poll() is not None


@pytest.fixture
def daemons() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Stand-in daemons started by a test; killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()


@pytest.fixture
def http_server() -> Iterator[int]:
    """An HTTP server on a free loopback port (another checkout's gateway answering there)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_two_checkouts_pick_different_ports(tmp_path: Path) -> None:
    """While one checkout's gateway holds its two ports, another checkout picks two others."""
    theirs = rgw.Gateway(tmp_path / "a" / "rgw").pick_ports()
    held = []
    for port in (theirs.rgw, theirs.mon):
        sock = socket.socket()
        sock.bind(("127.0.0.1", port))
        sock.listen()
        held.append(sock)
    try:
        mine = rgw.Gateway(tmp_path / "b" / "rgw").pick_ports()
    finally:
        for sock in held:
            sock.close()
    assert set() == {mine.rgw, mine.mon} & {theirs.rgw, theirs.mon}
    assert mine.rgw != mine.mon


def test_a_recorded_port_held_elsewhere_is_given_up_and_a_free_one_kept(tmp_path: Path) -> None:
    """A new bootstrap keeps a recorded port that is still free and replaces one that another
    process now holds."""
    root = tmp_path / "rgw"
    taken = _listener()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = int(probe.getsockname()[1])
    with taken:
        _lay_out(root, rgw.Ports(rgw=int(taken.getsockname()[1]), mon=free))
        picked = rgw.Gateway(root).pick_ports()
        assert int(taken.getsockname()[1]) != picked.rgw
    assert free == picked.mon


def test_a_pinned_port_held_elsewhere_is_refused(tmp_path: Path) -> None:
    """`BATCHCROP_TEST_RGW_PORT` naming a port another process holds is refused, by name."""
    with _listener() as taken:
        port = int(taken.getsockname()[1])
        with pytest.raises(rgw.RGWUnavailableError, match=f"port {port} \\(BATCHCROP_TEST_RGW_"):
            rgw.Gateway(tmp_path / "rgw", rgw_port=port).pick_ports()


def test_a_port_answering_for_another_checkout_is_not_this_gateway(
    tmp_path: Path, http_server: int, daemons: list[subprocess.Popen[bytes]]
) -> None:
    """A gateway whose recorded port answers HTTP counts as running only while its radosgw pid
    file names a live process started with its own config, not another checkout's."""
    ports = rgw.Ports(rgw=http_server, mon=http_server + 1)
    mine = tmp_path / "mine" / "rgw"
    conf = _lay_out(mine, ports)
    theirs = _lay_out(tmp_path / "theirs" / "rgw", ports)
    daemons.append(fake_daemon(theirs))
    _pid_file(mine, rgw.GATEWAY_PID_FILE, daemons[-1])
    assert rgw.Gateway(mine).running_ports() is None
    daemons.append(fake_daemon(conf))
    _pid_file(mine, rgw.GATEWAY_PID_FILE, daemons[-1])
    assert ports == rgw.Gateway(mine).running_ports()


def test_stop_signals_only_daemons_started_with_its_config(
    tmp_path: Path, daemons: list[subprocess.Popen[bytes]]
) -> None:
    """`stop` ends the daemons started with this folder's config and spares another checkout's
    daemon, even when a (stale) pid file here names it."""
    ports = rgw.Ports(rgw=1, mon=2)
    mine, theirs = tmp_path / "mine" / "rgw", tmp_path / "theirs" / "rgw"
    own, foreign = fake_daemon(_lay_out(mine, ports)), fake_daemon(_lay_out(theirs, ports))
    daemons.extend([own, foreign])
    _pid_file(mine, "osd.0.pid", own)
    _pid_file(mine, "client.rgw.a.pid", foreign)
    assert rgw.Gateway(mine).stop()
    assert _dead(own)
    assert foreign.poll() is None
    assert not (mine / "ready").exists()


def test_down_run_stops_only_the_gateway_that_run_started(
    daemons: list[subprocess.Popen[bytes]],
) -> None:
    """`python -m tests.services down --run ID` stops a gateway run ID started and keeps one
    started by another run."""
    checkout = Checkout()
    try:
        root = checkout.tmp / "rgw"
        daemon = fake_daemon(_lay_out(root, rgw.Ports(rgw=1, mon=2)))
        daemons.append(daemon)
        _pid_file(root, rgw.GATEWAY_PID_FILE, daemon)
        (root / runs.MARKER_NAME).write_text("run-a\n")
        assert "rgw" not in checkout.ok("tests.services", "down", "--run", "run-b")
        assert daemon.poll() is None
        assert "rgw: stopped" in checkout.ok("tests.services", "down", "--run", "run-a")
        assert _dead(daemon)
    finally:
        checkout.remove()


def test_down_run_also_stops_what_an_interrupted_test_left_in_a_scratch_checkout(
    daemons: list[subprocess.Popen[bytes]],
) -> None:
    """`down --run ID` also stops a gateway that run ID started in one of the checkout's scratch
    copies (`.tmp/checkouts/`), which a test interrupted before its clean-up leaves behind."""
    checkout = Checkout()
    try:
        root = checkout.tmp / runs.SCRATCH_CHECKOUTS / "left" / ".tmp" / "rgw"
        daemon = fake_daemon(_lay_out(root, rgw.Ports(rgw=1, mon=2)))
        daemons.append(daemon)
        _pid_file(root, rgw.GATEWAY_PID_FILE, daemon)
        (root / runs.MARKER_NAME).write_text("run-a\n")
        assert checkout.ok("tests.services", "down", "--run", "run-b") == ""
        assert daemon.poll() is None
        assert f"rgw: stopped ({root}, left by a test)" == checkout.ok(
            "tests.services", "down", "--run", "run-a"
        )
        assert _dead(daemon)
    finally:
        checkout.remove()

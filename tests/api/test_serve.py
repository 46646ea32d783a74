"""`batchcrop serve` through the real CLI in a subprocess: refusing to expose an open API,
serving on loopback, exiting 0 on SIGTERM/SIGINT after a graceful stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import TOKEN, batch_body

pytestmark = pytest.mark.slow
STARTUP_SECONDS = 30.0
EXIT_SECONDS = 15.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(database_url: str, source_root: Path, token: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "BATCHCROP_DATABASE_URL": database_url,
        "BATCHCROP_SOURCE_ROOTS": str(source_root),
        "BATCHCROP_REAPER_INTERVAL_SECONDS": "0.5",
    }
    env.pop("BATCHCROP_API_TOKEN", None)
    if token:
        env["BATCHCROP_API_TOKEN"] = token
    return env


def _serve(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "batchcrop", "serve", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Spawned servers, killed at teardown if a test left one running."""
    spawned: list[subprocess.Popen[str]] = []
    yield spawned
    for process in spawned:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=EXIT_SECONDS)


def _server_log(process: subprocess.Popen[str]) -> str:
    """Stop the server and return what it wrote on stderr (for failure messages)."""
    process.kill()
    return process.communicate(timeout=EXIT_SECONDS)[1]


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("batchcrop serve did not become healthy")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "api.example.com"])
def test_refuses_non_loopback_without_token(
    database_url: str, source_root: Path, host: str
) -> None:
    """A non-loopback host without BATCHCROP_API_TOKEN: exit 2 and one line on stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "batchcrop", "serve", "--host", host, "--port", str(_free_port())],
        env=_env(database_url, source_root, None),
        capture_output=True,
        text=True,
        timeout=STARTUP_SECONDS,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "BATCHCROP_API_TOKEN" in lines[0]


@pytest.mark.parametrize(
    "scenario",
    [("127.0.0.1", None, signal.SIGTERM), ("0.0.0.0", TOKEN, signal.SIGINT)],
    ids=["loopback-open-sigterm", "all-interfaces-token-sigint"],
)
def test_serves_and_stops_gracefully(
    database_url: str,
    source_root: Path,
    sources: list[str],
    processes: list[subprocess.Popen[str]],
    scenario: tuple[str, str | None, signal.Signals],
) -> None:
    """The real server answers the API (with the token when set) and exits 0 on a signal."""
    host, token, stop = scenario
    port = _free_port()
    # --migrate: a fresh database, and the opt-in of a one-machine deployment.
    process = _serve(
        _env(database_url, source_root, token), "--migrate", "--host", host, "--port", str(port)
    )
    processes.append(process)
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(url, process)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if token:
        assert httpx.get(url + "/v1/batches").status_code == 401
    created = httpx.post(url + "/v1/batches", json=batch_body(sources), headers=headers)
    assert created.status_code == 201, (created.text, _server_log(process))
    status = httpx.get(url + created.headers["location"], headers=headers)
    assert status.json()["total"] == len(sources), _server_log(process)
    process.send_signal(stop)
    _, stderr = process.communicate(timeout=EXIT_SECONDS)
    assert process.returncode == 0, stderr
    assert TOKEN not in stderr


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_port_in_use_is_a_configuration_error(database_url: str, source_root: Path) -> None:
    """A port another process holds: exit 2 rather than a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "batchcrop", "serve", "--migrate", "--port", str(port)],
            env=_env(database_url, source_root, None),
            capture_output=True,
            text=True,
            timeout=STARTUP_SECONDS,
            check=False,
        )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr

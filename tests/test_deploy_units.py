"""The systemd units in deploy/systemd (docs/operations.md, "Running under systemd"): their
contents match batchcrop's shutdown and migration contract, and `systemd-analyze verify`
accepts them. The verify test skips only when `systemd-analyze` is absent and CI is unset."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from batchcrop.api.server import SHUTDOWN_GRACE_SECONDS as SERVE_GRACE_SECONDS
from batchcrop.cli.commands import GIVE_BACK_WAIT_SECONDS
from batchcrop.settings import SHUTDOWN_GRACE_SECONDS

UNITS = Path(__file__).resolve().parents[1] / "deploy" / "systemd"
VENV_BATCHCROP = "/opt/batchcrop/.venv/bin/batchcrop"
WORKER = "batchcrop-worker@.service"
SERVE = "batchcrop-serve.service"
MIGRATE = "batchcrop-migrate.service"


def _service(name: str) -> dict[str, list[str]]:
    """The [Service] section of a unit: each key's values in order (keys may repeat)."""
    section, values = "", dict[str, list[str]]()
    for raw in (UNITS / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        if section == "[Service]":
            values.setdefault(key, []).append(value)
    return values


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", text)
    assert match, text
    return float(match[1]) * (60 if match[2] == "min" else 1)


@pytest.mark.parametrize("name", [WORKER, SERVE])
def test_long_running_units_stop_cleanly_and_do_not_migrate(name: str) -> None:
    """SIGTERM, a stop timeout longer than the process's own grace (for a worker: the grace
    plus the give-back wait), restart on failure, a dedicated user, the environment file, the
    venv's `batchcrop`, never `--migrate`, and the hardening that keeps the state dir writable."""
    service = _service(name)
    (exec_start,) = service["ExecStart"]
    command = exec_start.split()
    assert command[0] == VENV_BATCHCROP
    assert "--migrate" not in command
    assert service["KillSignal"] == ["SIGTERM"]
    assert service["Restart"] == ["on-failure"]
    assert service["User"] == ["batchcrop"]
    assert service["EnvironmentFile"] == ["/etc/batchcrop/batchcrop.env"]
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "StateDirectory": "batchcrop",
        "PrivateTmp": "yes",
    }.items():
        assert service[key] == [value], key
    stop_timeout = _seconds(service["TimeoutStopSec"][0])
    if name == WORKER:
        assert command[1] == "worker"
        grace = float(command[command.index("--shutdown-grace-seconds") + 1])
        assert grace == SHUTDOWN_GRACE_SECONDS
        assert stop_timeout > grace + GIVE_BACK_WAIT_SECONDS
    else:
        assert command[1] == "serve"
        assert stop_timeout > SERVE_GRACE_SECONDS


def test_the_migrate_unit_is_the_deploy_step() -> None:
    """`batchcrop-migrate.service` is a oneshot `batchcrop db upgrade` with the same settings."""
    service = _service(MIGRATE)
    assert service["Type"] == ["oneshot"]
    assert service["ExecStart"] == [f"{VENV_BATCHCROP} db upgrade"]
    assert service["EnvironmentFile"] == ["/etc/batchcrop/batchcrop.env"]


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    """`systemd-analyze verify` with no complaint at all (it exits 0 on unknown keys, so its
    output must be empty too). The venv path is pointed at this test run's `batchcrop`:
    verify checks that ExecStart is executable."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is required under CI (Debian package: systemd)")
        pytest.skip("systemd-analyze not installed")
    batchcrop = Path(sys.executable).with_name("batchcrop")
    assert batchcrop.exists(), batchcrop
    paths = []
    for unit in sorted(UNITS.glob("*.service")):
        text = unit.read_text().replace(VENV_BATCHCROP, str(batchcrop))
        # A template is verified as an instance of it.
        target = tmp_path / unit.name.replace("@.service", "@1.service")
        target.write_text(text)
        paths.append(str(target))
    assert len(paths) == 3
    result = subprocess.run(
        [analyze, "verify", *paths],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, ""), result.stderr

"""The container files in deploy/container (docs/operations.md, "Containers"): the compose file,
the Containerfile and the build script agree with each other and with batchcrop's CLI, settings
and shutdown contract. Nothing here needs podman: CI checks the files, a host with podman builds
and runs them (`deploy/container/build.sh`)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from batchcrop.api.server import SHUTDOWN_GRACE_SECONDS as SERVE_GRACE_SECONDS
from batchcrop.cli.commands import GIVE_BACK_WAIT_SECONDS
from batchcrop.cli.main import build_parser
from batchcrop.settings import ENV_PREFIX, SHUTDOWN_GRACE_SECONDS, Settings

HERE = Path(__file__).resolve().parents[1] / "deploy" / "container"
COMPOSE = HERE / "compose.yaml"
CONTAINERFILE = HERE / "Containerfile"
BUILD = HERE / "build.sh"
WORKERS = ("worker-1", "worker-2")
GLOBAL_ENV = {"LOG_LEVEL", "LOG_FORMAT"}
"""`BATCHCROP_` variables read by the CLI itself rather than the settings dataclass."""


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", text)
    assert match, text
    return float(match[1]) * (60 if match[2] == "m" else 1)


def _stages() -> dict[str, list[tuple[str, str]]]:
    """Each build stage of the Containerfile: its instructions as (keyword, arguments), with
    continuation lines joined and comments dropped."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    logical = ""
    for raw in CONTAINERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        logical += line.removesuffix("\\").strip() + " "
        if line.endswith("\\"):
            continue
        keyword, _, arguments = logical.strip().partition(" ")
        logical = ""
        if keyword == "FROM":
            current = []
            stages[arguments.split(" AS ")[-1]] = current
        current.append((keyword, arguments.strip()))
    return stages


def _instruction(stage: str, keyword: str) -> list[str]:
    return [arguments for key, arguments in _stages()[stage] if key == keyword]


def test_the_compose_file_has_the_deployment_and_only_batchcrop_commands() -> None:
    """PostgreSQL, S3, the migration step, two workers and serve; every batchcrop service runs
    a command the CLI accepts, and the migration step is `batchcrop db upgrade`."""
    services = _services()
    assert set(services) == {"postgres", "s3", "migrate", *WORKERS, "serve"}
    parser = build_parser()
    for name, service in services.items():
        if service["image"] != "localhost/batchcrop:latest" or name == "migrate":
            continue
        assert "entrypoint" not in service, name
        args = parser.parse_args(service["command"])
        assert args.command == service["command"][0], name
    migrate = services["migrate"]
    assert migrate["entrypoint"] == ["batchcrop-migrate"]
    assert migrate["restart"] == "no"
    # Run on its own (`--profile deploy run --rm migrate`), never by `up` beside the workers.
    assert migrate["profiles"] == ["deploy"]
    script = (HERE / "migrate.sh").read_text().strip().splitlines()
    assert script[-1] == "exec batchcrop db upgrade"
    assert parser.parse_args(["db", "upgrade"]).command == "db"


def test_workers_and_serve_stop_cleanly_and_never_migrate() -> None:
    """SIGTERM and a stop grace period longer than the process's own grace (a worker: the
    grace plus the give-back wait); no `--migrate` and no dependency on the one-shot migration
    step (podman keeps dependencies running); restarted after a crash."""
    services = _services()
    for name in (*WORKERS, "serve"):
        service = services[name]
        command = service["command"]
        assert "--migrate" not in command, name
        assert service["stop_signal"] == "SIGTERM", name
        assert service["restart"] == "on-failure", name
        assert service["depends_on"]["postgres"] == {"condition": "service_started"}, name
        assert "migrate" not in service["depends_on"], name
        stop_grace = _seconds(service["stop_grace_period"])
        if name == "serve":
            assert stop_grace > SERVE_GRACE_SECONDS
        else:
            assert command[0] == "worker"
            grace = float(command[command.index("--shutdown-grace-seconds") + 1])
            assert grace == SHUTDOWN_GRACE_SECONDS
            assert stop_grace > grace + GIVE_BACK_WAIT_SECONDS
            assert service["healthcheck"] == {"disable": True}


def test_serve_listens_beyond_loopback_only_with_a_token_and_is_health_checked() -> None:
    """`serve` on 0.0.0.0 needs BATCHCROP_API_TOKEN (docs/api.md, "Serving"); the image's
    HEALTHCHECK asks `/healthz` (no token needed) on the port serve listens on, which the
    compose file publishes on loopback only."""
    serve = _services()["serve"]
    command = serve["command"]
    port = command[command.index("--port") + 1]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert serve["environment"]["BATCHCROP_API_TOKEN"].startswith("${BATCHCROP_API_TOKEN:?")
    (published,) = serve["ports"]
    assert published.startswith("127.0.0.1:")
    assert published.endswith(f":{port}")
    (healthcheck,) = _instruction("batchcrop", "HEALTHCHECK")
    assert f"http://127.0.0.1:{port}/healthz" in healthcheck
    assert _instruction("batchcrop", "EXPOSE") == [port]


def test_every_batchcrop_variable_in_the_compose_file_is_a_setting() -> None:
    """A misspelt variable would be silently ignored: each `BATCHCROP_X` names a settings
    field (or the log flags), and the sources are mounted where the source roots say."""
    names = {f.name.upper() for f in fields(Settings)} | GLOBAL_ENV
    for name, service in _services().items():
        environment = service.get("environment", {})
        for variable in environment:
            if variable.startswith(ENV_PREFIX):
                assert variable.removeprefix(ENV_PREFIX) in names, (name, variable)
        if "BATCHCROP_SOURCE_ROOTS" in environment:
            mounts = [volume.split(":")[1] for volume in service["volumes"]]
            assert environment["BATCHCROP_SOURCE_ROOTS"] in mounts, name


def test_the_application_image_runs_batchcrop_as_a_user_and_stops_on_sigterm() -> None:
    """The batchcrop stage: entrypoint `batchcrop`, a non-root user, SIGTERM as stop signal,
    installed offline from the wheels build.sh made."""
    assert _instruction("batchcrop", "ENTRYPOINT") == ['["batchcrop"]']
    assert _instruction("batchcrop", "USER") == ["batchcrop"]
    assert _instruction("batchcrop", "STOPSIGNAL") == ["SIGTERM"]
    (install,) = _instruction("batchcrop", "RUN")
    assert "--no-index" in install
    assert "useradd --system" in install


def test_the_build_script_builds_every_image_the_compose_file_uses() -> None:
    """Every stage the compose file's images come from is a build target of build.sh, and every
    file a stage copies is one build.sh puts into the build context."""
    script = BUILD.read_text()
    targets = re.search(r"^for target in (.+); do$", script, re.MULTILINE)
    assert targets
    built = {
        "localhost/batchcrop:latest" if t == "batchcrop" else f"localhost/batchcrop-{t}:latest"
        for t in targets[1].split()
    }
    assert {service["image"] for service in _services().values()} == built
    stages = _stages()
    assert set(targets[1].split()) <= set(stages)
    for stage in stages:
        for source in (a.split()[0] for a in _instruction(stage, "COPY")):
            if not source.startswith("wheels/"):
                assert (HERE / source).is_file(), source
                assert f'"$here/{source}"' in script, source


@pytest.mark.parametrize("script", ["build.sh", "migrate.sh", "postgres-start.sh"])
def test_the_shell_scripts_parse(script: str) -> None:
    """`sh -n`: POSIX shell syntax (the images run dash)."""
    subprocess.run(["sh", "-n", str(HERE / script)], check=True, timeout=30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_demonstration_s3_server_serves_its_bucket_and_stops_on_sigterm() -> None:
    """The `s3` image's program: the bucket exists once the server answers; SIGTERM ends it
    with exit 0."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(HERE / "s3-demo-server.py")],
        env={**os.environ, "S3_PORT": str(port), "S3_BUCKET": "crops-test"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        # moto announces its thread first; an exit before our line ends the loop at EOF.
        for line in server.stdout:
            if "bucket crops-test" in line:
                break
        else:
            pytest.fail(f"the server exited with {server.wait(timeout=10)} before serving")
        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="demo",
            aws_secret_access_key="demo",
        )
        assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["crops-test"]
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()

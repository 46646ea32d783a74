"""Settings come from flags over environment over defaults, and bad values are named."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from batchcrop.cli.main import main
from batchcrop.settings import (
    LEASE_SECONDS,
    RENAMED_ENV,
    Settings,
    SettingsError,
    parse_duration,
)


def test_defaults_are_the_documented_ones() -> None:
    """With nothing set, the embedded default: SQLite file, local folder, 900 s leases."""
    settings = Settings.load(env={})
    assert (settings.database_url, settings.store, settings.lease_seconds) == (
        "sqlite:///batchcrop.db",
        "file://./derivatives",
        LEASE_SECONDS,
    )
    assert settings.source_roots == ()
    assert settings.api_token is None


def test_a_flag_wins_over_its_variable_which_wins_over_the_default() -> None:
    """BATCHCROP_LEASE_SECONDS is read, and --lease-seconds overrides it."""
    env = {"BATCHCROP_LEASE_SECONDS": "60", "BATCHCROP_DATABASE_URL": "sqlite:///x.db"}
    assert Settings.load(env=env).lease_seconds == 60.0
    settings = Settings.load({"lease_seconds": 5.0, "database_url": None}, env=env)
    assert (settings.lease_seconds, settings.database_url) == (5.0, "sqlite:///x.db")


def test_the_idle_and_fallback_polls_are_configurable() -> None:
    """BATCHCROP_IDLE_POLL_SECONDS and BATCHCROP_FALLBACK_POLL_SECONDS are read, 1 s and 30 s
    by default, and their flags win."""
    defaults = Settings.load(env={})
    assert (defaults.idle_poll_seconds, defaults.fallback_poll_seconds) == (1.0, 30.0)
    env = {"BATCHCROP_IDLE_POLL_SECONDS": "2.5", "BATCHCROP_FALLBACK_POLL_SECONDS": "120"}
    assert (
        Settings.load(env=env).idle_poll_seconds,
        Settings.load(env=env).fallback_poll_seconds,
    ) == (
        2.5,
        120.0,
    )
    assert Settings.load({"fallback_poll_seconds": "60"}, env=env).fallback_poll_seconds == 60.0


def test_source_roots_split_on_the_path_separator() -> None:
    """BATCHCROP_SOURCE_ROOTS holds folders and s3:// entries separated by os.pathsep."""
    env = {"BATCHCROP_SOURCE_ROOTS": "/srv/photos:s3://bucket/incoming:"}
    assert Settings.load(env=env).source_roots == ("/srv/photos", "s3://bucket/incoming")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"BATCHCROP_LEASE_SECONDS": "soon"}, "lease_seconds"),
        ({"BATCHCROP_LEASE_SECONDS": "-1"}, "lease_seconds"),
        ({"BATCHCROP_MAX_SOURCE_BYTES": "1.5"}, "max_source_bytes"),
        ({"BATCHCROP_S3_REQUEST_CHECKSUM": "always"}, "s3_request_checksum"),
        ({"BATCHCROP_IDLE_POLL_SECONDS": "0"}, "idle_poll_seconds"),
        ({"BATCHCROP_FALLBACK_POLL_SECONDS": "often"}, "fallback_poll_seconds"),
        ({"BATCHCROP_STORE_MAX_CONCURRENT": "0"}, "store_max_concurrent"),
        ({"BATCHCROP_STORE_MAX_CONCURRENT": "many"}, "store_max_concurrent"),
    ],
)
def test_bad_values_raise_an_error_naming_the_setting(env: dict[str, str], needle: str) -> None:
    """A setting that cannot be used is refused with its name in the message."""
    with pytest.raises(SettingsError, match=needle):
        Settings.load(env=env)


def test_the_store_limit_is_read_from_its_variable_and_flag() -> None:
    """BATCHCROP_STORE_MAX_CONCURRENT sets the store's limit; its flag wins; unset: none."""
    assert Settings.load(env={}).store_max_concurrent is None
    env = {"BATCHCROP_STORE_MAX_CONCURRENT": "8"}
    assert Settings.load(env=env).store_max_concurrent == 8
    assert Settings.load({"store_max_concurrent": 3}, env=env).store_max_concurrent == 3


def test_repr_never_shows_the_token_or_database_password() -> None:
    """Settings printed in logs or errors hide secrets."""
    settings = Settings(database_url="postgresql://u:hunter2@db/x", api_token="s3cret" * 6)
    assert "hunter2" not in repr(settings)
    assert "s3cret" not in repr(settings)


def test_a_short_api_token_is_refused() -> None:
    """A token under 32 characters is a setting error that says how to make a good one."""
    with pytest.raises(SettingsError, match="at least 32 characters"):
        Settings.load(env={"BATCHCROP_API_TOKEN": "short"})


def test_the_api_token_can_come_from_a_file(tmp_path: Path) -> None:
    """`--api-token-file` / `BATCHCROP_API_TOKEN_FILE`: the file's first line is the token, so
    the secret never appears on a command line; an unreadable file is a setting error."""
    token = "a-token-kept-in-a-file-0123456789-abcdef"
    (tmp_path / "token").write_text(token + "\n", encoding="utf-8")
    from_file = Settings.load({"api_token_file": str(tmp_path / "token")}, env={})
    assert token == from_file.api_token
    with pytest.raises(SettingsError, match="cannot read the API token file"):
        Settings.load(env={"BATCHCROP_API_TOKEN_FILE": str(tmp_path / "missing")})


def test_a_token_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO (or any file that is not regular) as the token file is a setting error at once:
    opening it for reading would block every command's start-up until a writer came."""
    fifo = tmp_path / "token-fifo"
    os.mkfifo(fifo)
    said: list[str] = []

    def load() -> None:
        try:
            Settings.load(env={"BATCHCROP_API_TOKEN_FILE": str(fifo)})
        except SettingsError as exc:
            said.append(str(exc))

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    loader.join(5)
    if loader.is_alive():  # blocked in open(): a writer's open and close release it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert [f"cannot read the API token file {fifo}: not a regular file"] == said
    with pytest.raises(SettingsError, match="not a regular file"):
        Settings.load(env={"BATCHCROP_API_TOKEN_FILE": str(tmp_path)})


def test_a_token_in_the_environment_and_in_a_file_is_refused(tmp_path: Path) -> None:
    """A token given both ways is a setting error naming both, instead of the file silently
    winning over the variable."""
    (tmp_path / "token").write_text("a-token-kept-in-a-file-0123456789-abcdef\n", encoding="utf-8")
    env = {"BATCHCROP_API_TOKEN": "another-token-in-the-environment-0123456789"}
    with pytest.raises(SettingsError, match="BATCHCROP_API_TOKEN or BATCHCROP_API_TOKEN_FILE"):
        Settings.load({"api_token_file": str(tmp_path / "token")}, env=env)
    with pytest.raises(SettingsError, match="not both"):
        Settings.load(env={**env, "BATCHCROP_API_TOKEN_FILE": str(tmp_path / "token")})


@pytest.mark.parametrize(
    "token",
    ["ünïcode-token-0123456789-0123456789-abc", "a token with spaces 0123456789 0123456789"],
    ids=["non-ascii", "spaces"],
)
def test_a_token_no_client_could_send_verbatim_is_refused(token: str, tmp_path: Path) -> None:
    """A token with non-ASCII characters (which clients encode as they please) or spaces is a
    setting error, from the environment and from a file alike."""
    with pytest.raises(SettingsError, match="printable ASCII"):
        Settings.load(env={"BATCHCROP_API_TOKEN": token})
    (tmp_path / "token").write_text(token + "\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="printable ASCII"):
        Settings.load(env={"BATCHCROP_API_TOKEN_FILE": str(tmp_path / "token")})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1d", 86400.0), ("1.5h", 5400.0)],
)
def test_durations_parse_with_units(text: str, seconds: float) -> None:
    """Deadlines are written 90s, 30m, 2h, 1d."""
    assert parse_duration(text) == seconds


def test_a_duration_without_a_unit_is_refused() -> None:
    """`90` alone reads as seconds to some and minutes to others: a unit is required."""
    with pytest.raises(SettingsError, match="give a unit"):
        parse_duration("90")


@pytest.mark.parametrize("text", ["", "soon", "-5m", "0s", "90"])
def test_bad_durations_are_refused(text: str) -> None:
    """Empty, non-numeric and non-positive durations are refused."""
    with pytest.raises(SettingsError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("https://hooks.example.com", "not a URL"),
        ("hooks.example.com/path", "not a URL"),
        ("hooks..example.com", "empty label"),
        (".example.com", "empty label"),
        ("*", "only as its whole first label"),
        ("*.com", "top-level"),
        ("a.*.example.com", "only as its whole first label"),
        ("*foo.example.com", "only as its whole first label"),
        ("hooks.example.com:0", "port"),
        ("hooks.example.com:http", "port"),
        ("hooks_1.example.com", "letters, digits"),
        ("-hooks.example.com", "letters, digits"),
        ("user@hooks.example.com", "credentials"),
        ("[hooks.example.com]", "not an IPv6"),
        ("fe80::1::2", "IPv6"),
    ],
)
def test_malformed_callback_hosts_are_a_configuration_error(entry: str, why: str) -> None:
    """Each malformed BATCHCROP_CALLBACK_HOSTS entry is refused at start-up, named with why."""
    env = {"BATCHCROP_CALLBACK_HOSTS": f"hooks.example.com,{entry}"}
    with pytest.raises(SettingsError, match="BATCHCROP_CALLBACK_HOSTS entry") as raised:
        Settings.load(env=env)
    assert why in str(raised.value)


def test_well_formed_callback_hosts_are_accepted() -> None:
    """Names, IDNA names, wildcards, IP literals and ports all parse."""
    entries = "hooks.example.com, *.hooks.example.org:8443, bücher.example, 127.0.0.1:*"
    env = {"BATCHCROP_CALLBACK_HOSTS": entries + ",[::1]:9000,::1,HOOKS.Example.NET."}
    assert len(Settings.load(env=env).callback_hosts) == 7


def test_the_cli_exits_2_naming_a_malformed_callback_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command started with a malformed allowlist stops at once with the usage exit code."""
    monkeypatch.setenv("BATCHCROP_CALLBACK_HOSTS", "https://hooks.example.com/x")
    url = f"sqlite:///{tmp_path / 'batchcrop.db'}"
    assert main(["batches", "--database-url", url]) == 2
    err = capsys.readouterr().err
    assert "BATCHCROP_CALLBACK_HOSTS entry 'https://hooks.example.com/x'" in err
    assert "Traceback" not in err


def test_the_former_callback_variables_are_read_and_the_new_names_win() -> None:
    """`BATCHCROP_NOTIFY_*` (ADR 0030) still set the callback settings and are recorded for
    the deprecation line; where both names are set, `BATCHCROP_CALLBACK_*` wins."""
    former = Settings.load(
        env={
            "BATCHCROP_NOTIFY_SECRET": "s" * 16,
            "BATCHCROP_NOTIFY_HOSTS": "old.example.com",
            "BATCHCROP_NOTIFY_RETRY_SECONDS": "5",
        }
    )
    assert (
        former.callback_secret,
        former.callback_hosts,
        former.callback_retry_seconds,
    ) == ("s" * 16, ("old.example.com",), 5.0)
    assert tuple(RENAMED_ENV) == former.renamed_env
    both = Settings.load(
        env={"BATCHCROP_NOTIFY_HOSTS": "old.example.com", "BATCHCROP_CALLBACK_HOSTS": "new.example"}
    )
    assert both.callback_hosts == ("new.example",)
    assert Settings.load(env={"BATCHCROP_CALLBACK_HOSTS": "new.example"}).renamed_env == ()


@pytest.mark.parametrize(
    ("raw", "on"), [("on", True), ("TRUE", True), ("1", True), ("off", False), ("no", False)]
)
def test_tracing_is_a_switch_off_by_default(raw: str, on: bool) -> None:
    """BATCHCROP_TRACES reads as on or off in the usual words; unset, it is off."""
    assert Settings.load(env={}).traces is False
    assert Settings.load(env={"BATCHCROP_TRACES": raw}).traces is on


def test_a_tracing_switch_that_is_neither_on_nor_off_is_refused() -> None:
    """Any other word is a settings error naming the variable."""
    with pytest.raises(SettingsError, match="BATCHCROP_TRACES must be on or off, got 'maybe'"):
        Settings.load(env={"BATCHCROP_TRACES": "maybe"})


def test_workers_and_deliverers_get_the_processes_tracing(tmp_path: Path) -> None:
    """With BATCHCROP_TRACES on, the app's one tracer (OpenTelemetry's) is every worker's and
    deliverer's; off, theirs is the tracer that records nothing."""
    from batchcrop.app import build  # noqa: PLC0415
    from batchcrop.worker.worker import WorkerOptions  # noqa: PLC0415

    for on in (True, False):
        app = build(
            Settings(
                database_url=f"sqlite:///{tmp_path / f'{on}.db'}",
                store=f"file://{tmp_path / 'store'}",
                callback_secret="a-secret-long-enough",
                traces=on,
            )
        )
        app.upgrade()
        try:
            worker = app.worker(app.open_store(), WorkerOptions(concurrency=1))
            deliverer = app.deliverer("w")
            assert deliverer is not None
            assert app.traces.enabled is on
            assert worker.traces is app.traces is deliverer.traces
        finally:
            app.close()

"""Settings: one frozen dataclass built once from environment variables and CLI flags.

Every `BATCHCROP_X_Y` variable has the flag `--x-y`; the flag wins over the variable, the
variable over the default. Defaults are named constants with their unit in the name.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from batchcrop.callbacks.hosts import CallbackHostsError, parse_hosts
from leases import LEASE_SECONDS, MAX_ATTEMPT_SECONDS, WORKER_TIMEOUT_SECONDS

DATABASE_URL = "sqlite:///batchcrop.db"
STORE_URL = "file://./derivatives"
REAPER_INTERVAL_SECONDS = 30.0
IDLE_POLL_SECONDS = 1.0
"""How often an idle slot or deliverer looks for work where nothing wakes it (SQLite, or while
the wake-up listener is disconnected); jittered to half of it at least."""
FALLBACK_POLL_SECONDS = 30.0
"""How often it looks anyway on PostgreSQL, where notifications wake it (docs/design.md §3,
wake-ups): the fallback for a lost notification."""
DEADLINE_SECONDS = 24 * 3600.0
DEADLINE_SECONDS_MAX = 30 * 24 * 3600.0
"""The furthest a batch deadline may lie from now (submission and requeue, CLI and API)."""
MAX_ATTEMPTS = 3
MAX_ATTEMPTS_MAX = 100
"""The most attempts a batch may allow; the column is a 32-bit INTEGER."""
MAX_SOURCE_BYTES = 100 * 1024 * 1024
DECODE_MEMORY_MIB = 1024
"""Decoded-pixel memory a process allows at once, shared by its renders and thumbnails
(`batchcrop.crop.budget`); a source that would need more fails `image_too_large`."""
S3_REQUEST_CHECKSUM = "when_supported"
SHUTDOWN_GRACE_SECONDS = 30.0
CONCURRENCY = 2
"""Items a worker (or `batchcrop run`) processes at once."""
DURATION_SECONDS_MAX = 10 * 365 * 86400.0
"""The longest duration (deadline, lease, interval) accepted: its milliseconds fit the BIGINT
times the database stores, with centuries to spare."""

DECODE_MEMORY_MIB_MIN = 64
"""Below this even a 12 MP JPEG could not be decoded."""

CALLBACK_RETRY_SECONDS = 10.0
"""The first retry of a failed callback delivery waits about this long, doubling per attempt up
to an hour (docs/design.md §7, callbacks)."""
CALLBACK_SECRET_CHARS_MIN = 16
"""Shorter callback secrets are refused: the signature is all a receiver can trust."""

TRACES = False
"""Whether attempts and deliveries are traced (OpenTelemetry over OTLP/HTTP, the `traces` extra;
docs/operations.md, traces): off unless `BATCHCROP_TRACES` is on."""
SWITCH_WORDS = {
    **dict.fromkeys(("1", "true", "on", "yes"), True),
    **dict.fromkeys(("0", "false", "off", "no"), False),
}
"""How a switch's variable is written (any case)."""

ENV_PREFIX = "BATCHCROP_"
RENAMED_ENV = {
    "BATCHCROP_NOTIFY_SECRET": "BATCHCROP_CALLBACK_SECRET",
    "BATCHCROP_NOTIFY_HOSTS": "BATCHCROP_CALLBACK_HOSTS",
    "BATCHCROP_NOTIFY_RETRY_SECONDS": "BATCHCROP_CALLBACK_RETRY_SECONDS",
}
"""Former variable names (ADR 0030) → their names now: still read, each logged as deprecated
(`setting_renamed`); the new name wins when both are set."""
API_TOKEN_CHARS_MIN = 32
"""Shorter tokens are refused: a token is the only lock on the API."""
API_TOKEN_FILE_BYTES_MAX = 64 * 1024
"""Of a token file only this much is read: its first line is the token."""


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


def _parse_roots(text: str) -> tuple[str, ...]:
    """Split on os.pathsep, keeping `s3://...` whole although ':' is the POSIX separator."""
    parts = text.split(os.pathsep)
    roots: list[str] = []
    while parts:
        part = parts.pop(0)
        if part == "s3" and parts and parts[0].startswith("//"):
            part = f"s3:{parts.pop(0)}"
        if part.strip():
            roots.append(part.strip())
    return tuple(roots)


@dataclass(frozen=True)
class Settings:
    """Everything configurable, with the defaults docs/design.md §7 names."""

    database_url: str = DATABASE_URL
    store: str = STORE_URL
    s3_endpoint_url: str | None = None
    s3_request_checksum: str = S3_REQUEST_CHECKSUM
    source_roots: tuple[str, ...] = field(default_factory=tuple)
    lease_seconds: float = LEASE_SECONDS
    max_attempt_seconds: float = MAX_ATTEMPT_SECONDS
    reaper_interval_seconds: float = REAPER_INTERVAL_SECONDS
    idle_poll_seconds: float = IDLE_POLL_SECONDS
    fallback_poll_seconds: float = FALLBACK_POLL_SECONDS
    worker_timeout_seconds: float = WORKER_TIMEOUT_SECONDS
    max_source_bytes: int = MAX_SOURCE_BYTES
    decode_memory_mib: int = DECODE_MEMORY_MIB
    api_token: str | None = None
    api_token_file: str | None = None
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)
    prune_finished_before: float | None = None
    """`serve` prunes batches finished at least this many seconds ago, every hour (off: None)."""
    callback_secret: str | None = None
    callback_hosts: tuple[str, ...] = field(default_factory=tuple)
    callback_retry_seconds: float = CALLBACK_RETRY_SECONDS
    traces: bool = TRACES
    """Spans of every attempt and delivery, exported as the `OTEL_*` variables say
    (`batchcrop.traces`); set by its variable only, as those are."""
    store_max_concurrent: int | None = None
    """The most attempts in progress at once, across the whole fleet, that write to this
    process's store (an S3 bucket's request budget); None: no limit. Every worker of one store
    should set the same value (docs/operations.md, sharing the fleet)."""
    renamed_env: tuple[str, ...] = field(default=(), compare=False)
    """The former variable names (`RENAMED_ENV`) this was read from: not a setting, but what
    the composition root logs once, naming each new name."""

    def __post_init__(self) -> None:
        for name in (
            "lease_seconds",
            "max_attempt_seconds",
            "reaper_interval_seconds",
            "idle_poll_seconds",
            "fallback_poll_seconds",
            "worker_timeout_seconds",
            "callback_retry_seconds",
        ):
            # `not 0 < x <= max` also refuses NaN, which compares false with everything.
            if not 0 < getattr(self, name) <= DURATION_SECONDS_MAX:
                raise SettingsError(f"{name} must be a positive, finite number of seconds")
        if self.max_source_bytes <= 0:
            raise SettingsError("max_source_bytes must be positive")
        if self.store_max_concurrent is not None and self.store_max_concurrent < 1:
            raise SettingsError("store_max_concurrent must be at least 1 (unset: no limit)")
        if self.decode_memory_mib < DECODE_MEMORY_MIB_MIN:
            raise SettingsError(
                f"decode_memory_mib must be at least {DECODE_MEMORY_MIB_MIN} MiB of decoded pixels"
            )
        if self.api_token is not None and len(self.api_token) < API_TOKEN_CHARS_MIN:
            raise SettingsError(
                f"the API token must be at least {API_TOKEN_CHARS_MIN} characters "
                "(for example: python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        if self.api_token is not None and not _printable_ascii(self.api_token):
            # HTTP clients send a header's non-ASCII text in encodings of their own (UTF-8,
            # Latin-1): such a token could never match every client's Authorization.
            raise SettingsError(
                "the API token must be printable ASCII without spaces "
                "(secrets.token_urlsafe(32) makes one)"
            )
        if (
            self.callback_secret is not None
            and len(self.callback_secret) < CALLBACK_SECRET_CHARS_MIN
        ):
            raise SettingsError(
                f"the callback secret (BATCHCROP_CALLBACK_SECRET) must be at least "
                f"{CALLBACK_SECRET_CHARS_MIN} characters"
            )
        try:
            parse_hosts(self.callback_hosts)
        except CallbackHostsError as exc:
            raise SettingsError(str(exc)) from None
        if self.s3_request_checksum not in ("when_supported", "when_required"):
            raise SettingsError("s3_request_checksum must be when_supported or when_required")

    def __repr__(self) -> str:
        # The API token and database credentials never reach logs or error output.
        return f"Settings(database={redact_url(self.database_url)}, store={self.store})"

    @classmethod
    def load(
        cls, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
    ) -> Settings:
        """Build settings: `overrides` (CLI flags, None values ignored) > environment > defaults."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        renamed = tuple(old for old in RENAMED_ENV if env.get(old) not in (None, ""))
        unset = (None, "")
        env = {
            **env,
            **{RENAMED_ENV[old]: env[old] for old in renamed if env.get(RENAMED_ENV[old]) in unset},
        }
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if f.name != "renamed_env" and raw not in (None, ""):
                values[f.name] = _convert(f.name, raw)
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = _convert(name, value) if isinstance(value, str) else value
        if values.get("api_token_file"):
            if values.get("api_token"):
                # Which one wins would be a guess: a stale file or a stale variable.
                raise SettingsError(
                    "the API token is given twice: set BATCHCROP_API_TOKEN or "
                    "BATCHCROP_API_TOKEN_FILE (--api-token-file), not both"
                )
            values["api_token"] = _read_token(values["api_token_file"])
        return cls(**values, renamed_env=renamed)


def _printable_ascii(text: str) -> bool:
    return all("!" <= c <= "~" for c in text)


def _read_token(path: str) -> str:
    """The token in a file (its first line): a secret kept off command lines and `ps`. Only a
    regular file is read, opened without blocking: a FIFO would hang every command's start-up
    until something wrote to it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SettingsError(f"cannot read the API token file {path}: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise SettingsError(f"cannot read the API token file {path}: not a regular file")
        data = os.read(descriptor, API_TOKEN_FILE_BYTES_MAX)
    except OSError as exc:
        raise SettingsError(f"cannot read the API token file {path}: {exc.strerror}") from exc
    finally:
        os.close(descriptor)
    try:
        return data.split(b"\n", 1)[0].decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise SettingsError(f"cannot read the API token file {path}: not UTF-8 text") from exc


def _convert(name: str, raw: str) -> Any:
    if name == "source_roots":
        return _parse_roots(raw)
    if name in ("allowed_hosts", "callback_hosts"):
        return tuple(h.strip() for h in raw.split(",") if h.strip())
    if name in (
        "lease_seconds",
        "max_attempt_seconds",
        "reaper_interval_seconds",
        "idle_poll_seconds",
        "fallback_poll_seconds",
        "worker_timeout_seconds",
        "callback_retry_seconds",
    ):
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a number of seconds, got {raw!r}") from None
    if name == "prune_finished_before":
        return parse_duration(raw)
    if name in ("max_source_bytes", "decode_memory_mib", "store_max_concurrent"):
        unit = {"max_source_bytes": "bytes", "decode_memory_mib": "MiB"}.get(name, "attempts")
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a whole number of {unit}, got {raw!r}") from None
    return _switch(name, raw) if name == "traces" else raw


def _switch(name: str, raw: str) -> bool:
    switch = SWITCH_WORDS.get(raw.strip().lower())
    if switch is None:
        raise SettingsError(f"{ENV_PREFIX}{name.upper()} must be on or off, got {raw!r}")
    return switch


def redact_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return scheme + sep + rest


_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(
    text: str, *, maximum_seconds: float = DURATION_SECONDS_MAX, what: str = "duration"
) -> float:
    """Seconds from `90s`, `30m`, `2h` or `1d`, positive and at most `maximum_seconds`;
    SettingsError otherwise, naming `what` and its own limit (`the deadline`: 30 days).

    A unit is required: a bare `90` reads as seconds to some and minutes to others.
    """
    text = text.strip().lower()
    unit = _UNIT_SECONDS.get(text[-1:]) if text else None
    if unit is None:
        raise SettingsError(f"not a duration: {text!r} (give a unit: 90s, 30m, 2h or 1d)")
    try:
        seconds = float(text[:-1]) * unit
    except ValueError:
        raise SettingsError(f"not a duration: {text!r} (use e.g. 90s, 30m, 2h, 1d)") from None
    # `not 0 < x <= max` also refuses NaN and infinity (which float() accepts).
    if not 0 < seconds <= maximum_seconds:
        days = maximum_seconds / 86400
        limit = f"{days / 365:g} years" if days >= 365 else f"{days:g} days"
        raise SettingsError(f"{what} must be positive and at most {limit}: {text!r}")
    return seconds

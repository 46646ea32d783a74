"""Structured logs on stderr, one line per event: logfmt (default) or JSON (docs/design.md §7).

Every line has `ts`, `level` and `msg` first (the event's name, or another library's message),
then the event's fields in the order given: ids (item, batch, attempt, correlation id),
categories and figures — never source names, secrets or stack traces of user input (tracebacks
only for internal errors, at DEBUG, escaped onto the same line). Values are quoted and escaped
so that one event is always one line, whatever a value holds (newlines, terminal escapes).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import warnings
from typing import Any, TextIO

LOGGER = logging.getLogger("batchcrop")
LOG_FORMATS = ("logfmt", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FIELDS_ATTRIBUTE = "batchcrop_fields"
"""The `extra` attribute of a record that carries an event's fields."""
EVENT_ATTRIBUTE = "batchcrop_event"
"""The `extra` attribute of a record that carries the event's name (its `msg`)."""
OTHER_LOGGERS = ("uvicorn", "uvicorn.error", "opentelemetry", "asyncio")
"""Loggers of libraries whose lines join ours in the same format (uvicorn's start and stop
lines, its access log being replaced by our own `http_request` lines; the OpenTelemetry SDK's
export failures when tracing is on; asyncio's, such as a refused `accept`)."""
REPEAT_SECONDS = 10.0
"""asyncio logs each failed `accept` of a server out of descriptors, with its traceback, many
times a second: one line per message this often is kept (`Repeats`)."""


class LogSettingError(ValueError):
    """An unknown log level or format; the message names the accepted values."""


def _format_value(value: Any) -> str:
    text = str(value)
    if text and all(c.isprintable() and c not in ' ="\\' for c in text):
        return text
    # JSON string escaping: quotes, backslashes and every control character become escapes.
    return json.dumps(text)


def figure(value: float) -> int | float:
    """A number as a log field: an int when whole (`900`, not `900.0`, in logfmt), so JSON lines
    carry numbers, never their text."""
    return int(value) if float(value).is_integer() else value


def log_event(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event` with `key=value` fields in the order given (None values are left out)."""
    if LOGGER.isEnabledFor(level):
        present = {k: v for k, v in fields.items() if v is not None}
        # The record's own message stays `event key=value ...` for handlers other than ours
        # (pytest's caplog, a library user's logging setup); ours format the fields.
        pairs = " ".join(f"{k}={_format_value(v)}" for k, v in present.items())
        LOGGER.log(
            level,
            "%s %s",
            event,
            pairs,
            extra={FIELDS_ATTRIBUTE: present, EVENT_ATTRIBUTE: event},
        )


def _timestamp(record: logging.LogRecord) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


def _pairs(record: logging.LogRecord) -> dict[str, Any]:
    pairs: dict[str, Any] = {
        "ts": _timestamp(record),
        "level": record.levelname.lower(),
        "msg": getattr(record, EVENT_ATTRIBUTE, None) or record.getMessage(),
    }
    if record.name not in (LOGGER.name,):
        pairs["logger"] = record.name
    pairs.update(getattr(record, FIELDS_ATTRIBUTE, {}))
    if record.exc_info and record.exc_info[0] is not None:
        pairs["exc"] = logging.Formatter().formatException(record.exc_info)
    return pairs


class LogfmtFormatter(logging.Formatter):
    """`ts=… level=… msg=… key=value …`: strict logfmt, one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_format_value(v)}" for k, v in _pairs(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the same keys as the logfmt form."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_pairs(record), ensure_ascii=False, default=str)


def check_level(level: str) -> str:
    """The level's canonical name; LogSettingError for anything else."""
    name = level.strip().upper()
    if name not in LOG_LEVELS:
        raise LogSettingError(
            f"unknown log level {level!r}: use one of {', '.join(LOG_LEVELS)} "
            "(--log-level or BATCHCROP_LOG_LEVEL)"
        )
    return name


def check_format(fmt: str) -> str:
    """The format's canonical name; LogSettingError for anything else."""
    name = fmt.strip().lower()
    if name not in LOG_FORMATS:
        raise LogSettingError(
            f"unknown log format {fmt!r}: use logfmt or json (--log-format or BATCHCROP_LOG_FORMAT)"
        )
    return name


def configure(level: str = "INFO", fmt: str = "logfmt") -> None:
    """Send batchcrop's logs (and uvicorn's) to stderr in `fmt`; stdout stays for documents.

    Raises LogSettingError for an unknown level or format.
    """
    level, fmt = check_level(level), check_format(fmt)
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    for name in (LOGGER.name, *OTHER_LOGGERS):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
        logger.disabled = False  # a library's logging.config call may have disabled it
    asyncio_logger = logging.getLogger("asyncio")
    if not any(isinstance(f, Repeats) for f in asyncio_logger.filters):
        asyncio_logger.addFilter(Repeats())
    # Python's warnings (Pillow's DecompressionBombWarning, a library's deprecation) would print
    # raw text, over several lines, into the stream of strict logfmt or JSON lines.
    warnings.showwarning = _log_warning


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever `sys.stderr` is at each line: `run`'s progress bar (Rich)
    redirects it while it is drawn and puts each line above the bar, where a handler holding
    the stream it was given at start wrote into the middle of the bar's line."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # always the current sys.stderr


class Repeats(logging.Filter):
    """Lets through one record of each message per `seconds`; the others are dropped."""

    def __init__(self, seconds: float = REPEAT_SECONDS) -> None:
        super().__init__()
        self.seconds = seconds
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        key = str(record.msg)
        if now - self._last.get(key, -math.inf) < self.seconds:
            return False
        self._last[key] = now
        return True


def _log_warning(  # noqa: PLR0917 -- the signature of warnings.showwarning
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` as one `python_warning` event: the category and the message's
    first line (never the source file or line that raised it)."""
    text = str(message).splitlines()[0] if str(message) else ""
    log_event("python_warning", level=logging.WARNING, category=category.__name__, message=text)


class OutageLog:
    """`database_unavailable` once per outage, with its reason, and `database_recovered` once at
    its end, for a loop that retries every pass (a deliverer polls every second: one line per
    pass would drown the outage's start). `during` names the loop; thread-confined."""

    def __init__(self, during: str, **fields: Any) -> None:
        self.during = during
        self.fields = fields
        self._down = False

    def failed(self, exc: BaseException) -> None:
        """A pass met the outage: logged only if it is the first since the last success."""
        if self._down:
            return
        self._down = True
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log_event(
            "database_unavailable",
            level=logging.WARNING,
            **self.fields,
            during=self.during,
            error=reason,
        )

    def succeeded(self) -> None:
        """A pass reached the database: the outage, if any, is over."""
        if self._down:
            self._down = False
            log_event("database_recovered", **self.fields, during=self.during)

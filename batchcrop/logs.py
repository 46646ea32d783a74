"""Structured logs: one logfmt line per claim, crop, write and transition.

Lines carry ids (item, batch, attempt, correlation id), categories and figures — never source
names, secrets or stack traces of user input (tracebacks only for internal errors, at DEBUG).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

LOGGER = logging.getLogger("batchcrop")


def _format_value(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' ="'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def log_event(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event key=value ...` with the fields in the order given."""
    if LOGGER.isEnabledFor(level):
        pairs = " ".join(f"{k}={_format_value(v)}" for k, v in fields.items() if v is not None)
        LOGGER.log(level, "%s %s", event, pairs)


def configure(level: str = "INFO") -> None:
    """Send batchcrop's logs to stderr with UTC timestamps (stdout stays for documents)."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(level.upper())
    LOGGER.propagate = False

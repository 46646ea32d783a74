"""Worker start-up that waits out short database and store outages (docs/design.md §7, `worker`).

A worker (re)started by its supervisor while PostgreSQL restarts or the store blips must not
exit at once: it would crash-loop exactly when the fleet is recovering. It retries the schema
check (the upgrade, with `--migrate`) and the store check with backoff for up to
`STARTUP_OUTAGE_WAIT_SECONDS`, then gives up with the last error (exit 3 or 4). A schema behind
this version is not waited out either: exit 3 naming `batchcrop db upgrade`. A configuration
mistake — no such database or role, a refused password, a missing bucket, refused store
credentials — is not an outage: it fails at once with its reason (docs/operations.md, start-up).
"""

from __future__ import annotations

import logging
import threading
import time

from batchcrop.app import App
from batchcrop.logs import log_event
from leases import DatabaseUnavailable
from storage import ObjectStore, StorageUnavailable

STARTUP_OUTAGE_WAIT_SECONDS = 120.0
STARTUP_RETRY_FIRST_SECONDS = 0.5
STARTUP_RETRY_MAX_SECONDS = 10.0


def wait_until_ready(
    app: App,
    stop: threading.Event,
    *,
    wait_seconds: float = STARTUP_OUTAGE_WAIT_SECONDS,
    migrate: bool = False,
) -> ObjectStore | None:
    """Check the schema (`migrate`: upgrade it) and open (and check) the store, retrying
    transient outages. A schema behind this version is not an outage: `SchemaBehind` at once.

    Returns the store, or None when `stop` was set while waiting (nothing is held then).
    Raises the last `DatabaseUnavailable` / `StorageUnavailable` once `wait_seconds` passed;
    other errors (`DatabaseRefused`, a missing bucket, refused credentials, a store that
    overwrites, bad settings) are raised at once. Each wait is logged with its reason.
    """
    deadline = time.monotonic() + wait_seconds
    delay = STARTUP_RETRY_FIRST_SECONDS
    while True:
        try:
            if migrate:
                app.upgrade()
            else:
                app.check_schema()
            return app.open_store()
        except (DatabaseUnavailable, StorageUnavailable) as exc:
            if time.monotonic() + delay > deadline:
                raise
            log_event(
                "waiting_for_backends",
                level=logging.WARNING,
                backend="database" if isinstance(exc, DatabaseUnavailable) else "store",
                reason=_reason(exc),
                retry_in_s=round(delay, 1),
            )
        if stop.wait(delay):
            return None
        delay = min(delay * 2, STARTUP_RETRY_MAX_SECONDS)


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

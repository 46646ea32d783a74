"""`batchcrop serve`: uvicorn running the API, with the reaper on a timer beside it.

The API refuses to listen beyond loopback without a token: anyone who can reach it could
otherwise submit work and read every batch.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

from batchcrop import __version__
from batchcrop.api.application import create_api
from batchcrop.api.hosts import is_loopback
from batchcrop.api.protocol import RequestDeadlineProtocol, raise_open_file_limit
from batchcrop.app import App
from batchcrop.callbacks.delivery import DELIVERY_DEADLINE_SECONDS
from batchcrop.logs import OutageLog, log_event
from leases import DatabaseUnavailable

EXIT_OK = 0
EXIT_USAGE = 2
SHUTDOWN_GRACE_SECONDS = 10
OPEN_FILES_WANTED = 8192
"""Open files below which `serve` warns at start: a few thousand clients at once."""
DELIVERER_STOP_SECONDS = DELIVERY_DEADLINE_SECONDS + 5.0
"""How long a stopping `serve` waits for its deliverer: the delivery under way ends within its
deadline; past this the process exits anyway and the delivery's lease returns it."""

log = logging.getLogger("batchcrop.api")


class Reaper(threading.Thread):
    """Calls `app.leases.reap()` every `app.settings.reaper_interval_seconds` until `stop()`.

    A failed pass is logged and retried at the next tick: a database outage must not kill the
    reaper thread while the API keeps answering.
    """

    def __init__(self, app: App) -> None:
        super().__init__(name="batchcrop-reaper", daemon=True)
        self.app = app
        self._stopping = threading.Event()
        self._outage = OutageLog("reaper")

    def run(self) -> None:
        interval = self.app.settings.reaper_interval_seconds
        while not self._stopping.wait(interval):
            try:
                result = self.app.leases.reap()
            except DatabaseUnavailable as exc:
                self._outage.failed(exc)
                continue
            except Exception:
                log.exception("reaper pass failed")
                continue
            self._outage.succeeded()
            self.app.metrics.reaper_last_success.set_to_current_time()
            # Abandoned items are cancel/deadline work, not lease expirations.
            expired = result.retried + result.failed
            if expired:
                self.app.metrics.lease_expirations.inc(expired)
            if result.total:
                log_event(
                    "reaped",
                    worker="api",
                    retried=result.retried,
                    failed=result.failed,
                    abandoned=result.abandoned,
                )

    def stop(self) -> None:
        """Ask the thread to finish after its current pass (it sleeps interruptibly)."""
        self._stopping.set()


PRUNE_INTERVAL_SECONDS = 3600.0


class Pruner(threading.Thread):
    """With `prune_finished_before` set, prunes finished batches every `PRUNE_INTERVAL_SECONDS`
    (the first pass a minute after start) until `stop()`; a failed pass waits for the next."""

    def __init__(self, app: App, finished_before_seconds: float) -> None:
        super().__init__(name="batchcrop-pruner", daemon=True)
        self.app = app
        self.finished_before_seconds = finished_before_seconds
        self._stopping = threading.Event()
        self._outage = OutageLog("pruner")

    def run(self) -> None:
        delay = min(60.0, PRUNE_INTERVAL_SECONDS)
        while not self._stopping.wait(delay):
            delay = PRUNE_INTERVAL_SECONDS
            try:
                result = self.app.batches.prune(self.finished_before_seconds)
            except DatabaseUnavailable as exc:
                self._outage.failed(exc)
                continue
            except Exception:
                log.exception("prune pass failed")
                continue
            self._outage.succeeded()
            if result.batches:
                log_event("pruned", batches=result.batches, rows=result.rows)

    def stop(self) -> None:
        """Ask the thread to finish after its current pass."""
        self._stopping.set()


def host_refusal(host: str, api_token: str | None) -> str | None:
    """The line refusing to listen on `host` (not loopback) without an API token, or None."""
    if is_loopback(host) or api_token:
        return None
    return (
        f"batchcrop serve: refusing to listen on {host} without BATCHCROP_API_TOKEN "
        "(set a token, or use --host 127.0.0.1)"
    )


def _listen_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (a port in use, an address not of this machine),
    tried as uvicorn will bind it, or None: one line instead of uvicorn's log and exit."""
    if not host:
        return None  # every interface: left to uvicorn
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in found:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # as asyncio binds it: beside an IPv4 listener
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def serve(app: App, *, host: str, port: int, migrate: bool = False) -> int:
    """Run the API until SIGTERM/SIGINT; the exit code of `batchcrop serve`.

    Returns 2 (after one line on stderr) when `host` is not loopback and no token is set.
    uvicorn handles the signals: it stops accepting, finishes in-flight requests (up to
    `SHUTDOWN_GRACE_SECONDS`), then we stop the reaper. The schema is only checked (a schema
    behind this version: `SchemaBehind`, exit 3), unless `migrate`.
    """
    refusal = host_refusal(host, app.settings.api_token)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return EXIT_USAGE
    # Only once the host is allowed: a refused `serve` touches nothing, not even the schema.
    if migrate:
        app.upgrade()
    else:
        app.check_schema()
    problem = _listen_problem(host, port)
    if problem is not None:
        print(f"batchcrop serve: cannot listen on {host}:{port}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    files_before, files = raise_open_file_limit()
    config = uvicorn.Config(
        create_api(app),
        host=host,
        port=port,
        # A request must arrive within a deadline: slow clients cannot hold every descriptor.
        http=RequestDeadlineProtocol,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        server_header=False,
        # batchcrop.logs formats uvicorn's own lines; requests are logged by `AccessLog`.
        log_config=None,
        access_log=False,
    )
    server = uvicorn.Server(config)
    log_event(
        "serve_started",
        version=__version__,
        database=app.database_label(),
        store=app.settings.store,
        host=host,
        port=port,
        token=bool(app.settings.api_token),
        open_files=files,
    )
    if files < OPEN_FILES_WANTED:
        log_event(
            "open_file_limit_low",
            level=logging.WARNING,
            limit=files,
            was=files_before,
            wanted=OPEN_FILES_WANTED,
            detail="each connection holds one descriptor: raise the hard limit (LimitNOFILE)",
        )
    reaper = Reaper(app)
    reaper.start()
    pruner = None
    if app.settings.prune_finished_before is not None:
        pruner = Pruner(app, app.settings.prune_finished_before)
        pruner.start()
    # `serve` delivers completion callbacks too (unregistered: its lease bounds a crash).
    deliverer = app.deliverer(f"serve:{socket.gethostname()}:{os.getpid()}")
    if deliverer is not None:
        deliverer.start()
    try:
        with _graceful_signals(server):
            server.run()
    except SystemExit as exc:
        # uvicorn exits 1 when it cannot bind or start; report it as a configuration error.
        log.error("the API server could not start (uvicorn exit %s): exit 2", exc.code)
        return EXIT_USAGE
    finally:
        reaper.stop()
        if deliverer is not None:
            deliverer.stop()
            deliverer.join(DELIVERER_STOP_SECONDS)
            if deliverer.is_alive():
                log_event("deliverer_still_running", level=logging.WARNING)
        reaper.join()
        if pruner is not None:
            pruner.stop()
    log_event("serve_stopped")
    return EXIT_OK


@contextmanager
def _graceful_signals(server: uvicorn.Server) -> Iterator[None]:
    """While uvicorn runs it handles SIGTERM/SIGINT itself, then re-raises the signal it caught
    against the handlers it found. Those are these: they only ask the server to exit, so a
    graceful stop ends in exit code 0 instead of death by signal."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.should_exit = True

    if threading.current_thread() is not threading.main_thread():
        yield  # signals can only be handled in the main thread
        return
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

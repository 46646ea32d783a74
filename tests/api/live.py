"""A live API server on loopback for the tests: uvicorn in a thread on a free port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import uvicorn

from batchcrop.api import create_api
from batchcrop.api.protocol import RequestDeadlineProtocol
from batchcrop.app import App

STARTUP_TIMEOUT_SECONDS = 15.0
CLIENT_TIMEOUT_SECONDS = 30.0


@dataclass
class LiveServer:
    """A running server: its app, its base URL and an httpx client bound to it."""

    app: App
    url: str
    client: httpx.Client


@contextmanager
def running(
    app: App,
    *,
    token: str | None = None,
    protocol: type[RequestDeadlineProtocol] = RequestDeadlineProtocol,
) -> Iterator[LiveServer]:
    """Serve `app` on 127.0.0.1 until the block ends, with `serve`'s HTTP protocol (`protocol`:
    one with a shorter deadline); `token` goes into the client's headers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_api(app),
        http=protocol,
        log_level="warning",
        lifespan="off",
        ws="none",
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="api-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.01)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=CLIENT_TIMEOUT_SECONDS) as client:
            yield LiveServer(app=app, url=url, client=client)
    finally:
        server.should_exit = True
        thread.join(STARTUP_TIMEOUT_SECONDS)
        sock.close()

"""uvicorn's HTTP/1.1 protocol with a deadline for each request to arrive, and the open-file limit
a server needs.

uvicorn closes a connection idle between requests (`timeout_keep_alive`) but waits forever for a
request that has begun: a client that opens connections, sends part of a request head and goes
quiet holds one descriptor each until the process can accept no other connection, and every
request, `/healthz` included, waits (the slowloris attack). So a request must arrive whole, its
head and body, within `REQUEST_ARRIVAL_SECONDS` of the connection opening or of the previous
response; otherwise the connection is closed, as nginx's `client_header_timeout` and
`client_body_timeout` and Apache's `mod_reqtimeout` do. A request being answered is never cut:
the deadline covers only its arrival.
"""

from __future__ import annotations

import asyncio
import resource

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_ARRIVAL_SECONDS = 30.0
"""How long a request may take to arrive whole (head and body): a 16 MiB body (the largest the
API takes) at 5 Mbit/s takes about 27 s."""


class RequestDeadlineProtocol(H11Protocol):
    """`H11Protocol` that closes a connection whose next request has not fully arrived within
    `REQUEST_ARRIVAL_SECONDS` (see the module docstring)."""

    arrival_seconds = REQUEST_ARRIVAL_SECONDS
    _arrival: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_request()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._cancel_arrival()  # the request is in whole (or the connection is ending)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_arrival()
        super().connection_lost(exc)

    def _await_request(self) -> None:
        self._cancel_arrival()
        self._arrival = self.loop.call_later(self.arrival_seconds, self._too_slow)

    def _cancel_arrival(self) -> None:
        if self._arrival is not None:
            self._arrival.cancel()
            self._arrival = None

    def _too_slow(self) -> None:
        self._arrival = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft limit on open files to its hard limit (as Go's runtime does for
    every program): a server holds one descriptor per connection, and the usual soft default of
    1,024 is reached by a thousand clients. Returns (the soft limit before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft, soft
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]

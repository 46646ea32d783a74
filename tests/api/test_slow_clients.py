"""Slow clients against the live server's HTTP protocol (`batchcrop.api.protocol`): a request
must arrive whole within a deadline, so connections that send part of a request and go quiet
are closed instead of holding the server's descriptors, while other clients are served."""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from batchcrop.api.protocol import RequestDeadlineProtocol, raise_open_file_limit
from batchcrop.app import App
from tests.api.live import LiveServer, running
from tests.receiver import read_message

ARRIVAL_SECONDS = 1.0
STALLED = 40


class _ShortDeadline(RequestDeadlineProtocol):
    arrival_seconds = ARRIVAL_SECONDS


@pytest.fixture
def quick(make_app: Callable[..., App]) -> Iterator[LiveServer]:
    """A live server whose requests must arrive within `ARRIVAL_SECONDS`."""
    with running(make_app(), protocol=_ShortDeadline) as server:
        yield server


def _connect(server: LiveServer) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (end of file) rather than answering."""
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


def test_half_sent_requests_are_closed_and_others_served(quick: LiveServer) -> None:
    """Connections holding half a request head, or a head whose body stops short, are closed
    once the deadline passes; meanwhile and afterwards a whole request is answered at once."""
    stalled = []
    for n in range(STALLED):
        sock = _connect(quick)
        if n % 2:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no end of head
        else:
            sock.sendall(
                b"POST /v1/batches HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"items"'
            )
        stalled.append(sock)
    started = time.monotonic()
    assert quick.client.get("/healthz").status_code == 200
    assert time.monotonic() - started < ARRIVAL_SECONDS
    try:
        assert all(_closed_by_server(sock) for sock in stalled)
        assert time.monotonic() - started >= ARRIVAL_SECONDS * 0.9
    finally:
        for sock in stalled:
            sock.close()
    assert quick.client.get("/healthz").status_code == 200


def test_a_connection_idle_before_its_first_byte_is_closed(quick: LiveServer) -> None:
    """A connection that never sends a byte is closed after the deadline too."""
    sock = _connect(quick)
    try:
        started = time.monotonic()
        assert _closed_by_server(sock)
        assert ARRIVAL_SECONDS * 0.9 <= time.monotonic() - started < ARRIVAL_SECONDS + 5
    finally:
        sock.close()


def test_a_keep_alive_connection_serves_each_request_that_arrives_in_time(
    quick: LiveServer,
) -> None:
    """The deadline starts again after each response: requests on one connection, each sent
    within it, are all answered, and the deadline never cuts one being answered."""
    sock = _connect(quick)
    try:
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = read_message(sock)
            assert answer is not None
            assert answer.startswith(b"HTTP/1.1 200"), answer
            time.sleep(ARRIVAL_SECONDS * 0.6)
    finally:
        sock.close()


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    """`serve` raises its soft open-file limit to the hard one (a descriptor per connection)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
        before, after = raise_open_file_limit()
        assert before == min(soft, 256)
        assert after == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert after >= min(hard, 1 << 20) or hard == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

"""The TCP fault proxy forwards faithfully and injects each fault it is told to."""

from __future__ import annotations

import http.server
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.services.proxy import FaultProxy


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    """A proxy in front of a small HTTP server echoing the request path."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fault_proxy = FaultProxy("127.0.0.1", server.server_address[1], seed=7).start()
    yield fault_proxy
    fault_proxy.stop()
    server.shutdown()
    server.server_close()


def _get(proxy: FaultProxy, path: str) -> str:
    with urllib.request.urlopen(proxy.url + path, timeout=5) as response:
        return str(response.read().decode())


def test_forwards_requests_untouched(proxy: FaultProxy) -> None:
    """Without faults every answer arrives whole and every request is counted."""
    assert [_get(proxy, f"/n{k}") for k in range(5)] == [f"/n{k}" for k in range(5)]
    assert proxy.counts()["requests"] == 5


@pytest.mark.parametrize("kind", ["reset_before", "reset_after", "truncate", "drop", "http_503"])
def test_each_fault_kind_fails_the_request(proxy: FaultProxy, kind: str) -> None:
    """With fail_fraction 1 every request fails with the chosen kind, counted by kind."""
    proxy.configure(fail_fraction=1.0, fault_kinds=(kind,))
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _get(proxy, "/x")
    assert proxy.counts()[kind] == 1


def test_a_fraction_of_requests_fails(proxy: FaultProxy) -> None:
    """fail_fraction 0.3 fails roughly a third of 100 requests; the rest are answered."""
    proxy.configure(fail_fraction=0.3, fault_kinds=("reset_before",))
    answered = 0
    for k in range(100):
        try:
            answered += _get(proxy, f"/{k}") == f"/{k}"
        except OSError:
            continue
    assert 50 <= answered <= 90
    assert answered + proxy.counts()["reset_before"] == 100


def test_outage_refuses_then_recovers(proxy: FaultProxy) -> None:
    """During an outage nothing gets through; afterwards requests pass again."""
    proxy.outage(0.5)
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _get(proxy, "/during")
    threading.Event().wait(0.6)
    assert _get(proxy, "/after") == "/after"


def test_a_cut_fires_on_a_marker_split_between_two_chunks() -> None:
    """The client's marker may arrive in two reads (a TCP segment ends inside it): the cut still
    fires at the statement after it."""
    upstream = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def sink() -> None:
        conn, _ = upstream.accept()
        with conn:
            while chunk := conn.recv(4096):
                received.append(chunk)

    threading.Thread(target=sink, daemon=True).start()
    cutter = FaultProxy("127.0.0.1", upstream.getsockname()[1], http=False).start()
    try:
        fired = cutter.cut_at(b"previews/", b"COMMIT", lambda: None)
        with socket.create_connection(("127.0.0.1", cutter.port)) as client:
            for part in (b"INSERT INTO prev", b"iews/abc", b"; COMMIT"):
                client.sendall(part)
                time.sleep(0.2)  # each part its own read on the proxy's side
            assert fired.wait(5)
    finally:
        cutter.stop()
        upstream.close()

"""A completion-callback receiver on loopback for the tests (docs/design.md §7, callbacks).

It checks every request's `Batchcrop-Signature` with the shared secret, deduplicates on the
`Idempotency-Key` as a careful receiver would, and answers from a script: a list of actions
taken in turn for the first requests (`"fail"`: 503, `"hang"`: no answer for `hang_seconds`,
`"redirect"`: 302 elsewhere, an int: that status), then 204 for every later one. `hanging`
starts several receivers that hang on every request: other tenants' stuck receivers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from batchcrop.callbacks.delivery import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, verify

SECRET = "test-callback-secret-0123456789"


@dataclass
class Received:
    """One request as the receiver saw it, and what it answered."""

    key: str
    body: dict[str, Any]
    signed: bool
    """The signature verified, and the signed body's notification_id is the key."""
    attempt: str | None
    delivery: str | None
    answer: int | str
    raw: bytes = b""
    signature: str = ""
    traceparent: str | None = None
    """The W3C trace context header, sent when the deliverer traces."""


@dataclass
class Receiver:
    """What arrived; `processed` holds each notification once (the dedup the receiver does)."""

    script: list[int | str]
    hang_seconds: float = 3.0
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    processed: dict[str, dict[str, Any]] = field(default_factory=dict)
    processed_at: dict[str, float] = field(default_factory=dict)
    """When (`time.monotonic()`) each notification was processed."""
    duplicates: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self) -> int | str:
        with self.lock:
            return self.script.pop(0) if self.script else 204

    def record(self, received: Received) -> None:
        with self.lock:
            self.requests.append(received)
            if received.answer == 204 or (
                isinstance(received.answer, int) and 200 <= received.answer < 300
            ):
                if received.key in self.processed:
                    self.duplicates += 1
                else:
                    self.processed[received.key] = received.body
                    self.processed_at[received.key] = time.monotonic()

    def wait_processed(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.processed) >= n:
                    return
            time.sleep(0.02)
        raise AssertionError(f"{len(self.processed)} notifications processed, wanted {n}")


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            action = receiver.answer()
            key = self.headers.get(IDEMPOTENCY_HEADER, "")
            signed = verify(
                SECRET, raw, self.headers.get(SIGNATURE_HEADER, ""), idempotency_key=key
            )
            answer: int | str = action
            status = {"fail": 503, "hang": 200, "redirect": 302}.get(str(action), action)
            if not signed:
                status = answer = 401
            received = Received(
                key=key,
                body=json.loads(raw),
                raw=raw,
                signature=self.headers.get(SIGNATURE_HEADER, ""),
                signed=signed,
                attempt=self.headers.get("Batchcrop-Delivery-Attempt"),
                delivery=self.headers.get("Batchcrop-Delivery-Id"),
                answer=answer,
                traceparent=self.headers.get("traceparent"),
            )
            if action != "hang":  # a hung answer arrives after the sender gave up
                receiver.record(received)
            else:
                with receiver.lock:
                    receiver.requests.append(received)
                time.sleep(receiver.hang_seconds)
            try:
                self.send_response(int(status))
                if action == "redirect":
                    self.send_header("Location", f"{receiver.url}/elsewhere")
                self.send_header("Content-Length", "14")
                self.end_headers()
                self.wfile.write(b"not for echoes")
            except OSError:
                pass  # the sender gave up (timeout)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def receiving(script: Sequence[int | str] = (), hang_seconds: float = 3.0) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 (a free port) for the `with` block."""
    receiver = Receiver(list(script), hang_seconds)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/batchcrop"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


HANG_FOREVER = 10_000
"""Requests a `hanging` receiver hangs on: more than any test makes."""


@contextmanager
def hanging(count: int, hang_seconds: float) -> Iterator[list[Receiver]]:
    """`count` receivers on 127.0.0.1 (each on its own port: its own destination) that answer
    no request before `hang_seconds`, for the `with` block."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(receiving(["hang"] * HANG_FOREVER, hang_seconds))
            for _ in range(count)
        ]


@dataclass
class Trickler:
    """A receiver that answers byte by byte, one every `interval_seconds`, never finishing
    its headers (until the `with` block ends); `requests` counts the requests it read."""

    interval_seconds: float
    url: str = ""
    requests: int = 0
    stop: threading.Event = field(default_factory=threading.Event)


def _trickle(trickler: Trickler, conn: socket.socket) -> None:
    with conn:
        conn.settimeout(5.0)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            trickler.requests += 1
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000:
                if trickler.stop.wait(trickler.interval_seconds):
                    return
                conn.sendall(bytes([byte]))
        except OSError:
            return  # the sender gave up


@contextmanager
def trickling(interval_seconds: float) -> Iterator[Trickler]:
    """A trickling receiver on 127.0.0.1 (a free port) for the `with` block."""
    trickler = Trickler(interval_seconds)
    listener = socket.create_server(("127.0.0.1", 0))
    trickler.url = f"http://127.0.0.1:{listener.getsockname()[1]}/hooks/slow"

    def accept() -> None:
        while not trickler.stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_trickle, args=(trickler, conn), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield trickler
    finally:
        trickler.stop.set()
        listener.close()


def read_message(sock: socket.socket) -> bytes | None:
    """One whole HTTP message read from `sock`: its head, then `Content-Length` bytes of body
    (none without the header); None when the peer closed before it was whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head + b"\r\n\r\n" + body


@contextmanager
def answering(raw: bytes) -> Iterator[str]:
    """A receiver on 127.0.0.1 that reads each request (its head, then `Content-Length` bytes of
    body) and answers `raw` bytes as they are (not necessarily HTTP), then closes; yields its
    URL. The body is read first: closing with unread bytes makes the kernel reset the
    connection, which the sender, still writing, would meet as a connect error."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                if read_message(conn) is not None:
                    conn.sendall(raw)
            except OSError:
                return  # the sender gave up

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks/raw"
    finally:
        stop.set()
        listener.close()

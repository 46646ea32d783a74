"""A small TCP fault proxy of our own, for chaos tests: delay, drop and reset connections.

`FaultProxy(upstream_host, upstream_port).start()` listens on a free loopback port and forwards
every connection to the upstream. Faults are commands, changeable at any time from any thread:

- `configure(...)`: a fraction of *requests* fails (`fail_fraction`), each failure drawn from
  the kinds in `fault_kinds`; a fraction of requests is delayed by `delay_seconds`; a fraction
  of new *connections* is refused (`refuse_fraction`); answers trickle to the client
  `trickle_bytes` every `trickle_seconds` (a server that never quite stops sending).
- `reset_all()` resets every open connection now; `outage(seconds)` fails every request and
  every new connection for a while (a short storage or network outage).
- `cut_at(marker, then, action)`: one shot, timed by the traffic itself — on a connection whose
  client sent `marker` (say, a transaction's INSERT INTO its table), the next chunk holding
  `then` (its COMMIT) resets that connection and starts `action` (an outage, a restart), the
  chunk dropped or, with `deliver`, forwarded first (the server commits, the answer is lost).

A "request" is a chunk from the client that starts a new HTTP request (it begins with an HTTP
method), or — for non-HTTP protocols such as PostgreSQL's — any chunk from the client when
`http=False`. The fault kinds on a request:

- `reset_before`: the client's connection is reset (RST) and the request never reaches upstream;
- `reset_after`: the request is forwarded, the upstream's answer is swallowed and the client's
  connection reset — the server did the work and the client never learns it (a lost response);
- `truncate`: the request is forwarded and half of the answer's first chunk reaches the client
  before its connection is reset (a body or header cut short);
- `drop`: the connection is closed quietly (FIN) without forwarding;
- `http_503`: the proxy answers an S3-style `503 SlowDown` itself and closes (HTTP only).

Counters (`counts()`) say how many requests went through and how many faults of each kind were
injected. Threads: one accept thread plus two pump threads per connection; all daemons.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

FAULT_KINDS = ("reset_before", "reset_after", "truncate", "drop", "http_503")
HTTP_METHODS = (b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ", b"PATCH ", b"OPTIONS ")
CHUNK_BYTES = 65536
LISTEN_BACKLOG = 256
CONNECT_TIMEOUT_SECONDS = 5.0
SLOW_DOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>injected by the fault proxy</Message></Error>"
)
SLOW_DOWN_RESPONSE = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
    + f"Content-Length: {len(SLOW_DOWN_BODY)}\r\n\r\n".encode()
    + SLOW_DOWN_BODY
)


@dataclass
class FaultPlan:
    """What the proxy does to traffic now (see the module docstring)."""

    fail_fraction: float = 0.0
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    delay_fraction: float = 0.0
    delay_seconds: float = 0.0
    refuse_fraction: float = 0.0
    outage_until: float = 0.0  # time.monotonic() until which everything fails
    trickle_bytes: int = 0  # when > 0, answers reach the client this many bytes at a time,
    trickle_seconds: float = 0.0  # one piece per this many seconds (a slow or stuck server)


@dataclass(eq=False)  # identity semantics: connections live in a set
class _Conn:
    client: socket.socket
    upstream: socket.socket
    doomed: threading.Event = field(default_factory=threading.Event)  # reset at next answer
    truncated: threading.Event = field(default_factory=threading.Event)  # cut the next answer
    closed: threading.Event = field(default_factory=threading.Event)
    marked: bool = False  # the client sent the armed cut's marker
    tail: bytes = b""  # the end of the client's last chunk: a marker may straddle two chunks


@dataclass
class _Cut:
    marker: bytes
    then: bytes
    action: Callable[[], object]
    deliver: bool
    done: threading.Event = field(default_factory=threading.Event)


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN (SO_LINGER with a zero timeout)."""
    try:
        # SHUT_RD sends nothing to the peer but wakes our own thread blocked in recv on it.
        sock.shutdown(socket.SHUT_RD)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # already closed: nothing left to reset
    _quiet_close(sock)


def _close(sock: socket.socket) -> None:
    """Close with FIN, waking any thread of ours blocked in recv on it."""
    with contextlib.suppress(OSError):  # not connected any more
        sock.shutdown(socket.SHUT_RDWR)
    _quiet_close(sock)


def _quiet_close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        return


class FaultProxy:
    """Forwards 127.0.0.1:`port` to `upstream_host:upstream_port`, injecting faults on command."""

    def __init__(
        self, upstream_host: str, upstream_port: int, *, http: bool = True, seed: int | None = None
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.http = http
        self._plan = FaultPlan()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._counts: Counter[str] = Counter()
        self._cut: _Cut | None = None
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)

    @property
    def url(self) -> str:
        """`http://127.0.0.1:port` (meaningful for HTTP upstreams)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        """Start listening; returns self."""
        self._listener.listen(LISTEN_BACKLOG)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and reset every open connection."""
        self._stopping.set()
        _close(self._listener)
        self.reset_all(count=False)
        self._thread.join(5)

    # -- commands ----------------------------------------------------------------------------

    def configure(
        self,
        *,
        fail_fraction: float = 0.0,
        fault_kinds: tuple[str, ...] = FAULT_KINDS,
        delay_fraction: float = 0.0,
        delay_seconds: float = 0.0,
        refuse_fraction: float = 0.0,
        trickle_bytes: int = 0,
        trickle_seconds: float = 0.0,
    ) -> None:
        """Replace the fault plan (fractions in [0, 1], delays in seconds)."""
        kinds = tuple(k for k in fault_kinds if self.http or k != "http_503")
        with self._lock:
            outage = self._plan.outage_until
            self._plan = FaultPlan(
                fail_fraction,
                kinds,
                delay_fraction,
                delay_seconds,
                refuse_fraction,
                outage,
                trickle_bytes,
                trickle_seconds,
            )

    def outage(self, seconds: float) -> None:
        """Fail every request and refuse every connection for `seconds`, resetting open ones."""
        with self._lock:
            self._plan.outage_until = time.monotonic() + seconds
        self._count("outage")
        self.reset_all(count=False)

    def cut_at(
        self,
        marker: bytes,
        then: bytes,
        action: Callable[[], object],
        *,
        deliver: bool = False,
    ) -> threading.Event:
        """Arm a one-shot cut (see the module docstring); the event is set once it happened.
        `action` runs in a thread of its own. Arming again replaces an unfired cut."""
        cut = _Cut(marker, then, action, deliver)
        with self._lock:
            self._cut = cut
        return cut.done

    def disarm(self) -> bool:
        """Drop an armed cut that has not fired; True if there was one."""
        with self._lock:
            armed, self._cut = self._cut, None
        return armed is not None

    def _cuts(self, conn: _Conn, chunk: bytes) -> _Cut | None:
        """The armed cut, taken, if `chunk` fires it on `conn`."""
        with self._lock:
            cut = self._cut
            if cut is None:
                return None
            keep = max(len(cut.marker), len(cut.then)) - 1
            chunk, conn.tail = conn.tail + chunk, (conn.tail + chunk)[-keep:] if keep else b""
            at = chunk.find(cut.marker)
            if at >= 0:
                conn.marked = True
                chunk = chunk[at + len(cut.marker) :]
            if conn.marked and cut.then in chunk:
                self._cut = None
                return cut
        return None

    def reset_all(self, *, count: bool = True) -> int:
        """Reset every open connection now; returns how many."""
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _reset(conn.client)
            _close(conn.upstream)
        if count and conns:
            self._count("reset_all", len(conns))
        return len(conns)

    def counts(self) -> dict[str, int]:
        """Requests forwarded (`requests`), connections (`connections`) and faults by kind."""
        with self._lock:
            return dict(self._counts)

    # -- machinery ---------------------------------------------------------------------------

    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self._counts[what] += n

    def _draw(self) -> tuple[FaultPlan, float, float]:
        with self._lock:
            return self._plan, self._random.random(), self._random.random()

    def _pick(self, kinds: tuple[str, ...]) -> str:
        with self._lock:
            return self._random.choice(kinds)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        self._count("connections")
        plan, draw, _ = self._draw()
        if time.monotonic() < plan.outage_until or draw < plan.refuse_fraction:
            self._count("refused")
            _reset(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError:
            _reset(client)  # upstream down (e.g. a restarting database): the client sees it
            return
        upstream.settimeout(None)
        conn = _Conn(client, upstream)
        with self._lock:
            self._conns.add(conn)
        threading.Thread(target=self._pump_down, args=(conn,), daemon=True).start()
        self._pump_up(conn)

    def _finish(self, conn: _Conn, *, reset: bool) -> None:
        if conn.closed.is_set():
            return
        conn.closed.set()
        with self._lock:
            self._conns.discard(conn)
        if reset:
            _reset(conn.client)
        else:
            _close(conn.client)
        _close(conn.upstream)

    def _is_request(self, chunk: bytes) -> bool:
        return not self.http or chunk.startswith(HTTP_METHODS)

    def _pump_up(self, conn: _Conn) -> None:
        """Client → upstream, deciding the fate of each request as it starts."""
        while not conn.closed.is_set():
            try:
                chunk = conn.client.recv(CHUNK_BYTES)
            except OSError:
                break
            if not chunk:
                break
            cut = self._cuts(conn, chunk)
            if cut is not None:
                if self._fire(conn, cut, chunk):
                    return
                continue
            if self._is_request(chunk):
                fate = self._fate()
                if fate in ("reset_before", "drop"):
                    self._finish(conn, reset=fate == "reset_before")
                    return
                if fate == "http_503":
                    self._answer_503(conn)
                    return
                if fate == "reset_after":
                    conn.doomed.set()
                if fate == "truncate":
                    conn.truncated.set()
            try:
                conn.upstream.sendall(chunk)
            except OSError:
                break
        self._finish(conn, reset=False)

    def _fire(self, conn: _Conn, cut: _Cut, chunk: bytes) -> bool:
        """Cut `conn` at `chunk` and start the cut's action; True when `conn` is finished (the
        chunk dropped), False when the chunk went through and only its answer will be lost."""
        if cut.deliver:
            with contextlib.suppress(OSError):
                conn.upstream.sendall(chunk)
            conn.doomed.set()
        else:
            self._finish(conn, reset=True)
        self._count("cut")
        threading.Thread(target=cut.action, name="proxy-cut", daemon=True).start()
        cut.done.set()
        return not cut.deliver

    def _fate(self) -> str | None:
        """Count one request and decide: None (pass) or a fault kind; may sleep for a delay."""
        plan, draw, delay_draw = self._draw()
        self._count("requests")
        if time.monotonic() < plan.outage_until:
            kind = "reset_before"
        elif draw < plan.fail_fraction and plan.fault_kinds:
            kind = self._pick(plan.fault_kinds)
        else:
            if delay_draw < plan.delay_fraction and plan.delay_seconds > 0:
                self._count("delay")
                time.sleep(plan.delay_seconds)
            return None
        self._count(kind)
        return kind

    def _answer_503(self, conn: _Conn) -> None:
        with contextlib.suppress(OSError):  # a client gone first sees a failure either way
            conn.client.sendall(SLOW_DOWN_RESPONSE)
        self._finish(conn, reset=False)

    def _pump_down(self, conn: _Conn) -> None:
        """Upstream → client; a doomed connection is reset instead of answered."""
        while not conn.closed.is_set():
            try:
                chunk = conn.upstream.recv(CHUNK_BYTES)
            except OSError:
                break
            if not chunk:
                break
            if conn.doomed.is_set():
                self._finish(conn, reset=True)
                return
            if conn.truncated.is_set():
                with contextlib.suppress(OSError):
                    conn.client.sendall(chunk[: max(1, len(chunk) // 2)])
                self._finish(conn, reset=True)
                return
            if not self._send_down(conn, chunk):
                break
        self._finish(conn, reset=False)

    def _send_down(self, conn: _Conn, chunk: bytes) -> bool:
        """Send `chunk` to the client, trickled when the plan says so; False if it is gone."""
        with self._lock:
            size, pause = self._plan.trickle_bytes, self._plan.trickle_seconds
        pieces = [chunk] if size <= 0 else [chunk[i : i + size] for i in range(0, len(chunk), size)]
        for n, piece in enumerate(pieces):
            if n and conn.closed.wait(pause):
                return False
            try:
                conn.client.sendall(piece)
            except OSError:
                return False
        return True

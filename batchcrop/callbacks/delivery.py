"""Completion callbacks: which URLs a batch may give, how a request is signed, and a
delivery's lease, timeouts and outcomes (docs/design.md §7, callbacks; ADR 0013; its words:
ADR 0030).

A delivery is a lease item (its own one-item group, written in the outbox transaction by
`BatchService.on_group_finished`), so it is claimed, fenced, retried with backoff, released
when its holder dies and abandoned at its deadline by the lease engine, like an image. The
`Deliverer` thread (`batchcrop.callbacks.deliverer`) of every worker and of `serve` claims
due deliveries and POSTs them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from batchcrop.callbacks.hosts import (
    DEFAULT_PORTS,
    HOST_NOT_ALLOWED,
    PORT_MAX,
    PORT_NOT_ALLOWED,
    destination_refusal,
)
from leases import LeaseManager

if TYPE_CHECKING:
    import httpx

CALLBACK_URL_CHARS_MAX = 2048
DELIVERY_WINDOW_SECONDS = 24 * 3600.0
"""A delivery is retried for this long after it is written, then abandoned
(`deadline_exceeded`); an operator can redeliver."""
DELIVERY_MAX_ATTEMPTS = 100
"""More attempts than the backoff fits in the window: the window is what ends a delivery."""
DELIVERY_RETRY_MAX_SECONDS = 3600.0
DELIVERY_LEASE_SECONDS = 60.0
"""A delivery's lease: well over its timeouts, so a live deliverer never loses it, while a
dead unregistered one (`serve`) holds it no longer than this."""
CONNECT_TIMEOUT_SECONDS = 5.0
RESPONSE_TIMEOUT_SECONDS = 10.0
"""Each of connect, write and read waits at most this; a receiver should answer at once and
do its work afterwards."""
DELIVERY_DEADLINE_SECONDS = 15.0
"""A whole request (connect, send, the answer's status line and headers) ends within this, or
the attempt is a `timeout`: a receiver trickling its answer cannot hold a deliverer."""
assert DELIVERY_DEADLINE_SECONDS < DELIVERY_LEASE_SECONDS

SIGNATURE_HEADER = "Batchcrop-Signature"
TIMESTAMP_DIGITS_MAX = 12
"""Digits of a signature's `t` (unix seconds) a verifier reads; more is malformed."""
IDEMPOTENCY_HEADER = "Idempotency-Key"
NOTIFICATION_ID_FIELD = "notification_id"
"""The body's first field: the `Idempotency-Key`, under the signature."""
TIMEOUT = "timeout"
CONNECT_ERROR = "connect_error"
PROTOCOL_ERROR = "protocol_error"
"""The receiver answered something that is not HTTP/1.1: garbage, an HTTP/0.9 body, headers
past h11's 16 KiB limit, or a close before any answer. Retried, like a refused connection."""
INVALID_URL = "invalid_url"
CALLBACK_SCHEMES = ("http", "https")

OpenDeliveries = Callable[[], list[str]]
"""Asked by a `Deliverer` for the deliveries it may claim now (`BatchService.open_deliveries`)."""


class CallbackUrlError(ValueError):
    """A `callback_url` batchcrop will not call; the message says why (never echoing it)."""


def parse_url(url: str) -> httpx.URL:
    """`url` parsed as the deliverer will send it (httpx: IDNA host names, ports);
    `CallbackUrlError` when it cannot be, so what submission accepts delivery can send."""
    import httpx  # noqa: PLC0415  (imported when a URL is given: start-up of `run`, `status`)

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError):
        # ValueError: the idna package's errors (a host name no IDNA encoding allows).
        raise CallbackUrlError("is not a valid URL (or its host name is not valid IDNA)") from None
    if parsed.port is not None and not 0 < parsed.port <= PORT_MAX:
        raise CallbackUrlError(f"has a port outside 1..{PORT_MAX}")
    return parsed


def url_host(url: str) -> str | None:
    """The host of `url` as sent (ASCII: IDNA-encoded), lower-case, without brackets; None
    when it has none or cannot be parsed."""
    try:
        host = parse_url(url).raw_host.decode("ascii")
    except CallbackUrlError:
        return None
    return host.lower() if host else None


def check_callback_url(url: str, hosts: tuple[str, ...]) -> str:
    """`url` if batchcrop may POST to it: http(s), a host and port on `hosts`
    (`BATCHCROP_CALLBACK_HOSTS`, `batchcrop.callbacks.hosts`), no credentials, at most
    `CALLBACK_URL_CHARS_MAX` characters; `CallbackUrlError` otherwise. What its name resolves to
    is checked when it is called."""
    if not 1 <= len(url) <= CALLBACK_URL_CHARS_MAX or any(ord(c) < 33 or c == "\x7f" for c in url):
        raise CallbackUrlError(
            f"must be an http(s) URL of at most {CALLBACK_URL_CHARS_MAX} characters, "
            "without spaces or control characters"
        )
    parts = parse_url(url)
    if parts.scheme not in CALLBACK_SCHEMES or not parts.raw_host:
        raise CallbackUrlError("must be an http:// or https:// URL with a host")
    if parts.userinfo:
        raise CallbackUrlError("must not carry credentials (the request is signed instead)")
    refusal = destination_refusal(parts, hosts)
    if refusal == HOST_NOT_ALLOWED:
        raise CallbackUrlError(
            "names a host that is not allowed: callbacks go only to hosts listed in "
            "BATCHCROP_CALLBACK_HOSTS"
        )
    if refusal == PORT_NOT_ALLOWED:
        raise CallbackUrlError(
            "names a port that is not allowed: a BATCHCROP_CALLBACK_HOSTS entry allows the "
            "scheme's default port unless it names another (host:port)"
        )
    return url


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The `Batchcrop-Signature` value: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`
    (Stripe's scheme, so receivers' libraries fit)."""
    signed = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def callback_body(notification_id: str, stored: str) -> bytes:
    """The bytes POSTed for a delivery: the stored status document with `notification_id` (the
    `Idempotency-Key`) as its first field, so the signature covers the key too and a signed
    body replayed under another key is detectable (ADR 0016). Composed at sending, so
    deliveries written before the field existed carry it as well."""
    document = json.loads(stored)
    fields = {k: v for k, v in document.items() if k != NOTIFICATION_ID_FIELD}
    signed = {NOTIFICATION_ID_FIELD: notification_id, **fields}
    return json.dumps(signed, separators=(",", ":"), ensure_ascii=False).encode()


def verify(
    secret: str,
    body: bytes,
    header: str,
    *,
    idempotency_key: str | None = None,
    tolerance_seconds: float = 300.0,
) -> bool:
    """A receiver's check of `header` over `body` (used by the tests; a model for receivers):
    the timestamp within `tolerance_seconds` of now and some `v1` matching and, given the
    request's `idempotency_key`, the signed body's `notification_id` equal to it. False, never
    an exception, for any malformed header or body."""
    fields = [part.split("=", 1) for part in header.split(",") if "=" in part]
    stamps = [v for k, v in fields if k == "t"]
    # Only ASCII digits, and few of them: `isdigit` alone accepts "²" (which `int` refuses)
    # and other scripts' digits, and a huge number cannot be compared with a float.
    if len(stamps) != 1 or not (stamps[0].isascii() and stamps[0].isdigit()):
        return False
    if len(stamps[0]) > TIMESTAMP_DIGITS_MAX:
        return False
    timestamp = int(stamps[0])
    if abs(time.time() - timestamp) > tolerance_seconds:
        return False
    expected = signature(secret, body, timestamp).split("v1=", 1)[1].encode()
    # Compared as bytes: `compare_digest` raises on str with non-ASCII characters.
    if not any(
        k == "v1" and hmac.compare_digest(v.encode(errors="replace"), expected) for k, v in fields
    ):
        return False
    return idempotency_key is None or _signed_key(body) == idempotency_key


def _signed_key(body: bytes) -> str | None:
    """The `notification_id` of a (signature-checked) body, or None."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    key = document.get(NOTIFICATION_ID_FIELD) if isinstance(document, dict) else None
    return key if isinstance(key, str) else None


def resolve(url: httpx.URL) -> list[str]:
    """The addresses `url`'s host resolves to (an IP address: itself), in resolver order;
    OSError (or UnicodeError, for a name the resolver cannot encode) when it resolves to
    none."""
    host = url.raw_host.decode("ascii")
    port = DEFAULT_PORTS.get(url.scheme, 0) if url.port is None else url.port
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def delivery_leases(
    engine: sa.Engine, *, retry_seconds: float, worker_timeout_seconds: float
) -> LeaseManager:
    """A lease manager for claiming deliveries: the same tables and fencing as the images',
    with the deliveries' own lease and backoff (`retry_seconds` doubling to an hour)."""
    return LeaseManager(
        engine,
        lease_seconds=DELIVERY_LEASE_SECONDS,
        max_attempt_seconds=DELIVERY_LEASE_SECONDS,
        retry_backoff_seconds=retry_seconds,
        retry_backoff_max_seconds=DELIVERY_RETRY_MAX_SECONDS,
        worker_timeout_seconds=worker_timeout_seconds,
    )

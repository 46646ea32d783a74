"""ASGI guards around the application: a request body cap, a last-resort 500, `nosniff`,
`HEAD` answered as `GET`.

Both answer with problem documents. They are plain ASGI (not `BaseHTTPMiddleware`) so that
they add no task or thread hop to every request.
"""

from __future__ import annotations

import logging
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from batchcrop.api.problems import Problem, problem_response
from batchcrop.logs import log_event

BODY_BYTES_MAX = 16 * 1024 * 1024
NOSNIFF_HEADER = b"x-content-type-options"

log = logging.getLogger("batchcrop.api")


class BodyTooLarge(HTTPException):
    """Raised from `receive` once a chunked body grows past the cap.

    An `HTTPException`, because FastAPI re-raises those from its body reader unchanged (any other
    exception there becomes a 400), so the API's HTTP error handler answers it with a 413.
    """

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body larger than {max_bytes} bytes")


async def answer(scope: Scope, receive: Receive, send: Send, problem: Problem) -> None:
    """Answer the request with `problem` (a guard's refusal)."""
    response = problem_response(problem, instance=str(scope.get("path", "")))
    await response(scope, receive, send)


class _StartTracker:
    """A `send` that remembers whether the response has started: after that, a guard can no
    longer answer with a problem document and must let the error through."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self.send(message)


def _too_large(limit: int) -> Problem:
    return Problem(413, f"request body larger than {limit} bytes", slug="body-too-large")


class BodyLimit:
    """413 before parsing: a declared `Content-Length` over `max_bytes` is refused unread;
    a chunked body is counted as it arrives and refused once it passes the cap."""

    def __init__(self, app: ASGIApp, *, max_bytes: int = BODY_BYTES_MAX) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await answer(scope, receive, send, _too_large(self.max_bytes))
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        tracked = _StartTracker(send)
        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if tracked.started:
                raise
            await answer(scope, receive, send, _too_large(self.max_bytes))


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            # The server (h11/httptools) already refused a malformed Content-Length.
            return int(value) if value.isdigit() else None
    return None


class CrashGuard:
    """Any exception no handler claimed becomes a bare 500 problem; the details go to the log."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tracked = _StartTracker(send)
        try:
            await self.app(scope, receive, tracked)
        except BodyTooLarge:
            raise
        except Exception:
            log.exception("unhandled error answering %s %s", scope.get("method"), scope.get("path"))
            if tracked.started:
                raise
            problem = Problem(500, "internal error; the server log has the details")
            await answer(scope, receive, send, problem)


class HeadAsGet:
    """`HEAD` on every `GET` route (RFC 9110 §9.3.2): the request is answered as a `GET` whose
    body is dropped, with the GET's status and headers, `Content-Length` included. FastAPI's
    routes name `GET` alone, so a `HEAD` was a 405. Outer guards and the access log still see
    `HEAD`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def bodiless(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, bodiless)


class NoSniff:
    """`X-Content-Type-Options: nosniff` on every response: a browser never second-guesses a
    declared type (a JSON document or a derivative is never run as script or page)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != NOSNIFF_HEADER]
                message = {**message, "headers": [*headers, (NOSNIFF_HEADER, b"nosniff")]}
            await send(message)

        await self.app(scope, receive, with_header)


class AccessLog:
    """One `http_request` log line per answered request, in the process's log format: method,
    path (never the query string, which may carry a cursor or anything a client put there),
    status, duration and client address."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500  # what the client gets if nothing answers (the server's own 500)

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            client = scope.get("client")
            log_event(
                "http_request",
                method=scope.get("method"),
                path=scope.get("path"),
                status=status,
                ms=round((time.monotonic() - started) * 1000, 1),
                client=client[0] if client else None,
            )

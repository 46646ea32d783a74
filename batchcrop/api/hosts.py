"""Which `Host` the API answers, and which `Origin` may change state: the DNS-rebinding guard.

Without a token the API trusts whoever can reach it, which is meant to be this machine only. A
web page the operator visits can point a name it controls at 127.0.0.1 (DNS rebinding) and then
read and write the API as a same-origin page of that name. So, without a token, only loopback
host names are answered (plus `BATCHCROP_ALLOWED_HOSTS`, for a proxy in front); with a token,
only the allowed hosts when that list is set. Independently, a state-changing request whose
`Origin` is another site's is refused, token or not: browsers send `Origin` on every such
request, so the operator page's own requests (same origin) pass and a foreign page's do not.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from batchcrop.api.middleware import answer
from batchcrop.api.problems import Problem

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1); False for the rest,
    including `0.0.0.0`/`::` (every interface) and any other host name."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str:
    """The name part of a `Host` header or an origin's authority: no port, lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    name, colon, port = value.rpartition(":")
    return name if colon and port.isdigit() else value


class HostGuard:
    """400 for a `Host` this server does not answer; 403 for a cross-site state change."""

    def __init__(
        self, app: ASGIApp, *, token_set: bool, allowed_hosts: Collection[str] = ()
    ) -> None:
        self.app = app
        self.token_set = token_set
        self.allowed = frozenset(host_name(h) for h in allowed_hosts)

    def host_allowed(self, name: str) -> bool:
        """Whether requests naming host `name` are answered."""
        if name in self.allowed:
            return True
        if self.allowed and self.token_set:
            return False
        return self.token_set or is_loopback(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if not self.host_allowed(host_name(host)):
            problem = Problem(400, "this server does not answer for that Host", slug="bad-host")
            await answer(scope, receive, send, problem)
            return
        origin = headers.get("origin")
        if scope["method"] not in SAFE_METHODS and origin is not None:
            authority = origin.partition("://")[2]
            if authority.lower() != host.strip().lower():
                problem = Problem(
                    403, "cross-origin requests may not change anything", slug="cross-origin"
                )
                await answer(scope, receive, send, problem)
                return
        await self.app(scope, receive, send)

"""Bearer-token authentication: with `BATCHCROP_API_TOKEN` set, every endpoint but `/healthz`
needs `Authorization: Bearer <token>`; without it the API is open (loopback only, see `server`).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from batchcrop.api.problems import Problem

_bearer = HTTPBearer(auto_error=False, description="BATCHCROP_API_TOKEN")


def _unauthorized(detail: str, *, challenge: str) -> Problem:
    return Problem(401, detail, slug="unauthorized", headers={"WWW-Authenticate": challenge})


def token_guard(token: str | None) -> Callable[..., None]:
    """A FastAPI dependency enforcing `token` (None: accept every request).

    The comparison is constant-time over bytes (`hmac.compare_digest`), so neither timing nor a
    non-ASCII header can tell an attacker how much of a guess was right.
    """
    expected = token.encode() if token else None

    def guard(
        credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
    ) -> None:
        if expected is None:
            return
        if credentials is None:
            raise _unauthorized(
                "this endpoint needs Authorization: Bearer <token>", challenge="Bearer"
            )
        if not hmac.compare_digest(credentials.credentials.encode(), expected):
            raise _unauthorized(
                "the bearer token is not valid", challenge='Bearer error="invalid_token"'
            )

    return guard

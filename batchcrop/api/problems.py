"""RFC 9457 problem details: the one shape every error response of the API takes.

A problem carries `type`, `title`, `status`, `detail` and `instance`; validation problems add
`errors`, a list of `{"field", "message"}`. Details are written for the client: they name the
offending field and never carry stack traces, internal paths, SQL or secrets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from starlette.responses import Response

from batchcrop.errors import without_field

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:batchcrop:problem:"
ERRORS_LISTED_MAX = 20
"""At most this many field errors are listed in one problem, so a huge bad body stays small."""


class Problem(Exception):
    """An error answered as a problem document; raise it from any endpoint or dependency.

    `slug` names the problem type (`urn:batchcrop:problem:<slug>`); `headers` are added to the
    response (e.g. `WWW-Authenticate`, `Retry-After`); `extensions` are members of the document
    beside the standard ones (RFC 9457 §3.2), e.g. a conflicting re-crop's pending box.
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        slug: str | None = None,
        errors: Sequence[Mapping[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.extensions = dict(extensions or {})
        self.status = status
        self.detail = detail
        self.slug = slug
        self.errors = list(errors)[:ERRORS_LISTED_MAX]
        self.headers = dict(headers or {})


def field_problem(
    field: str, message: str, *, status: int = 422, slug: str = "invalid-request"
) -> Problem:
    """A problem about one field (`items[3].source`, `cursor`, ...), listed in `errors`; the
    detail names the field once (`max_side: must be in 16..10000, got -5`), whether or not the
    domain's message began with it."""
    message = without_field(field, message)
    return Problem(
        status, f"{field}: {message}", slug=slug, errors=[{"field": field, "message": message}]
    )


def problem_document(problem: Problem, *, instance: str) -> dict[str, Any]:
    """The JSON body for `problem`; `instance` is the request path (no query string)."""
    phrase = HTTPStatus(problem.status).phrase
    document: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + problem.slug if problem.slug else "about:blank",
        "title": phrase,
        "status": problem.status,
        "detail": problem.detail,
        "instance": instance,
    }
    if problem.errors:
        document["errors"] = problem.errors
    document.update(problem.extensions)
    return document


def problem_response(problem: Problem, *, instance: str) -> Response:
    """The response for `problem`, with its headers and the problem media type."""
    body = json.dumps(problem_document(problem, instance=instance), ensure_ascii=False)
    return Response(
        content=body.encode(),
        status_code=problem.status,
        headers=problem.headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )

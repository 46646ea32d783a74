"""Exception handlers: every error the API answers is a problem document (RFC 9457).

Domain errors map to statuses here, in one table, so endpoints simply let them propagate.
Messages of library errors are never echoed: they can hold paths, SQL or credentials.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match

from batchcrop.api.problems import Problem, field_problem, problem_response
from batchcrop.batches.errors import (
    BadCursor,
    BatchEnded,
    EmptyBatch,
    IdempotencyConflict,
    NeedsNewDeadline,
    NoSuchBatch,
    NoSuchRef,
    NothingToRedeliver,
)
from batchcrop.batches.recrop import BatchCancelled, RecropConflict
from batchcrop.errors import without_field
from leases import DatabaseUnavailable

DATABASE_RETRY_AFTER_SECONDS = 5
_VALUE_ERROR_PREFIX = "Value error, "
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_HTTP_SLUGS = {
    401: "unauthorized",
    404: "not-found",
    405: "method-not-allowed",
    413: "body-too-large",
}


def field_name(location: Sequence[int | str]) -> str:
    """`("body", "items", 3, "source")` ⇒ `items[3].source`; `("query", "limit")` ⇒ `limit`."""
    where, parts = (location[0], list(location[1:])) if location else ("", [])
    if where not in ("body", "query", "path", "header"):
        parts = list(location)
    elif where == "header" and parts:
        return "-".join(w.capitalize() for w in str(parts[0]).split("-"))
    elif where == "body" and parts[:1] and isinstance(parts[0], int):
        return "body"  # the body as a whole, e.g. a JSON syntax error at some offset
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


_NOT_AN_OBJECT = frozenset({"model_attributes_type", "dict_type", "model_type"})


def _message(error: dict[str, Any]) -> str:
    if tuple(error.get("loc", ())) == ("body",) and error.get("type") in _NOT_AN_OBJECT:
        # A body that is not a JSON object: most often one sent without its media type, which
        # arrives as text and reads "should be a valid dictionary" to the model.
        return "must be a JSON object, sent with Content-Type: application/json"
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "")
        return f"not valid JSON ({reason})" if reason else "not valid JSON"
    return str(error.get("msg", "invalid value")).removeprefix(_VALUE_ERROR_PREFIX)


def validation_problem(exc: RequestValidationError) -> Problem:
    """422 listing each offending field with pydantic's message (never the input itself)."""
    errors = []
    for error in exc.errors():
        field = field_name(error.get("loc", ()))
        errors.append({"field": field, "message": without_field(field, _message(error))})
    first = errors[0] if errors else {"field": "body", "message": "invalid request"}
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Problem(
        422, f"{first['field']}: {first['message']}{more}", slug="invalid-request", errors=errors
    )


def allowed_methods(api: FastAPI, request: Request) -> list[str]:
    """Every method some route of `api` answers on this request's path, sorted.

    Asked of the router itself, method by method, so that included routers count too.
    """
    allowed = [
        method
        for method in HTTP_METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in api.router.routes
        )
    ]
    return sorted(allowed)


def _instance(request: Request) -> str:
    return request.url.path


def install(api: FastAPI) -> None:
    """Register every handler on `api`."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return problem_response(exc, instance=_instance(request))

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem_response(validation_problem(exc), instance=_instance(request))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else "request refused"
        headers = exc.headers
        if exc.status_code == 405:
            # The router names the methods of the first route on the path only; one path can be
            # several routes (GET and POST /v1/batches), so list every route's.
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(api, request))}
        problem = Problem(
            exc.status_code, detail, slug=_HTTP_SLUGS.get(exc.status_code), headers=headers
        )
        return problem_response(problem, instance=_instance(request))

    def mapped(
        status: int, slug: str, *, field: str | None = None, headers: dict[str, str] | None = None
    ) -> Any:
        async def handler(request: Request, exc: Exception) -> Response:
            # Domain messages are written for users (ids, the rule broken); library ones are not.
            if field is not None:
                problem = field_problem(field, str(exc), status=status)
            else:
                problem = Problem(status, str(exc), slug=slug, headers=headers)
            return problem_response(problem, instance=_instance(request))

        return handler

    api.add_exception_handler(Problem, on_problem)
    api.add_exception_handler(RequestValidationError, on_validation)
    api.add_exception_handler(HTTPException, on_http)
    api.add_exception_handler(NoSuchBatch, mapped(404, "not-found"))
    api.add_exception_handler(NoSuchRef, mapped(404, "not-found"))
    api.add_exception_handler(IdempotencyConflict, mapped(409, "idempotency-conflict"))
    api.add_exception_handler(EmptyBatch, mapped(422, "invalid-request", field="items"))
    api.add_exception_handler(BadCursor, mapped(422, "invalid-request", field="cursor"))
    api.add_exception_handler(NeedsNewDeadline, _requeue_needs_deadline)
    api.add_exception_handler(NothingToRedeliver, mapped(409, "nothing-to-redeliver"))
    api.add_exception_handler(BatchEnded, mapped(409, "batch-ended"))
    api.add_exception_handler(DatabaseUnavailable, _database_unavailable)
    api.add_exception_handler(RecropConflict, _recrop_conflict)
    api.add_exception_handler(BatchCancelled, mapped(409, "batch-cancelled"))


async def _recrop_conflict(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RecropConflict)
    problem = Problem(
        409,
        str(exc),
        slug="recrop-conflict",
        extensions={"state": exc.state, "focus_box": exc.focus_box},
    )
    return problem_response(problem, instance=_instance(request))


async def _requeue_needs_deadline(request: Request, exc: Exception) -> Response:
    problem = field_problem(
        "deadline_seconds",
        "this batch was cancelled or is past its deadline, so a requeue needs a new deadline",
        status=409,
        slug="requeue-needs-deadline",
    )
    return problem_response(problem, instance=_instance(request))


async def _database_unavailable(request: Request, exc: Exception) -> Response:
    problem = Problem(
        503,
        "the database is unavailable; retry later",
        slug="database-unavailable",
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
    )
    return problem_response(problem, instance=_instance(request))

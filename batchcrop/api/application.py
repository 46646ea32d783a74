"""The FastAPI application: routes, auth, problem handlers and the request guards, wired to an
`App` from the composition root.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from batchcrop.api import handlers, models
from batchcrop.api.auth import token_guard
from batchcrop.api.hosts import HostGuard
from batchcrop.api.media import media_router
from batchcrop.api.middleware import (
    BODY_BYTES_MAX,
    AccessLog,
    BodyLimit,
    CrashGuard,
    HeadAsGet,
    NoSniff,
)
from batchcrop.api.problems import Problem
from batchcrop.api.routes import PROBLEM_RESPONSE, batch_router, json_response
from batchcrop.app import App
from batchcrop.batches.fleet import worker_documents
from batchcrop.web import page_router
from leases import REDOABLE, REQUEUEABLE, TERMINAL, UNFINISHED, DatabaseUnavailable, state_names

API_TITLE = "batchcrop"
API_VERSION = "1"


def _ops_router(app: App, api: FastAPI) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/metrics", response_class=Response, responses={401: PROBLEM_RESPONSE})
    def metrics() -> Response:
        """Prometheus text exposition of this process's counters."""
        return Response(app.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @router.get("/v1/meta", response_model=models.Meta)
    def meta() -> Response:
        """The state vocabulary (which states are terminal, unfinished, requeueable)."""
        return json_response(meta_document())

    @router.get("/v1/workers", response_model=models.WorkerList)
    def workers() -> Response:
        """The worker registry: every worker, alive or no longer seen, and what each holds."""
        return json_response({"workers": worker_documents(app.leases.workers())})

    @router.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        """This API's OpenAPI document (behind the token like everything but `/healthz`)."""
        return api.openapi()

    return router


def meta_document() -> dict[str, list[str]]:
    """The state sets of the lease engine as names, in the lifecycle order of `State`."""
    return {
        "states": state_names(),
        "terminal_states": state_names(TERMINAL),
        "unfinished_states": state_names(UNFINISHED),
        "requeueable_states": state_names(REQUEUEABLE),
        "recroppable_states": state_names(REDOABLE),
    }


def _health_router(app: App) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/healthz", response_model=models.Health, responses={503: PROBLEM_RESPONSE})
    def healthz() -> Response:
        """200 when the database answers a trivial query; no authentication."""
        try:
            with app.leases.reading() as conn:
                conn.execute(sa.select(sa.literal(1)))
        except (DatabaseUnavailable, sa.exc.SQLAlchemyError) as exc:
            raise Problem(503, "the database is unavailable", slug="database-unavailable") from exc
        return json_response({"status": "ok"})

    return router


def create_api(app: App, *, max_body_bytes: int = BODY_BYTES_MAX) -> FastAPI:
    """The ASGI application serving `app`; safe to call once per process (or per test)."""
    api = FastAPI(
        title=API_TITLE,
        version=API_VERSION,
        description="Batch status API of batchcrop: submit, poll, inspect, cancel, requeue.",
        openapi_url=None,  # served by `_ops_router`, behind the token
        docs_url=None,
        redoc_url=None,
        # Starlette answers `/v1/batches/` with a redirect to an absolute URL built from the
        # request's Host, before any route's token check: an open redirect to any host. Every
        # path has one spelling; another is a 404.
        redirect_slashes=False,
    )
    guard = Depends(token_guard(app.settings.api_token))
    api.include_router(_health_router(app))
    api.include_router(batch_router(app), dependencies=[guard])
    api.include_router(_ops_router(app, api), dependencies=[guard])
    api.include_router(media_router(app), dependencies=[guard])
    api.include_router(page_router())  # HTML/JS/CSS shells only: the data needs the token
    handlers.install(api)
    # Added last = outermost: `nosniff` goes on every answer, refusals included; the Host check,
    # then the body cap, act before anything reads the body.
    api.add_middleware(HeadAsGet)  # innermost: the guards and the log see the HEAD
    api.add_middleware(CrashGuard)
    api.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    api.add_middleware(
        HostGuard,
        token_set=bool(app.settings.api_token),
        allowed_hosts=app.settings.allowed_hosts,
    )
    api.add_middleware(NoSniff)
    api.add_middleware(AccessLog)  # outermost: logs every answer, refusals included
    return api

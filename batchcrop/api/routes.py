"""The `/v1/batches` endpoints. Sync handlers: FastAPI runs them in its threadpool, since the
database layer is synchronous. Domain errors propagate to `handlers`, which map them to problems.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query
from starlette.responses import Response

from batchcrop.api import models, polling
from batchcrop.api.problems import field_problem
from batchcrop.api.requests import batch_request, path_id, query_id
from batchcrop.app import App
from batchcrop.batches.reads import PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX
from batchcrop.batches.recrop import FocusOutside, recrop
from batchcrop.batches.serving import unserved_warning
from batchcrop.batches.submission import IDEMPOTENCY_KEY_CHARS_MAX
from batchcrop.callbacks.delivery import CallbackUrlError
from leases import State

CURSOR_CHARS_MAX = 64
SUBMIT_WARNING_HEADER = "Batchcrop-Warning"
"""On `POST /v1/batches`: why the batch may not be worked (no live worker serves its store)."""
IF_NONE_MATCH_CHARS_MAX = 4096
PROBLEM_RESPONSE = {"model": models.ProblemDocument, "content": {"application/problem+json": {}}}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: PROBLEM_RESPONSE,
    404: PROBLEM_RESPONSE,
    413: PROBLEM_RESPONSE,
    422: PROBLEM_RESPONSE,
    503: PROBLEM_RESPONSE,
}

Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX, description="page size")]
Cursor = Annotated[
    str | None, Query(max_length=CURSOR_CHARS_MAX, description="next_cursor of the previous page")
]


def json_response(
    document: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        polling.encode(document),
        status_code=status,
        headers=headers,
        media_type=polling.JSON_MEDIA_TYPE,
    )


def batch_router(app: App) -> APIRouter:
    """Every `/v1/batches` endpoint, bound to `app`'s services."""
    router = APIRouter(prefix="/v1/batches", tags=["batches"], responses=PROBLEM_RESPONSES)
    sources = app.source_reader(trusted=False)
    statuses = polling.StatusReader(app.batches)

    @router.post(
        "",
        status_code=201,
        response_model=None,
        responses={
            201: {
                "model": models.StatusDocument,
                "description": "created; a `Batchcrop-Warning` header says when no live worker "
                "serves the batch's store",
            },
            200: {"model": models.StatusDocument, "description": "the batch of this key"},
            409: PROBLEM_RESPONSE,
        },
    )
    def submit_batch(
        body: models.BatchBody,
        idempotency_key: Annotated[
            str | None, Header(min_length=1, max_length=IDEMPOTENCY_KEY_CHARS_MAX)
        ] = None,
    ) -> Response:
        """Create a batch; with `Idempotency-Key`, a repeat of the same body returns it (200)."""
        request = batch_request(body, sources, idempotency_key)
        try:
            document, created = app.batches.submit(request)
        except CallbackUrlError as exc:
            # Named as the client named it: `notify_url` is the deprecated name (ADR 0030).
            raise field_problem(body.callback_url_field, str(exc)) from exc
        headers = {"Location": f"/v1/batches/{document['id']}"}
        warning = unserved_warning(app.leases, document["store"], document["id"])
        if warning is not None:
            # A header is Latin-1: a store URL naming a non-ASCII folder is escaped.
            headers[SUBMIT_WARNING_HEADER] = warning.encode("ascii", "backslashreplace").decode()
        return json_response(document, 201 if created else 200, headers)

    @router.get("", response_model=models.BatchPage)
    def list_batches(
        state: Annotated[models.StateName | None, Query()] = None,
        label: Annotated[models.LabelFilter | None, Query(description="only this label")] = None,
        q: Annotated[
            models.SearchText | None,
            Query(
                description="id prefix, part of the label (any case), or an item's exact ref "
                "or source"
            ),
        ] = None,
        cursor: Cursor = None,
        limit: Limit = PAGE_LIMIT_DEFAULT,
    ) -> Response:
        """Status documents, newest first, optionally only those in `state`, with `label` or
        found by `q`. Filtered pages may be short (even empty) yet have a `next_cursor`."""
        page, next_cursor = app.batches.list_batches(
            state=State(state) if state else None,
            label=label,
            search=q,
            cursor=cursor,
            limit=limit,
        )
        return json_response({"batches": page, "next_cursor": next_cursor})

    @router.get(
        "/{batch_id}",
        response_model=models.StatusDocument,
        responses={304: {"description": "unchanged since the ETag in If-None-Match"}},
    )
    def get_batch(
        batch_id: str,
        if_none_match: Annotated[str | None, Header()] = None,
    ) -> Response:
        """The status document with a strong ETag; `If-None-Match` ⇒ 304. Follow `Retry-After`."""
        # A longer list than any client sends names no current tag: answered in full, not 422.
        usable = (
            if_none_match
            if if_none_match and len(if_none_match) <= IF_NONE_MATCH_CHARS_MAX
            else None
        )
        response = statuses.respond(path_id(batch_id, what="batch"), if_none_match=usable)
        if response.status_code == 304:
            app.metrics.polls_not_modified.inc()
        return response

    @router.get("/{batch_id}/items", response_model=models.ItemPage)
    def list_items(
        batch_id: str,
        state: Annotated[
            list[models.StateName] | None, Query(max_length=len(State), description="repeatable")
        ] = None,
        cursor: Cursor = None,
        from_ref: Annotated[
            models.RefText | None,
            Query(description="start at the first item (of those states) with this exact ref"),
        ] = None,
        limit: Limit = PAGE_LIMIT_DEFAULT,
    ) -> Response:
        """Item documents in submission order, optionally only those in the given states,
        from `cursor` or from the first item whose ref is `from_ref` (404 when none is)."""
        states = [State(s) for s in state] if state else None
        page, next_cursor = app.batches.items(
            path_id(batch_id, what="batch"),
            states=states,
            cursor=cursor,
            from_ref=from_ref,
            limit=limit,
        )
        return json_response({"items": page, "next_cursor": next_cursor})

    @router.get("/{batch_id}/items/{item_id}", response_model=models.ItemDocument)
    def get_item(batch_id: str, item_id: str) -> Response:
        """One item document with its derivatives."""
        document = app.batches.item(path_id(batch_id, what="batch"), path_id(item_id, what="item"))
        return json_response(document)

    @router.get("/{batch_id}/events", response_model=models.EventPage)
    def list_events(
        batch_id: str,
        item: Annotated[models.UuidText | None, Query(description="only this item")] = None,
        cursor: Cursor = None,
        limit: Limit = PAGE_LIMIT_DEFAULT,
    ) -> Response:
        """The transition timeline, oldest first."""
        page, next_cursor = app.batches.events(
            path_id(batch_id, what="batch"), item_id=query_id(item), cursor=cursor, limit=limit
        )
        return json_response({"events": page, "next_cursor": next_cursor})

    @router.post(
        "/{batch_id}/cancel",
        status_code=202,
        response_model=None,
        responses={202: {"model": models.StatusDocument}},
    )
    def cancel_batch(batch_id: str) -> Response:
        """Request cancellation; unclaimed items are abandoned now, held ones soon after."""
        return json_response(app.batches.cancel(path_id(batch_id, what="batch")), 202)

    _sharing_routes(router, app)

    @router.post(
        "/{batch_id}/requeue",
        status_code=202,
        response_model=None,
        responses={202: {"model": models.StatusDocument}, 409: PROBLEM_RESPONSE},
    )
    def requeue_batch(
        batch_id: str, body: Annotated[models.RequeueBody | None, Body()] = None
    ) -> Response:
        """Give failed/abandoned items a fresh attempt budget (and the batch a new deadline)."""
        body = body or models.RequeueBody()
        document = app.batches.requeue(
            path_id(batch_id, what="batch"),
            states=[State(s) for s in body.states],
            item_ids=[str(query_id(i)) for i in body.item_ids] if body.item_ids else None,
            deadline_seconds=body.deadline_seconds,
        )
        return json_response(document, 202)

    @router.post(
        "/{batch_id}/items/{item_id}/recrop",
        status_code=202,
        response_model=None,
        responses={
            202: {"model": models.ItemDocument},
            409: {
                "model": models.RecropConflictDocument,
                "content": {"application/problem+json": {}},
            },
        },
    )
    def recrop_item(batch_id: str, item_id: str, body: models.RecropBody) -> Response:
        """Render a succeeded or failed item again with `focus_box` as its focus hint: it is
        queued now, keeps its derivatives until a worker's success replaces them with new ones
        (new keys), and the timeline records the re-crop. 409 `recrop-conflict` (with the
        item's `state` and pending `focus_box`) while it is not succeeded or failed, 409
        `batch-cancelled` in a cancelled batch."""
        try:
            document = recrop(
                app.batches,
                path_id(batch_id, what="batch"),
                path_id(item_id, what="item"),
                body.focus_box,
            )
        except FocusOutside as exc:
            raise field_problem("focus_box", str(exc)) from exc
        return json_response(document, 202)

    @router.post(
        "/{batch_id}/redeliver",
        status_code=202,
        response_model=None,
        responses={202: {"model": models.StatusDocument}, 409: PROBLEM_RESPONSE},
    )
    def redeliver_batch(batch_id: str) -> Response:
        """Deliver the batch's latest completion callback again (same Idempotency-Key, a fresh
        24 h of retries); 409 while a delivery is under way or when there is none."""
        return json_response(app.batches.redeliver(path_id(batch_id, what="batch")), 202)

    return router


def _sharing_routes(router: APIRouter, app: App) -> None:
    """Pause, resume and priority of a batch (docs/design.md §3, sharing)."""

    @router.post(
        "/{batch_id}/pause",
        status_code=202,
        response_model=None,
        responses={202: {"model": models.StatusDocument}},
    )
    def pause_batch(batch_id: str) -> Response:
        """Stop claiming the batch's items; attempts under way finish, the deadline runs on."""
        return json_response(app.batches.pause(path_id(batch_id, what="batch")), 202)

    @router.post(
        "/{batch_id}/resume",
        status_code=202,
        response_model=None,
        responses={202: {"model": models.StatusDocument}},
    )
    def resume_batch(batch_id: str) -> Response:
        """Claim the batch's items again (workers are woken)."""
        return json_response(app.batches.resume(path_id(batch_id, what="batch")), 202)

    @router.post(
        "/{batch_id}/priority",
        status_code=202,
        response_model=None,
        responses={202: {"model": models.StatusDocument}},
    )
    def prioritise_batch(batch_id: str, body: models.PriorityBody) -> Response:
        """Give the batch a new priority, which the next claims rank it by."""
        document = app.batches.set_priority(path_id(batch_id, what="batch"), body.priority)
        return json_response(document, 202)

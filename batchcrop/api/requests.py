"""Turning validated request bodies into domain requests, naming the field that is wrong.

Sources are confined here: every item's source goes through the API's `SourceReader`, which
refuses anything outside `BATCHCROP_SOURCE_ROOTS` (after resolving symlinks), any URL scheme but
`s3://` and local paths, and everything when no roots are configured. No URL is ever fetched.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from batchcrop.api.models import BatchBody
from batchcrop.api.problems import Problem, field_problem
from batchcrop.batches.items import ItemList, focus_box
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec, SpecError
from storage import SourceNotAllowed, SourceReader

if TYPE_CHECKING:
    from batchcrop.crop.geometry import Box

SOURCE_REFUSED = (
    "not allowed: sources must be local paths or s3:// URLs under the configured "
    "source roots (BATCHCROP_SOURCE_ROOTS)"
)

DEPRECATED_NOTIFY_URL = "is the deprecated name of callback_url: give callback_url only"


def path_id(text: str, *, what: str) -> str:
    """The canonical (lower-case, hyphenated) form of a UUID path segment.

    A malformed id names nothing, so it is a 404 like an unknown one — consistently, whatever
    the endpoint.
    """
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise Problem(404, f"no {what} with this id (ids are UUIDs)", slug="not-found") from None


def query_id(text: str | None) -> str | None:
    """The canonical form of an already pattern-checked UUID query value."""
    return None if text is None else str(uuid.UUID(text))


def render_spec(body: BatchBody) -> RenderSpec:
    """The render spec of a batch body; RenderSpec's own checks become a 422 naming the field."""
    try:
        return RenderSpec.from_input(body.model_dump(include=set(RenderSpec.field_names())))
    except SpecError as exc:
        raise field_problem(exc.field, str(exc)) from exc


def batch_request(
    body: BatchBody, sources: SourceReader, idempotency_key: str | None = None
) -> BatchRequest:
    """The domain request for `POST /v1/batches` (with its `Idempotency-Key`), every source
    normalised and confined."""
    spec = render_spec(body)
    if body.callback_url is not None and body.notify_url is not None:
        raise field_problem("notify_url", DEPRECATED_NOTIFY_URL)
    paths: list[str] = []
    refs: list[str | None] = []
    focus: dict[int, Box] = {}
    normalize = sources.normalizer()
    for index, item in enumerate(body.items):
        try:
            paths.append(normalize(item.source))
        except (SourceNotAllowed, ValueError, OSError) as exc:
            # The reader's message may hold the resolved path (a symlink target): not echoed.
            raise field_problem(f"items[{index}].source", SOURCE_REFUSED) from exc
        refs.append(item.ref)
        if item.focus_box is not None:
            focus[index] = focus_box(item.focus_box)
    return BatchRequest(
        items=ItemList(paths, refs, focus),
        allow_failures=body.allow_failures,
        spec=spec,
        deadline_seconds=body.deadline_seconds,
        max_attempts=body.max_attempts,
        priority=body.priority,
        label=body.label,
        callback_url=body.given_callback_url,
        idempotency_key=idempotency_key,
    )

"""Image endpoints for the operator page: a source thumbnail, a derivative's bytes, and the
preview of where each ratio's window would go with a focus box.

Both sit behind the same bearer token as the rest of `/v1` and answer problems on every error.
The thumbnail is of the source *after* EXIF orientation and carries the oriented source size in
`X-Source-Width`/`X-Source-Height`, so an item's `crop_box` (oriented source pixels) scales onto
it by `thumbnail_width / X-Source-Width`. It comes from the item's stored preview when it has
one that is large enough (its bytes as stored, or scaled down: no decode of the source), else
from decoding the source within the decode slots and memory budget (docs/design.md §5, previews).
Decodes of sources (thumbnails and the windows of a focus box) run in the server's decode
children (`App.decodes`): one past its deadline is killed and answered 422, and one whose
client has gone is killed at once, so a hostile source holds a slot for seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import APIRouter, Header, Path, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from batchcrop.api.models import FormatName, WindowsDocument
from batchcrop.api.polling import etag_of, if_none_match_matches
from batchcrop.api.problems import Problem, field_problem
from batchcrop.api.requests import path_id
from batchcrop.api.routes import (
    IF_NONE_MATCH_CHARS_MAX,
    PROBLEM_RESPONSE,
    PROBLEM_RESPONSES,
    json_response,
)
from batchcrop.app import App
from batchcrop.batches.items import FocusError, focus_from_text
from batchcrop.crop import (
    FORMATS,
    BudgetBusy,
    CropError,
    MemoryBudget,
    Ratio,
    Thumbnail,
    thumbnail,
)
from batchcrop.crop.crop_boxes import Preview
from batchcrop.crop.geometry import Box
from batchcrop.crop.spec import MAX_SIDE_PX_MAX, MAX_SIDE_PX_MIN
from batchcrop.errors import Category, ItemError, TransientItemError
from batchcrop.renders import RenderStopped
from batchcrop.renders.decodes import ThumbnailJob, WindowsJob
from batchcrop.renders.defaults import DECODE_PROCESSES
from batchcrop.renders.job import Job
from storage import (
    AccessDenied,
    ObjectNotFound,
    ObjectStore,
    ObjectTooLarge,
    SourceNotAllowed,
    SourceReader,
    StorageError,
    StorageUnavailable,
)

JPEG_MEDIA_TYPE = "image/jpeg"
THUMBNAIL_MAX_SIDE_PX_DEFAULT = 320
THUMBNAIL_MAX_SIDE_PX_MIN = 16
THUMBNAIL_MAX_SIDE_PX_MAX = 1024
THUMBNAIL_DECODES_MAX = DECODE_PROCESSES
"""At most this many sources are read and decoded for thumbnails at once, one per decode child:
a source may be up to `max_source_bytes` and decode to hundreds of megabytes, and a contact
sheet asks for dozens (other requests wait in the server's thread pool)."""
DISCONNECT_POLL_SECONDS = 0.2
"""How often a request decoding a source looks whether its client is still there."""
THUMBNAIL_QUEUE_SECONDS = 5.0
"""How long a thumbnail request waits for a decode slot before a 503 with `Retry-After`."""
THUMBNAIL_CACHE_SECONDS = 300
"""Browsers may reuse a thumbnail this long; the source may change in place, so not forever."""
DERIVATIVE_CACHE_CONTROL = "private, no-cache"
"""A derivative's URL names the ratio and format, not the key: a re-crop gives the same URL
other bytes, so a browser must revalidate (cheap: the ETag is the key's, checked without
reading the store) instead of keeping the old picture for a year."""
STORE_RETRY_AFTER_SECONDS = 5
RATIO_PATH_PATTERN = r"^[0-9]{1,6}x[0-9]{1,6}$"
_RATIO_PATH = re.compile(RATIO_PATH_PATTERN)
"""The path form is `Ratio.key` (`16x9`); only it is accepted, not the other forms `Ratio.parse`
reads (spaces, `X`), so that each derivative has one URL."""

THUMBNAIL_FROM_PREVIEW = "preview"
THUMBNAIL_FROM_SOURCE = "source"
_SOURCE_SIZE_HEADERS = {
    "X-Thumbnail-From": {
        "description": "`preview`: made from the item's stored preview; `source`: decoded from "
        "the source",
        "schema": {"type": "string", "enum": [THUMBNAIL_FROM_PREVIEW, THUMBNAIL_FROM_SOURCE]},
    },
    "X-Source-Width": {
        "description": "width of the source after EXIF orientation, in pixels",
        "schema": {"type": "integer"},
    },
    "X-Source-Height": {
        "description": "height of the source after EXIF orientation, in pixels",
        "schema": {"type": "integer"},
    },
}
_JPEG_CONTENT: dict[str, Any] = {
    JPEG_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}
}
_DERIVATIVE_CONTENT: dict[str, Any] = {
    output.media_type: {"schema": {"type": "string", "format": "binary"}}
    for output in FORMATS.values()
}

RatioPath = Annotated[
    str,
    Path(
        max_length=13,
        description="the ratio with `x` for `:` (16:9 ⇒ `16x9`), one of the batch's ratios",
    ),
]
FormatQuery = Annotated[
    FormatName | None,
    Query(
        alias="format",
        description="the derivative's format, one of the batch's (default: its first)",
    ),
]
WidthQuery = Annotated[
    int | None,
    Query(
        ge=MAX_SIDE_PX_MIN,
        le=MAX_SIDE_PX_MAX,
        description="the derivative's requested width, one of the batch's `widths` (default: "
        "its first; a batch without widths has one size)",
    ),
]
MaxSide = Annotated[
    int,
    Query(
        ge=THUMBNAIL_MAX_SIDE_PX_MIN,
        le=THUMBNAIL_MAX_SIDE_PX_MAX,
        description="the thumbnail's longer side, in pixels (never enlarged beyond the source)",
    ),
]


def _store_unavailable(what: str) -> Problem:
    return Problem(
        503,
        f"the {what} could not be read just now; retry later",
        slug="storage-unavailable",
        headers={"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
    )


def read_source_bytes(sources: SourceReader, source: str, *, max_bytes: int) -> bytes:
    """The source's bytes, or the problem saying why not (never the path or library message)."""
    try:
        return sources.read(source, max_bytes=max_bytes)
    except (ObjectNotFound, SourceNotAllowed) as exc:
        raise Problem(404, "the source of this item is no longer there", slug="not-found") from exc
    except ObjectTooLarge as exc:
        raise Problem(
            422, "the source is larger than the configured limit", slug="source-unusable"
        ) from exc
    except AccessDenied as exc:
        raise Problem(403, "reading the source was refused", slug="source-access-denied") from exc
    except StorageUnavailable as exc:
        raise _store_unavailable("source") from exc
    except StorageError as exc:
        raise Problem(404, "the source of this item cannot be read", slug="not-found") from exc


def thumbnail_of_preview(
    store: ObjectStore,
    preview: Mapping[str, Any],
    max_side: int,
    *,
    budget: MemoryBudget | None = None,
) -> Thumbnail | None:
    """The thumbnail fitted into `max_side` made from the item's stored `preview` (its item
    document entry), or None when the preview cannot give it: the answer would be larger than
    the preview, or the object is missing, unreadable or not the recorded bytes. The stored
    bytes are answered as they are when they have the size asked for; a smaller thumbnail is
    scaled from them (a `PREVIEW_MAX_SIDE_PX` JPEG decodes DCT-scaled in a few milliseconds). Raises
    `BudgetBusy` like `thumbnail`."""
    side = max(int(preview["width"]), int(preview["height"]))
    source_size = int(preview["source_width"]), int(preview["source_height"])
    wanted = min(max_side, max(source_size))
    if wanted > side:
        return None
    try:
        data = store.get(str(preview["key"]), max_bytes=int(preview["bytes"]))
    except StorageError:
        return None  # the source can still be decoded
    if hashlib.sha256(data).hexdigest() != preview["sha256"]:
        return None
    if wanted == side:
        return Thumbnail(data, int(preview["width"]), int(preview["height"]), *source_size)
    try:
        scaled = thumbnail(data, max_side, budget=budget, timeout=THUMBNAIL_QUEUE_SECONDS)
    except CropError:
        return None
    return Thumbnail(scaled.data, scaled.width, scaled.height, *source_size)


def ratio_text(path_ratio: str) -> str:
    """`16x9` ⇒ `16:9`; a 404 problem for anything else (it names no derivative)."""
    if _RATIO_PATH.match(path_ratio):
        with contextlib.suppress(ValueError):  # a term of 0 or over 100
            return str(Ratio.parse(path_ratio))
    raise Problem(404, "no derivative for this ratio (write 16:9 as 16x9)", slug="not-found")


def _derivative_key(
    app: App,
    batch_id: str,
    item_id: str,
    path_ratio: str,
    *,
    output: str | None,
    width: int | None = None,
) -> tuple[str, str]:
    """(key, format) of the item's derivative for the ratio, in `output` or else the first of
    the batch's formats, at the requested `width` or else the first of the batch's widths (the
    item document lists each ratio's derivatives by width, then format, in the batch's order)."""
    wanted = ratio_text(path_ratio)
    item = app.batches.item(batch_id, item_id)
    for derivative in item["derivatives"]:
        if (
            derivative["ratio"] == wanted
            and output in {None, derivative["format"]}
            and width in {None, derivative["requested_width"]}
        ):
            return str(derivative["key"]), str(derivative["format"])
    named = wanted if output is None else f"{wanted} {output}"
    at = "" if width is None else f" at width {width}"
    raise Problem(404, f"this item has no {named} derivative{at}", slug="not-found")


def _read_derivative(store: ObjectStore, key: str, *, max_bytes: int) -> bytes:
    try:
        return store.get(key, max_bytes=max_bytes)
    except ObjectNotFound as exc:
        raise Problem(
            404, "the derivative's object is missing from the store", slug="not-found"
        ) from exc
    except StorageUnavailable as exc:
        raise _store_unavailable("derivative") from exc
    except StorageError as exc:
        raise Problem(404, "the derivative's object cannot be read", slug="not-found") from exc


FocusQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="a focus box `left,top,right,bottom` in upright source pixels (none: the "
        "windows the engine chooses on its own)",
    ),
]


def windows_document(placed: Preview) -> dict[str, Any]:
    """The `…/windows` document of a source's placed windows: each ratio's crop box."""
    return {
        "source_width": placed.size[0],
        "source_height": placed.size[1],
        "focus_box": None if placed.focus is None else list(placed.focus),
        "trim_box": None if placed.trim_box is None else list(placed.trim_box),
        "windows": [
            {
                "ratio": str(window.ratio),
                "fit": window.fit,
                "crop_box": list(window.crop_box),
                "frame_box": list(window.frame_box),
            }
            for window in placed.windows
        ],
    }


def _unusable(exc: ItemError) -> Problem:
    """The problem of a decode that failed: a focus box outside the picture names the field;
    anything else is an unusable source, with its category (never the library's message)."""
    if exc.category is Category.INVALID_FOCUS:
        return field_problem("focus", exc.detail or str(exc))
    if isinstance(exc, TransientItemError):  # the decode child died (an OOM kill, say)
        return Problem(
            503,
            "the decode failed just now; retry later",
            slug="busy",
            headers={"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
        )
    if exc.category is Category.RENDER_TIMEOUT:
        return Problem(
            422, "the source took too long to decode (render_timeout)", slug="source-unusable"
        )
    return Problem(
        422, f"the source is not a usable image ({exc.category})", slug="source-unusable"
    )


T = TypeVar("T")


async def while_connected(request: Request, work: Callable[[Callable[[], bool]], T]) -> T:
    """`work(gone)` in the server's thread pool, where `gone()` turns True once the request's
    client has disconnected (looked at every `DISCONNECT_POLL_SECONDS`): a decode for nobody
    is then killed instead of holding its slot."""
    gone = threading.Event()

    async def watch() -> None:
        while not await request.is_disconnected():
            await anyio.sleep(DISCONNECT_POLL_SECONDS)
        gone.set()

    def run() -> tuple[T | None, BaseException | None]:
        try:
            return work(gone.is_set), None
        except Exception as exc:  # noqa: BLE001 (raised again below, outside the task group)
            return None, exc

    # The work's own exception is raised outside the task group, which would wrap it in an
    # exception group that the problem handlers do not recognise.
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        done, failed = await run_in_threadpool(run)
        tasks.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return done  # type: ignore[return-value]  # set whenever `failed` is None


def _busy() -> Problem:
    return Problem(
        503,
        "thumbnails are busy; retry shortly",
        slug="busy",
        headers={"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
    )


class _LazyStores:
    """Derivative stores by URL, each opened (without a probe) on first use and then shared.

    A batch's derivatives are read from the store recorded on the batch (the configured one for
    batches from before stores were recorded). Opening builds a client (boto3 for S3), so it is
    done once per store; lazily, so building the API never fails on a store setting only these
    endpoints need. Thread-safe.
    """

    def __init__(self, app: App) -> None:
        self._app = app
        self._stores: dict[str, ObjectStore] = {}
        self._lock = threading.Lock()

    def get(self, url: str | None) -> ObjectStore:
        url = url or self._app.settings.store
        with self._lock:
            if url not in self._stores:
                try:
                    self._stores[url] = self._app.open_store(url, check=False)
                except StorageError as exc:
                    raise _store_unavailable("derivative store") from exc
            return self._stores[url]


class _SourceDecodes:
    """The server's decode slots (`THUMBNAIL_DECODES_MAX`, one per decode child) over the
    items' sources, read as the workers read them: confined to the roots again (a symlink
    swapped after submission must not serve a file from outside them). A request waits a few
    seconds for a slot, never indefinitely: waiting requests hold threads of the pool every
    other endpoint shares. Thread-safe."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._sources = app.stored_source_reader()
        self._max_bytes = app.settings.max_source_bytes
        self._slots = threading.BoundedSemaphore(THUMBNAIL_DECODES_MAX)

    @contextlib.contextmanager
    def source(self, source: str, gone: Callable[[], bool]) -> Iterator[bytes]:
        """The source's bytes, held in a slot until the block ends (BudgetBusy when no slot is
        free in time or the client has gone; the problem saying why when the source cannot be
        read)."""
        waits_until = time.monotonic() + THUMBNAIL_QUEUE_SECONDS
        while not self._slots.acquire(timeout=DISCONNECT_POLL_SECONDS):
            if gone() or time.monotonic() > waits_until:
                raise BudgetBusy("no decode slot")
        try:
            yield read_source_bytes(self._sources, source, max_bytes=self._max_bytes)
        finally:
            self._slots.release()

    def decode(
        self,
        source: str,
        job: Callable[[bytes], Job[T]],
        gone: Callable[[], bool],
    ) -> T:
        """`job(source bytes)` run in a decode child, within a slot and the memory budget:
        its result; `BudgetBusy` when either is not free in time or the client has gone (the
        child is then killed), the problem saying why when the source is unusable."""
        try:
            with self.source(source, gone) as data:
                return self._app.decodes.run(
                    job(data),
                    budget=self._app.decode_budget,
                    should_stop=gone,
                    timeout=THUMBNAIL_QUEUE_SECONDS,
                )
        except RenderStopped as exc:
            raise BudgetBusy("the client has gone") from exc
        except ItemError as exc:  # the engine's refusals, the deadline, a child's failure
            raise _unusable(exc) from exc


def media_router(app: App) -> APIRouter:
    """The image endpoints under `/v1/batches`, bound to `app` (store opened without a probe)."""
    router = APIRouter(prefix="/v1/batches", tags=["media"], responses=PROBLEM_RESPONSES)
    slots = _SourceDecodes(app)
    stores = _LazyStores(app)
    max_bytes = app.settings.max_source_bytes

    @router.get(
        "/{batch_id}/items/{item_id}/source-thumbnail",
        response_class=Response,
        responses={
            200: {
                "content": _JPEG_CONTENT,
                "description": "a JPEG of the upright source",
                "headers": _SOURCE_SIZE_HEADERS,
            },
            403: PROBLEM_RESPONSE,
        },
    )
    async def source_thumbnail(
        request: Request,
        batch_id: str,
        item_id: str,
        max_side: MaxSide = THUMBNAIL_MAX_SIDE_PX_DEFAULT,
    ) -> Response:
        """A JPEG thumbnail of the item's source after EXIF orientation; crop boxes scale onto
        it by `width / X-Source-Width`. Made from the item's stored preview when it has one
        large enough, else decoded from the source. 422 when the source is not a usable
        image."""
        batch_id, item_id = path_id(batch_id, what="batch"), path_id(item_id, what="item")
        return await while_connected(
            request, lambda gone: thumbnail_response(batch_id, item_id, max_side, gone)
        )

    def thumbnail_response(
        batch_id: str, item_id: str, max_side: int, gone: Callable[[], bool]
    ) -> Response:
        item = app.batches.item(batch_id, item_id)
        made, origin = None, THUMBNAIL_FROM_PREVIEW
        try:
            if item["preview"] is not None:
                store = stores.get(app.batches.batch(batch_id).store)
                made = thumbnail_of_preview(
                    store, item["preview"], max_side, budget=app.decode_budget
                )
            if made is None:
                made = slots.decode(item["source"], lambda data: ThumbnailJob(data, max_side), gone)
                origin = THUMBNAIL_FROM_SOURCE
        except BudgetBusy as exc:
            raise _busy() from exc
        assert made is not None
        headers = {
            "X-Source-Width": str(made.source_width),
            "X-Source-Height": str(made.source_height),
            "X-Thumbnail-From": origin,
            "Cache-Control": f"private, max-age={THUMBNAIL_CACHE_SECONDS}",
        }
        return Response(made.data, media_type=JPEG_MEDIA_TYPE, headers=headers)

    @router.get(
        "/{batch_id}/items/{item_id}/windows",
        response_model=WindowsDocument,
        responses={403: PROBLEM_RESPONSE},
    )
    async def windows(
        request: Request, batch_id: str, item_id: str, focus: FocusQuery = None
    ) -> Response:
        """Where each of the batch's ratios would crop the item's source with the focus box
        `focus`: the crop boxes a re-crop with it would give its derivatives (the engine's own
        placement, on its saliency decode; nothing is rendered or stored). Shares the
        thumbnails' decode slots and memory budget. 422 when `focus` is malformed or lies
        outside the picture, or the source is not a usable image."""
        batch_id, item_id = path_id(batch_id, what="batch"), path_id(item_id, what="item")
        try:
            box = None if focus is None else focus_from_text(focus)
        except FocusError as exc:
            raise field_problem("focus", str(exc)) from exc
        return await while_connected(
            request, lambda gone: windows_response(batch_id, item_id, box, gone)
        )

    def windows_response(
        batch_id: str, item_id: str, box: Box | None, gone: Callable[[], bool]
    ) -> Response:
        item = app.batches.item(batch_id, item_id)
        spec = app.batches.batch(batch_id).spec
        try:
            placed = slots.decode(item["source"], lambda data: WindowsJob(data, spec, box), gone)
        except BudgetBusy as exc:
            raise _busy() from exc
        return json_response(windows_document(placed))

    @router.get(
        "/{batch_id}/items/{item_id}/derivatives/{ratio}",
        response_class=Response,
        responses={
            200: {
                "content": _DERIVATIVE_CONTENT,
                "description": "the derivative's bytes, with its format's media type",
            },
            304: {"description": "the derivative is still the one in If-None-Match"},
        },
    )
    def derivative(
        batch_id: str,
        item_id: str,
        ratio: RatioPath,
        *,
        output: FormatQuery = None,
        width: WidthQuery = None,
        if_none_match: Annotated[str | None, Header()] = None,
    ) -> Response:
        """The stored bytes of the item's derivative for `ratio` (`16x9` for 16:9) in `format`
        at `width` (defaults: the batch's first), with that format's media type, read from the
        batch's own store. Its ETag is its key's (a re-crop changes it); `If-None-Match` ⇒
        304."""
        batch_id, item_id = path_id(batch_id, what="batch"), path_id(item_id, what="item")
        key, name = _derivative_key(app, batch_id, item_id, ratio, output=output, width=width)
        headers = {"Cache-Control": DERIVATIVE_CACHE_CONTROL, "ETag": etag_of(key.encode())}
        if (
            if_none_match
            and len(if_none_match) <= IF_NONE_MATCH_CHARS_MAX
            and if_none_match_matches(if_none_match, headers["ETag"])
        ):
            return Response(status_code=304, headers=headers)
        store = stores.get(app.batches.batch(batch_id).store)
        data = _read_derivative(store, key, max_bytes=max_bytes)
        return Response(data, media_type=FORMATS[name].media_type, headers=headers)

    return router

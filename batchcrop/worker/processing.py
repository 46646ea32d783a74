"""One attempt at one item: read the source, crop, store each derivative and the source's
preview — checking the lease between steps. The worker then ends the attempt through
`batchcrop.worker.attempts`.

Every failure is turned into an ItemError whose class decides retry and whose category is
public. Lease loss, cancellation and shutdown are not failures: they have their own exits.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from batchcrop.batches.documents import Derivative, Preview
from batchcrop.batches.items import payload_focus
from batchcrop.crop import (
    FORMATS,
    MemoryBudget,
    Ratio,
    RenderSpec,
    Rendition,
    Thumbnail,
    preview_variant,
    variant_of,
)
from batchcrop.crop.budget import MIB
from batchcrop.errors import Category, PermanentItemError, TransientItemError
from batchcrop.logs import log_event
from batchcrop.renders import Renderer, RenderJob, RenderStopped, render_in_process
from batchcrop.traces import KNOWN, NO_TRACES, READ, RENDER, WRITE, Traces
from batchcrop.worker.facts import (
    derivative_facts,
    preview_facts,
    stored_derivative,
    stored_preview,
)
from batchcrop.worker.known import Known, Wanted, derivative_prefix, known_outputs
from leases import Claim, HeldLease, LeaseManager, StopReason
from storage import (
    AccessDenied,
    ObjectConflict,
    ObjectNotFound,
    ObjectStore,
    ObjectTooLarge,
    SourceNotAllowed,
    SourceReader,
    StorageError,
    StorageUnavailable,
)

_T = TypeVar("_T")

DERIVATIVE_CONTENT_TYPE = FORMATS["jpeg"].media_type
"""A JPEG derivative's type; each format has its own (`FORMATS[name].media_type`)."""
PREVIEW_CONTENT_TYPE = FORMATS["jpeg"].media_type


@dataclass(frozen=True)
class Output:
    """What a successful attempt stored: the manifest, and the source's preview (None when its
    key holds an object that is not this source's preview)."""

    derivatives: list[Derivative]
    preview: Preview | None
    note: str | None = None
    """What the success's event says beside it (a colour profile ignored), or None."""


class Interruption(Exception):
    """The attempt must stop without a failure: shutdown, cancel, deadline."""

    category: Category = Category.INTERRUPTED


class GiveBack(Interruption):
    """Shutdown: return the item to `queued`, attempt not counted (F)."""


class Cancelled(Interruption):
    """Cancel requested: the item ends `abandoned` (I)."""

    category = Category.CANCELLED


class DeadlinePassed(Interruption):
    """The batch deadline passed while the item was held: it ends `abandoned`."""

    category = Category.DEADLINE_EXCEEDED


def derivative_key(source_sha256: str, rendition: Rendition, variant: str) -> str:
    """docs/design.md §5: `derivatives/{source_sha256}/{rw}x{rh}-{variant}.{ext}` (`jpg`,
    `webp`, `avif`), `{rw}x{rh}-w{width}-{variant}.{ext}` for a requested width; `variant` is
    the rendition's format's (`variant_of(..., output=...)`)."""
    return key_of(
        source_sha256, rendition.ratio, rendition.format, variant, rendition.requested_width
    )


def key_of(
    source_sha256: str, ratio: Ratio, output: str, variant: str, width: int | None = None
) -> str:
    """`derivative_key` of the rendition of `ratio` in format `output` (at the requested
    `width`, None for the single size), before it is rendered."""
    extension = FORMATS[output].extension
    sized = "" if width is None else f"-w{width}"
    return f"{derivative_prefix(source_sha256)}{ratio.key}{sized}-{variant}.{extension}"


PREVIEW_KEY_PREFIX = "previews/"
WRITE_THREADS_MAX = 8
"""Write threads per slot in a worker's pool (`write_pool`); an item's objects are all submitted
to it at once."""


def attempt_fields(claim: Claim) -> dict[str, Any]:
    """The fields that name an attempt on its log lines: item, batch, attempt, correlation id."""
    return {
        "item": claim.item_id,
        "batch": claim.group_id,
        "attempt": claim.attempt,
        "corr": claim.correlation_id,
    }


def write_pool(slots: int) -> ThreadPoolExecutor:
    """The threads a worker's `slots` write their items' objects with (`Attempt.writes`): kept
    for the worker's life, since starting threads for every item cost about 3 ms of it."""
    return ThreadPoolExecutor(max_workers=WRITE_THREADS_MAX * slots, thread_name_prefix="write")


def preview_key(source_sha256: str, variant: str) -> str:
    """docs/design.md §5, previews: `previews/{source_sha256}/{variant}.jpg`, `variant` being
    `preview_variant()`: one preview per source, whichever batch rendered it."""
    return f"{PREVIEW_KEY_PREFIX}{source_sha256}/{variant}.jpg"


def read_source(sources: SourceReader, source: str, *, max_bytes: int) -> bytes:
    """The source bytes, or the ItemError that says why not."""
    try:
        return sources.read(source, max_bytes=max_bytes)
    except (ObjectNotFound, SourceNotAllowed) as exc:
        raise PermanentItemError(str(exc), category=Category.SOURCE_NOT_FOUND) from exc
    except ObjectTooLarge as exc:
        raise PermanentItemError(str(exc), category=Category.SOURCE_TOO_LARGE) from exc
    except AccessDenied as exc:
        raise PermanentItemError(
            f"source refused the read: {exc}", category=Category.STORAGE_ACCESS_DENIED
        ) from exc
    except StorageError as exc:
        raise TransientItemError(
            f"source unavailable: {exc}", category=Category.SOURCE_UNAVAILABLE
        ) from exc


def store_rendition(
    store: ObjectStore,
    key: str,
    rendition: Rendition,
    *,
    source_sha256: str,
    variant: str,
    on_put_hit: Callable[[], None] = lambda: None,
) -> Derivative:
    """put_if_absent one derivative with its facts (`worker.facts`); return its manifest row.

    An identical object already there is success. So is other bytes whose stored facts name the
    same source, ratio and variant (the same derivative rendered on another CPU): the row is then
    the STORED object's, since the store is the truth. Anything else is `derivative_conflict`.
    """
    ratio = str(rendition.ratio)
    try:
        put = store.put_if_absent(
            key,
            rendition.data,
            content_type=FORMATS[rendition.format].media_type,
            metadata=derivative_facts(source_sha256, variant, rendition),
        )
    except ObjectConflict as exc:
        stored = stored_derivative(
            exc.existing,
            source_sha256=source_sha256,
            ratio=ratio,
            variant=variant,
            output=rendition.format,
            source_size=rendition.source_size,
            requested_width=rendition.requested_width,
        )
        if stored is None:
            raise PermanentItemError(
                f"another object stands under the key: {exc}",
                category=Category.DERIVATIVE_CONFLICT,
            ) from exc
        return stored
    except AccessDenied as exc:
        raise PermanentItemError(
            f"store refused the write: {exc}", category=Category.STORAGE_ACCESS_DENIED
        ) from exc
    except (StorageUnavailable, StorageError) as exc:
        raise TransientItemError(
            f"store unavailable: {exc}", category=Category.STORAGE_UNAVAILABLE
        ) from exc
    if not put.created:
        on_put_hit()  # the same bytes were already there: an earlier attempt or batch wrote them
    return Derivative(
        ratio=ratio,
        format=rendition.format,
        key=key,
        width=rendition.width,
        height=rendition.height,
        bytes=len(rendition.data),
        sha256=rendition.sha256,
        crop_box=rendition.crop_box,
        fit=rendition.fit,
        padding=rendition.padding,
        trim_box=rendition.trim_box,
        requested_width=rendition.requested_width,
    )


def store_preview(
    store: ObjectStore,
    preview: Thumbnail,
    *,
    source_sha256: str,
    on_taken: Callable[[str], None] = lambda key: None,
) -> Preview | None:
    """put_if_absent the source's preview with its facts; return its record.

    Identical bytes already there are success, and so are other bytes whose facts name the same
    source and preview variant (another CPU's rounding): the record is then the stored object's.
    A key held by anything else is left alone and the item simply has no preview (`on_taken` is
    told): the page then decodes the source, as for items rendered before previews existed.
    """
    variant = preview_variant()
    key = preview_key(source_sha256, variant)
    try:
        store.put_if_absent(
            key,
            preview.data,
            content_type=PREVIEW_CONTENT_TYPE,
            metadata=preview_facts(source_sha256, variant, preview),
        )
    except ObjectConflict as exc:
        stored = stored_preview(exc.existing, source_sha256=source_sha256, variant=variant)
        if stored is None:
            on_taken(key)
        return stored
    except AccessDenied as exc:
        raise PermanentItemError(str(exc), category=Category.STORAGE_ACCESS_DENIED) from exc
    except (StorageUnavailable, StorageError) as exc:
        raise TransientItemError(str(exc), category=Category.STORAGE_UNAVAILABLE) from exc
    return Preview(
        key=key,
        width=preview.width,
        height=preview.height,
        bytes=len(preview.data),
        sha256=preview.sha256,
        source_width=preview.source_width,
        source_height=preview.source_height,
    )


@dataclass
class Attempt:
    """The pipeline of one claimed item; `run` raises on every exit but success."""

    claim: Claim
    leases: LeaseManager
    store: ObjectStore
    sources: SourceReader
    spec: RenderSpec
    max_source_bytes: int
    decode_budget: MemoryBudget | None
    give_back_now: threading.Event
    writes: Executor
    """The worker's `write_pool`."""
    on_write_differs: Callable[[], None] = lambda: None
    """Called when a taken key held other bytes of the same derivative (a metric)."""
    on_put_hit: Callable[[], None] = lambda: None
    """Called when a derivative's key already held the same bytes (a metric)."""
    force_render: bool = False
    """Render even when every derivative is stored already (`--force`)."""
    on_known: Callable[[], None] = lambda: None
    """Called when the item succeeds from its stored outputs, not rendered (a metric)."""
    on_render: Callable[[], None] = lambda: None
    """Called when the source is about to be decoded and rendered (a metric)."""
    on_store_seconds: Callable[[float], None] = lambda seconds: None
    """Called with the wall time of each object write, failed ones included (a metric)."""
    renderer: Renderer = render_in_process
    """Where the crop engine runs: in this thread, or the worker's `RenderPool`."""
    traces: Traces = NO_TRACES
    """Each stage a child span of the attempt's (`batchcrop.traces`); a render in a child process
    is the parent's wait for it, its start-up and pickling included."""

    def run(self, heartbeat: HeldLease) -> Output:
        """Read, crop, store; return the manifest and preview to commit. Raises LeaseLost,
        Interruption or ItemError (and DatabaseUnavailable from a lease check)."""
        claim = self.claim
        with self.traces.stage(READ) as span:
            source = claim.payload["source"]
            data = read_source(self.sources, source, max_bytes=self.max_source_bytes)
            source_sha256 = hashlib.sha256(data).hexdigest()
            span.set("batchcrop.source.bytes", len(data))
        self.checkpoint(heartbeat)
        # The item's focus box (a JSON list in the payload) reaches the window and the variant.
        focus = payload_focus(claim.payload)
        variants = {name: variant_of(self.spec, focus, name) for name in self.spec.formats}
        known = None
        if not self.force_render:
            with self.traces.stage(KNOWN) as span:
                known = self._known(source_sha256, variants)
                span.set("batchcrop.known", known is not None)
        if known is not None:
            # Every key is known before the decode (docs/design.md §5, known outputs).
            self.on_known()
            log_event(
                "known_outputs",
                level=logging.DEBUG,
                item=claim.item_id,
                attempt=claim.attempt,
                corr=claim.correlation_id,
                derivatives=len(known.derivatives),
            )
            self.checkpoint(heartbeat)
            return Output(known.derivatives, known.preview)
        self.on_render()
        # The renditions, and the page's picture of the source made once here rather than on
        # every view (docs/design.md §5, previews). In a render child, killed at once when
        # this attempt must stop (docs/design.md §6, render processes).
        with self.traces.stage(RENDER) as span:
            try:
                rendered = self.renderer(
                    RenderJob(data, self.spec, focus),
                    budget=self.decode_budget,
                    should_stop=lambda: self._must_stop(heartbeat),
                )
            except RenderStopped:
                self.checkpoint(heartbeat)  # raises the reason
                raise GiveBack from None  # a lease only thought lost: the item goes back unharmed
            span.set("batchcrop.renditions", len(rendered.renditions))
        renditions, preview = rendered.renditions, rendered.preview
        note = None
        if rendered.ignored_profile_bytes:
            mib = rendered.ignored_profile_bytes / MIB
            note = f"colour profile of {mib:.1f} MiB ignored: the pixels were taken as sRGB"
            # docs/design.md §6, colour: the pixels were taken as sRGB.
            log_event(
                "colour_profile_ignored",
                level=logging.WARNING,
                **attempt_fields(claim),
                profile_mib=round(mib, 1),
                assumed="sRGB",
            )
        del data, rendered
        log_event(
            "crop",
            level=logging.DEBUG,
            **attempt_fields(claim),
            ratios=len(renditions),
        )
        self.checkpoint(heartbeat)
        with self.traces.stage(WRITE) as span:
            span.set("batchcrop.objects", len(renditions) + 1)
            # One item's objects are written at once: a write mostly waits on the store (a folder's
            # fsyncs, an S3 round trip), so the item waits for the slowest rather than for the sum.
            # Every write is put-if-absent of a deterministic key, so the order does not matter; a
            # failure is raised as before, the first in rendition order, once the others are done.
            stored_preview = self.writes.submit(
                self._timed,
                store_preview,
                self.store,
                preview,
                source_sha256=source_sha256,
                on_taken=self._preview_taken,
            )
            written = [
                self.writes.submit(
                    self._timed,
                    store_rendition,
                    self.store,
                    derivative_key(source_sha256, rendition, variants[rendition.format]),
                    rendition,
                    source_sha256=source_sha256,
                    variant=variants[rendition.format],
                    on_put_hit=self.on_put_hit,
                )
                for rendition in renditions
            ]
            everything: list[Future[Any]] = [stored_preview, *written]
            wait(everything)  # all ended, before a failure is raised
            manifest = [
                self._written(rendition, future.result())
                for rendition, future in zip(renditions, written, strict=True)
            ]
            stored = stored_preview.result()
        self.checkpoint(heartbeat)
        return Output(manifest, stored, note)

    def _known(self, source_sha256: str, variants: dict[str, str]) -> Known | None:
        """The item's stored outputs when all of them are stored with matching facts."""
        wanted = [
            Wanted(
                ratio,
                name,
                variants[name],
                key_of(source_sha256, ratio, name, variants[name], width),
                width,
            )
            for ratio in self.spec.ratios
            for width in self.spec.sizes
            for name in self.spec.formats
        ]
        variant = preview_variant()
        return known_outputs(
            self.store,
            wanted,
            source_sha256=source_sha256,
            preview_key=preview_key(source_sha256, variant),
            preview_variant=variant,
            heads=self.writes,
        )

    def _timed(self, write: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """`write(*args, **kwargs)`, its wall time told to `on_store_seconds`."""
        started = time.monotonic()
        try:
            return write(*args, **kwargs)
        finally:
            self.on_store_seconds(time.monotonic() - started)

    def _written(self, rendition: Rendition, derivative: Derivative) -> Derivative:
        """Log the write of `rendition` (and a stored object of other bytes); its manifest row."""
        claim = self.claim
        which = {
            "item": claim.item_id,
            "attempt": claim.attempt,
            "corr": claim.correlation_id,
            "ratio": str(rendition.ratio),
            "format": rendition.format,
        }
        log_event("write", level=logging.DEBUG, **which, bytes=len(rendition.data))
        if derivative.sha256 != rendition.sha256:
            self.on_write_differs()
            log_event(
                "write_differs",
                level=logging.WARNING,
                **which,
                key=derivative.key,
                ours=rendition.sha256,
                stored=derivative.sha256,
                stored_bytes=derivative.bytes,
            )
        return derivative

    def _preview_taken(self, key: str) -> None:
        claim = self.claim
        log_event(
            "preview_key_taken",
            level=logging.WARNING,
            item=claim.item_id,
            attempt=claim.attempt,
            corr=claim.correlation_id,
            key=key,
        )

    def _must_stop(self, heartbeat: HeldLease) -> bool:
        """What the heartbeat thread and shutdown already know, without a statement: asked
        every few hundredths of a second while a child renders."""
        return (
            self.give_back_now.is_set()
            or heartbeat.lost.is_set()
            or heartbeat.stop_reason is not None
        )

    def checkpoint(self, heartbeat: HeldLease) -> None:
        """Stop here if shutdown can't wait, the lease is lost or the attempt was told to stop."""
        if self.give_back_now.is_set():
            raise GiveBack
        # The heartbeat thread may lag; the database is the authority (raises LeaseLost).
        reason = heartbeat.stop_reason or self.leases.check(self.claim)
        match reason:
            case None:
                return
            case StopReason.CANCELLED:
                raise Cancelled
            case StopReason.DEADLINE_EXCEEDED:
                raise DeadlinePassed
            case StopReason.MAX_ATTEMPT_SECONDS:
                raise TransientItemError(
                    "attempt ran past max_attempt_seconds", category=Category.DEPENDENCY_TIMEOUT
                )

"""Known outputs: an item whose derivatives are all stored already succeeds from their facts,
without decoding its source (docs/design.md §5, known outputs; ADR 0028).

Every key is known once the source's sha256 is (`derivative_key`, `preview_key`): the ratio,
the variant (from the batch's spec and the item's focus box) and the format make the rest. So
after the read, before any decode, one listing of the source's derivative folder says whether
every key is there (a first run learns "no" from that one request and renders); only then is
each object's head read for its facts, which must name this source, ratio, variant and format
(`worker.facts.stored_derivative`, the same judgement as a write that finds its key taken). The
source's preview is looked up too: absent, the item renders (the preview needs the decode);
held by an object that is not this source's preview, the item succeeds without one, as a
rendering attempt would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass

from batchcrop.batches.documents import Derivative, Preview
from batchcrop.crop import Ratio
from batchcrop.errors import Category, PermanentItemError, TransientItemError
from batchcrop.worker.facts import stored_derivative, stored_preview
from storage import (
    AccessDenied,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    StorageError,
)


@dataclass(frozen=True)
class Wanted:
    """One derivative an item's spec asks for, and its key."""

    ratio: Ratio
    format: str
    variant: str
    key: str
    width: int | None = None
    """The requested width; None: the single size."""


@dataclass(frozen=True)
class Known:
    """What the store already holds for an item: its manifest rows and its preview record
    (None when the preview key holds an object that is not this source's preview)."""

    derivatives: list[Derivative]
    preview: Preview | None


def derivative_prefix(source_sha256: str) -> str:
    """The folder of every derivative of one source (docs/design.md §5, keys)."""
    return f"derivatives/{source_sha256}/"


def known_outputs(
    store: ObjectStore,
    wanted: Sequence[Wanted],
    *,
    source_sha256: str,
    preview_key: str,
    preview_variant: str,
    heads: Executor,
) -> Known | None:
    """The stored outputs of an item when every one of `wanted` is stored with facts naming
    this source, ratio, variant and format, and the source's preview key is taken; None when
    the item must be rendered. The heads are read at once on `heads` (the worker's write
    pool). A store that cannot answer is the ItemError a write would have raised."""
    with _store_errors():
        try:
            listed = {info.key for info in store.list(derivative_prefix(source_sha256))}
        except ObjectNotFound:
            return None
        if any(w.key not in listed for w in wanted):
            return None
        preview_future = heads.submit(_head, store, preview_key)
        futures = [heads.submit(_head, store, w.key) for w in wanted]
        infos = [future.result() for future in futures]
        preview_info = preview_future.result()
    if preview_info is None:
        return None  # the preview must be made: that needs the decode
    preview = stored_preview(preview_info, source_sha256=source_sha256, variant=preview_variant)
    source_size = None if preview is None else (preview.source_width, preview.source_height)
    derivatives = []
    for w, info in zip(wanted, infos, strict=True):
        stored = stored_derivative(
            info,
            source_sha256=source_sha256,
            ratio=str(w.ratio),
            variant=w.variant,
            output=w.format,
            source_size=source_size,
            requested_width=w.width,
        )
        if stored is None:
            return None  # missing, or facts naming something else: the render decides
        derivatives.append(stored)
    return Known(derivatives, preview)


def _head(store: ObjectStore, key: str) -> ObjectInfo | None:
    try:
        return store.head(key)
    except ObjectNotFound:
        return None


@contextmanager
def _store_errors() -> Iterator[None]:
    """A store failure while looking, as the ItemError a write meeting it would raise."""
    try:
        yield
    except AccessDenied as exc:
        raise PermanentItemError(
            f"store refused the read: {exc}", category=Category.STORAGE_ACCESS_DENIED
        ) from exc
    except StorageError as exc:
        raise TransientItemError(
            f"store unavailable: {exc}", category=Category.STORAGE_UNAVAILABLE
        ) from exc

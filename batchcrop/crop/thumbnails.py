"""Small upright pictures of a source: the operator page's thumbnails and the stored preview.

`thumbnail` fits the source, after EXIF orientation and in sRGB (the decode every render makes,
`decode.decode_rgb`), into a square of `max_side` pixels (never enlarged) and encodes it as a
baseline JPEG. `source_preview` is the picture a worker stores (`PREVIEW_MAX_SIDE_PX`,
docs/design.md §5, previews): fitted the same way from the decode a default render makes, so
that the worker takes it from its render (`PreviewTaker`) instead of decoding the source again.
Deterministic: the same bytes and libraries give the same JPEG, so the stored preview is one
object per source and preview variant (`variant.preview_variant`), whichever worker writes it.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

from PIL import Image

from batchcrop.crop.budget import MemoryBudget, reserved
from batchcrop.crop.colour import ignored_profile_bytes
from batchcrop.crop.decode import OpenedImage, decode_cost, decode_rgb, open_image, reduction
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.planning import saliency_reduction
from batchcrop.crop.spec import MAX_SIDE_PX_DEFAULT

PREVIEW_MAX_SIDE_PX = 640
"""The stored preview's longer side: the contact sheet shows a source at most 15rem (240 CSS
px) wide, so 640 px stays sharp on screens of up to 2.5 device pixels per CSS pixel."""
THUMBNAIL_QUALITY = 80
"""JPEG quality of every thumbnail and preview."""
THUMBNAIL_REDUCING_GAP = 1.0
"""Pillow box-reduces by the whole factor first, then Lanczos covers the last fraction: a fair
area average for a thumbnail, at a third of the time of a reducing gap of 2 (Pillow's own
`Image.thumbnail`) from a 2000x1500 decode (9 against 30 ms)."""


@dataclass(frozen=True)
class Thumbnail:
    """A JPEG of the upright source fitted into a square, with the upright source's size."""

    data: bytes
    width: int
    height: int
    source_width: int
    source_height: int

    @property
    def sha256(self) -> str:
        """The hex sha256 of the JPEG bytes."""
        return hashlib.sha256(self.data).hexdigest()


def thumbnail(
    data: bytes,
    max_side: int,
    *,
    budget: MemoryBudget | None = None,
    timeout: float | None = None,
    max_pixels: int = MAX_SOURCE_PIXELS,
) -> Thumbnail:
    """The JPEG of the upright, sRGB source `data` fitted into `max_side` pixels.

    JPEG sources decode DCT-scaled. The decode's estimated peak is reserved from `budget` first,
    waiting at most `timeout` seconds (None: as long as it takes). Raises `CropError` for data
    that is not a usable image (the refusals `render` makes, bombs and the whole budget included)
    and `BudgetBusy` when the memory is not free in time. Thread-safe.
    """
    opened = open_image(data, max_pixels)
    factor = thumbnail_reduction(opened, max_side)
    with reserved(budget, decode_cost(opened, factor), timeout=timeout):
        return fitted(decode_rgb(opened, factor), opened.size, max_side)


def preview_reduction(opened: OpenedImage) -> int:
    """The DCT reduction the stored preview is made from: the decode a render at the default
    max side places its windows on, so that a default render's own decode serves (for sources
    without DCT scaling, PNG among them, always 1: every render's). It covers the preview."""
    return saliency_reduction(opened, MAX_SIDE_PX_DEFAULT)


def source_preview(data: bytes, *, budget: MemoryBudget | None = None) -> Thumbnail:
    """The stored preview of the source `data` (`PREVIEW_MAX_SIDE_PX`), decoded now; raises as
    `thumbnail` does. A function of the source bytes and the libraries alone."""
    opened = open_image(data, MAX_SOURCE_PIXELS)
    factor = preview_reduction(opened)
    with reserved(budget, decode_cost(opened, factor)):
        return fitted(decode_rgb(opened, factor), opened.size, PREVIEW_MAX_SIDE_PX)


class PreviewTaker:
    """The stored preview of a source (`source_preview`), taken from a render's own decode when
    the render makes the very decode it needs (a render at the default max side always does):
    pass it as `render`'s `on_decode`, then ask `preview`. The same bytes either way."""

    def __init__(self, data: bytes) -> None:
        # Headers only, without the structure check: the render it serves checks the same
        # bytes before decoding any, and a fallback decode (`source_preview`) checks them again.
        opened = open_image(data, MAX_SOURCE_PIXELS, structure_checked=True)
        self.factor = preview_reduction(opened)
        self.ignored_profile_bytes = ignored_profile_bytes(opened.image)
        """The source's embedded profile's size when the engine ignores it for its size (0:
        not ignored): read from the same headers, for the item's log line."""
        self.taken: Thumbnail | None = None

    def __call__(self, picture: Image.Image, factor: int, size: tuple[int, int]) -> None:
        if self.taken is None and factor == self.factor:
            self.taken = fitted(picture, size, PREVIEW_MAX_SIDE_PX)

    def preview(self, data: bytes, *, budget: MemoryBudget | None = None) -> Thumbnail:
        """The preview taken from the render, or else decoded from `data` now."""
        return self.taken or source_preview(data, budget=budget)


def thumbnail_reduction(opened: OpenedImage, max_side: int) -> int:
    """The DCT reduction `thumbnail` decodes `opened` at for `max_side` (1 for formats without
    DCT scaling): a decode at this reduction, from anywhere, gives the same thumbnail."""
    return reduction(opened, min(1.0, max_side / max(opened.size)))


def fitted(picture: Image.Image, size: tuple[int, int], max_side: int) -> Thumbnail:
    """The thumbnail of an upright sRGB decode `picture` of a `size` source: fitted into
    `max_side` pixels (never enlarged) and encoded. `picture` is left as it is, so a render can
    hand over its own decode (`render`'s `on_decode`) instead of decoding the source again."""
    scale = min(1.0, max_side / max(picture.size))
    target = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
    image = picture
    if target != picture.size:
        image = picture.resize(
            target, Image.Resampling.LANCZOS, reducing_gap=THUMBNAIL_REDUCING_GAP
        )
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=THUMBNAIL_QUALITY)
    return Thumbnail(buffer.getvalue(), image.width, image.height, *size)

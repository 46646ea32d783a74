"""Small upright pictures of a source: the operator page's thumbnails and the stored preview.

`thumbnail` fits the source, after EXIF orientation and in sRGB (the decode every render makes,
`decode.decode_rgb`), into a square of `max_side` pixels (never enlarged) and encodes it as a
baseline JPEG. Deterministic: the same bytes, `max_side` and libraries give the same JPEG, so the
preview a worker stores (`PREVIEW_MAX_SIDE_PX`, docs/design.md §5, previews) is one object per
source and preview variant (`variant.preview_variant`), whichever worker writes it.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

from PIL import Image

from batchcrop.crop.budget import MemoryBudget, reserved
from batchcrop.crop.decode import decode_cost, decode_rgb, open_image, reduction
from batchcrop.crop.limits import MAX_SOURCE_PIXELS

PREVIEW_MAX_SIDE_PX = 640
"""The stored preview's longer side: the contact sheet shows a source at most 15rem (240 CSS
px) wide, so 640 px stays sharp on screens of up to 2.5 device pixels per CSS pixel."""
THUMBNAIL_QUALITY = 80
"""JPEG quality of every thumbnail and preview."""


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
    source_width, source_height = opened.size
    scale = min(1.0, max_side / max(source_width, source_height))
    factor = reduction(opened, scale)
    with reserved(budget, decode_cost(opened, factor), timeout=timeout):
        image = decode_rgb(opened, factor)
        image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=THUMBNAIL_QUALITY)
    return Thumbnail(buffer.getvalue(), image.width, image.height, source_width, source_height)

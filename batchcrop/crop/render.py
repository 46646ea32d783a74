"""`render`: one source's bytes in, one encoded JPEG per ratio out.

Decode once at the smallest scale every output needs, compute saliency once on a small copy,
place one window per ratio, resample with Lanczos (one resample per distinct scale, see
`resample`), encode baseline JPEG. Deterministic: same bytes + spec + libraries ⇒ same output bytes.
Thread-safe: no shared mutable state; the heavy steps (decode, resize, encode) run inside Pillow,
which releases the GIL.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
from PIL import Image

from batchcrop.crop.budget import MemoryBudget
from batchcrop.crop.decode import (
    MAX_SOURCE_PIXELS,
    OpenedImage,
    decode_cost,
    decode_rgb,
    open_image,
)
from batchcrop.crop.resample import Cut, resample_all
from batchcrop.crop.saliency import saliency_map, small_copy
from batchcrop.crop.spec import RenderSpec, Rendition
from batchcrop.crop.window import needed_scale, output_size, place_window, window_size

JPEG_SUBSAMPLING = "4:2:0"
JPEG_OPTIMIZE = True
"""Optimised Huffman tables: ~12 % smaller files for ~2 ms per 1200 px output; deterministic."""


def render(
    data: bytes,
    spec: RenderSpec,
    *,
    max_pixels: int = MAX_SOURCE_PIXELS,
    budget: MemoryBudget | None = None,
) -> list[Rendition]:
    """Render every ratio of `spec` from the image `data`, in `spec.ratios` order.

    Raises `InvalidImage`, `ImageTooLarge` (checked before decoding pixels, against
    `max_pixels` and, when given, against the whole memory `budget`) or `UnsupportedImage`.
    With a budget, the decode's estimated peak is reserved from it for the whole render (waiting
    while other renders hold it). No I/O beyond memory; safe from concurrent threads.
    """
    opened = open_image(data, max_pixels)
    width, height = opened.size
    windows = [window_size(ratio, width, height) for ratio in spec.ratios]
    scale = max(needed_scale(window, spec.max_side) for window in windows)
    if budget is None:
        return _render(opened, spec, windows, scale)
    with budget.reserve(decode_cost(opened, scale)):
        return _render(opened, spec, windows, scale)


def _render(
    opened: OpenedImage, spec: RenderSpec, windows: list[tuple[int, int]], scale: float
) -> list[Rendition]:
    width, height = opened.size
    picture = decode_rgb(opened, scale)
    scale_x, scale_y = picture.width / width, picture.height / height
    # A ratio equal to the source's leaves nothing to choose: skip saliency when all do.
    needs_placing = any(window != (width, height) for window in windows)
    saliency = saliency_map(small_copy(picture)) if needs_placing else np.zeros((1, 1), np.float32)
    cuts = []
    for ratio, window in zip(spec.ratios, windows, strict=True):
        box = place_window(window, (width, height), saliency)
        available = ((box[2] - box[0]) * scale_x, (box[3] - box[1]) * scale_y)
        cuts.append(Cut(box=box, size=output_size(ratio, available, spec.max_side)))
    renditions = []
    resampled = resample_all(picture, cuts, (width, height))
    for ratio, (image, crop_box) in zip(spec.ratios, resampled, strict=True):
        encoded = encode_jpeg(image, spec.quality)
        renditions.append(
            Rendition(
                ratio=ratio,
                data=encoded,
                width=image.width,
                height=image.height,
                sha256=hashlib.sha256(encoded).hexdigest(),
                crop_box=crop_box,
            )
        )
    return renditions


def encode_jpeg(image: Image.Image, quality: int) -> bytes:
    """Baseline (non-progressive) JPEG, no metadata; the same pixels always give the same bytes."""
    buffer = io.BytesIO()
    image.save(
        buffer,
        format="JPEG",
        quality=quality,
        optimize=JPEG_OPTIMIZE,
        progressive=False,
        subsampling=JPEG_SUBSAMPLING,
    )
    return buffer.getvalue()

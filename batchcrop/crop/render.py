"""`render`: one source's bytes in, one encoded JPEG per ratio out.

Each output is a function of the source bytes, its own ratio and the render settings only, never
of the other ratios asked for with it (docs/design.md §6, determinism). Saliency comes from the
decode a whole-picture output would use (source and `max_side` alone); each ratio is resampled
with Lanczos from a decode whose DCT reduction depends on that ratio alone, decoding once per
distinct reduction, and cut from a canvas that depends on its scale alone (`resample`); every
output is encoded baseline JPEG, 1-channel for grey sources. Deterministic: same bytes + ratio +
spec + libraries ⇒ same output bytes and crop box. Thread-safe: no shared mutable state; the
heavy steps (decode, resize, encode) run inside Pillow, which releases the GIL.
"""

from __future__ import annotations

import hashlib
import io
import math
from dataclasses import dataclass

from PIL import Image

from batchcrop.crop.budget import MemoryBudget, reserved
from batchcrop.crop.colour import GREY_MODES
from batchcrop.crop.decode import (
    OpenedImage,
    decode_cost,
    decode_rgb,
    open_image,
    reduction,
)
from batchcrop.crop.errors import InvalidFocus
from batchcrop.crop.faces import DETECTION_BYTES, find_faces, keep_box
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.resample import Cut, resample_all
from batchcrop.crop.saliency import saliency_map, small_copy
from batchcrop.crop.spec import Ratio, RenderSpec, Rendition
from batchcrop.crop.window import Box, needed_scale, output_size, place_window, window_size

JPEG_SUBSAMPLING = "4:2:0"
JPEG_OPTIMIZE = True
"""Optimised Huffman tables: ~12 % smaller files for ~2 ms per 1200 px output; deterministic."""


@dataclass(frozen=True)
class Plan:
    """What a render decodes: the reduction for saliency and one per ratio (one decode is alive
    at a time), and the memory its peak needs: the largest decode, the canvases and the outputs."""

    saliency_factor: int
    factors: tuple[int, ...]
    windows: tuple[tuple[int, int], ...]
    cost_bytes: int


def plan(opened: OpenedImage, spec: RenderSpec) -> Plan:
    """The decodes `render` makes for `spec` on this (opened, not yet decoded) image."""
    width, height = opened.size
    windows = tuple(window_size(ratio, width, height) for ratio in spec.ratios)
    # The reduction a whole-picture output would use: no ratio's window is longer than the
    # picture, so every ratio decodes at this reduction or a finer one, and usually this one.
    saliency_factor = reduction(opened, needed_scale((width, height), spec.max_side))
    # Each ratio at the largest reduction still covering its own output (ADR 0003 says why not
    # finer: keeping a full decode's detail would cost 1.7 times the render time).
    factors = tuple(reduction(opened, needed_scale(window, spec.max_side)) for window in windows)
    decode = max(decode_cost(opened, factor) for factor in {saliency_factor, *factors})
    # Beside the decode: one canvas per scale (whole picture at that scale) and each output
    # with its encoded bytes, all alive until the reduction's outputs are encoded.
    canvases: dict[float, int] = {}
    outputs = 0
    for window in windows:
        scale = needed_scale(window, spec.max_side)
        canvases[scale] = (math.floor(width * scale) + 1) * (math.floor(height * scale) + 1)
        outputs += (math.floor(window[0] * scale) + 1) * (math.floor(window[1] * scale) + 1)
    # 4 bytes per pixel; an output also has its encoded bytes (at most about 1 per pixel).
    cost = decode + 4 * sum(canvases.values()) + 5 * outputs
    if any(window != (width, height) for window in windows):
        cost += DETECTION_BYTES
    return Plan(saliency_factor, factors, windows, cost)


def render(
    data: bytes,
    spec: RenderSpec,
    *,
    focus: Box | None = None,
    max_pixels: int = MAX_SOURCE_PIXELS,
    budget: MemoryBudget | None = None,
) -> list[Rendition]:
    """Render every ratio of `spec` from the image `data`, in `spec.ratios` order.

    `focus` is the item's focus box `(left, top, right, bottom)` in upright source pixels (after
    EXIF orientation, as `crop_box`): each window contains it when it can and is centred on it
    otherwise, instead of keeping the faces found (it then only avoids cutting them). A focus box
    reaching past the picture is clipped to it; one wholly outside raises `InvalidFocus`.

    Raises `InvalidImage`, `ImageTooLarge` (checked before decoding pixels, against
    `max_pixels` and, when given, against the whole memory `budget`) or `UnsupportedImage`.
    With a budget, the largest decode's estimated peak is reserved from it for the whole render
    (waiting while other renders hold it). No I/O beyond memory; safe from concurrent threads.
    """
    opened = open_image(data, max_pixels)
    if focus is not None:
        focus = _clipped(focus, opened.size)
    decodes = plan(opened, spec)
    with reserved(budget, decodes.cost_bytes):
        return _render(data, opened, spec, decodes, max_pixels=max_pixels, focus=focus)


def _clipped(focus: Box, size: tuple[int, int]) -> Box:
    left, top = max(0, focus[0]), max(0, focus[1])
    right, bottom = min(size[0], focus[2]), min(size[1], focus[3])
    if right <= left or bottom <= top:
        raise InvalidFocus(f"focus box {list(focus)} lies outside the {size[0]}x{size[1]} picture")
    return left, top, right, bottom


def _render(
    data: bytes,
    opened: OpenedImage,
    spec: RenderSpec,
    decodes: Plan,
    *,
    max_pixels: int,
    focus: Box | None,
) -> list[Rendition]:
    size = opened.size
    grey = opened.image.mode in GREY_MODES
    unused = [opened]

    def decode(factor: int) -> Image.Image:
        # An opened image decodes once: the first decode uses it, later ones open the bytes again.
        fresh = unused.pop() if unused else open_image(data, max_pixels)
        return decode_rgb(fresh, factor)

    boxes = [(0, 0, *size)] * len(decodes.windows)
    kept: Image.Image | None = None  # the saliency decode, when some ratio uses it too
    if any(window != size for window in decodes.windows):
        picture = decode(decodes.saliency_factor)
        saliency = saliency_map(small_copy(picture))
        faces = find_faces(picture, size)
        boxes = [
            place_window(
                window,
                size,
                saliency,
                keep=focus if focus is not None else keep_box(faces, window, size),
                whole=faces,
            )
            for window in decodes.windows
        ]
        if decodes.saliency_factor in decodes.factors:
            kept = picture
        del picture
    renditions: dict[int, Rendition] = {}
    # The kept saliency decode first, so that only one decode is ever alive.
    first = decodes.saliency_factor if kept is not None else None
    for factor in sorted(set(decodes.factors), key=lambda f: (f != first, f)):
        picture = kept if kept is not None and factor == first else decode(factor)
        kept = None
        members = [i for i, f in enumerate(decodes.factors) if f == factor]
        scale = (picture.width / size[0], picture.height / size[1])
        cuts = []
        for index in members:
            box = boxes[index]
            available = ((box[2] - box[0]) * scale[0], (box[3] - box[1]) * scale[1])
            cuts.append(Cut(box, output_size(spec.ratios[index], available, spec.max_side)))
        for index, (image, box) in zip(members, resample_all(picture, cuts, size), strict=True):
            # A grey source's three channels are equal: L keeps every value.
            output = image.convert("L") if grey else image
            renditions[index] = _encoded(spec.ratios[index], output, box, spec.quality)
        del picture
    return [renditions[index] for index in range(len(spec.ratios))]


def _encoded(ratio: Ratio, image: Image.Image, box: Box, quality: int) -> Rendition:
    encoded = encode_jpeg(image, quality)
    return Rendition(
        ratio=ratio,
        data=encoded,
        width=image.width,
        height=image.height,
        sha256=hashlib.sha256(encoded).hexdigest(),
        crop_box=box,
    )


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

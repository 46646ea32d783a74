"""`render`: one source's bytes in, one encoded image per ratio and output format out.

Each output is a function of the source bytes, its own ratio and the render settings only, never
of the other ratios asked for with it (docs/design.md §6, determinism). Saliency comes from the
decode a whole-picture output would use (source and `max_side` alone); each ratio is resampled
with Lanczos from a decode whose DCT reduction depends on that ratio alone, decoding once per
distinct reduction, and cut from a canvas that depends on its scale alone (`resample`); every
output is encoded once per format asked for (`encode`): baseline JPEG, WebP, AVIF, 1-channel
for grey sources. The resampled pixels are shared by the formats, except that a source with
transparency is resampled a second time with its alpha for the formats that keep it (WebP, AVIF),
so that its JPEG is the same pixels whether or not other formats were asked for. Deterministic:
same bytes + ratio + format + spec + libraries ⇒ same output bytes and crop box. Thread-safe: no
shared mutable state; the heavy steps (decode, resize, encode) run inside Pillow, which releases
the GIL.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from PIL import Image

from batchcrop.crop.budget import MemoryBudget, reserved
from batchcrop.crop.colour import GREY_MODES, has_alpha
from batchcrop.crop.decode import (
    OpenedImage,
    decode_cost,
    decode_rgb,
    open_image,
    reduction,
)
from batchcrop.crop.encode import FORMATS, encode
from batchcrop.crop.errors import InvalidFocus
from batchcrop.crop.faces import DETECTION_BYTES, find_faces, keep_box
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.resample import Cut, resample_all
from batchcrop.crop.saliency import saliency_map, small_copy
from batchcrop.crop.spec import Ratio, RenderSpec, Rendition
from batchcrop.crop.window import Box, needed_scale, output_size, place_window, window_size

AVIF_ENCODER_BYTES_PER_PIXEL = 24
"""libaom's working memory while it encodes one output (frame buffers, look-ahead, statistics),
per output pixel: its peak measured 13 bytes per pixel on a 1200x900 noise picture at speed 9."""


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
    # It needs no margin for detail: the saliency reads a copy of 192 px and the faces one of
    # 320 px.
    saliency_factor = reduction(opened, needed_scale((width, height), spec.max_side), 1.0)
    # Each ratio at the largest reduction still covering its own output (1/4 and 1/8 with a
    # margin); `resample.restore_detail` then makes up the detail the reduction softened, for
    # a tenth of the cost of a finer decode (ADR 0003).
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
    # 4 bytes per pixel; an output also has its encoded bytes (at most about 1 per pixel) in
    # each format, and AVIF's encoder its working memory for the largest output, one at a time.
    # The detail restoration (`resample.restore_detail`) copies one canvas at a time.
    canvas_pixels = sum(canvases.values()) + max(canvases.values())
    cost = decode + 4 * canvas_pixels + (4 + len(spec.formats)) * outputs
    if "avif" in spec.formats:
        largest = max(
            (math.floor(w * needed_scale((w, h), spec.max_side)) + 1)
            * (math.floor(h * needed_scale((w, h), spec.max_side)) + 1)
            for w, h in windows
        )
        cost += AVIF_ENCODER_BYTES_PER_PIXEL * largest
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
    """Render every ratio of `spec` from the image `data` in every format of `spec.formats`:
    ratio by ratio in `spec.ratios` order, each ratio's formats in `spec.formats` order.

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
    # The formats encoded from the flattened (RGB) pixels, and those from RGBA pixels: the ones
    # keeping transparency, when the source has some.
    alpha = has_alpha(opened.image)
    flat = tuple(f for f in spec.formats if not (alpha and FORMATS[f].keeps_alpha))
    kept_alpha = tuple(f for f in spec.formats if alpha and FORMATS[f].keeps_alpha)
    unused = [opened]

    def decode(factor: int, *, keep_alpha: bool = False) -> Image.Image:
        # An opened image decodes once: the first decode uses it, later ones open the bytes again.
        fresh = unused.pop() if unused else open_image(data, max_pixels)
        return decode_rgb(fresh, factor, keep_alpha=keep_alpha)

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
        if decodes.saliency_factor in decodes.factors and flat:
            kept = picture
        del picture
    renditions: dict[tuple[int, str], Rendition] = {}
    # The kept saliency decode first, so that only one decode is ever alive.
    first = decodes.saliency_factor if kept is not None else None
    for factor in sorted(set(decodes.factors), key=lambda f: (f != first, f)):
        members = [i for i, f in enumerate(decodes.factors) if f == factor]
        for formats, keep_alpha in ((flat, False), (kept_alpha, True)):
            if not formats:
                continue
            if kept is not None and factor == first and not keep_alpha:
                picture = kept
            else:
                picture = decode(factor, keep_alpha=keep_alpha)
            kept = None
            scale = (picture.width / size[0], picture.height / size[1])
            cuts = []
            for index in members:
                box = boxes[index]
                available = ((box[2] - box[0]) * scale[0], (box[3] - box[1]) * scale[1])
                cuts.append(Cut(box, output_size(spec.ratios[index], available, spec.max_side)))
            pictures = resample_all(picture, cuts, size)
            del picture
            for index, (image, box) in zip(members, pictures, strict=True):
                # A grey source's three channels are equal: L keeps every value.
                output = image.convert("L") if grey and image.mode == "RGB" else image
                for name in formats:
                    renditions[index, name] = _encoded(
                        spec.ratios[index], output, box, spec.quality, name, source=size
                    )
            del pictures
    return [renditions[index, name] for index in range(len(spec.ratios)) for name in spec.formats]


def _encoded(
    ratio: Ratio, image: Image.Image, box: Box, quality: int, name: str, *, source: tuple[int, int]
) -> Rendition:
    encoded = encode(image, name, quality)
    return Rendition(
        ratio=ratio,
        data=encoded,
        width=image.width,
        height=image.height,
        sha256=hashlib.sha256(encoded).hexdigest(),
        crop_box=box,
        format=name,
        source_size=source,
    )

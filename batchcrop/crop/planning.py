"""The render's plan and placement, shared by `render` and the window preview (`crop_boxes`).

`plan` says which decodes a render makes and the memory they need; `placed_windows` is step 4
of the pipeline (docs/design.md §6), each ratio's window placed on the saliency decode;
`cut_for` is the output a window becomes. The preview runs these same functions, so that its
crop boxes are the render's. Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PIL import Image

from batchcrop.crop.decode import OpenedImage, decode_cost, reduction
from batchcrop.crop.errors import InvalidFocus
from batchcrop.crop.faces import DETECTION_BYTES, find_faces
from batchcrop.crop.geometry import Box, needed_scale, output_size, place_window, window_size
from batchcrop.crop.keep import keep_box
from batchcrop.crop.resample import Cut
from batchcrop.crop.saliency import saliency_map, small_copy
from batchcrop.crop.spec import Ratio, RenderSpec

AVIF_ENCODER_BYTES_PER_PIXEL = 24
"""libaom's working memory while it encodes one output (frame buffers, look-ahead, statistics),
per output pixel: its peak measured 13 bytes per pixel on a 1200x900 noise picture at speed 9."""

MATCHING_BYTES_PER_PIXEL = 160
"""The search that matches a WebP or AVIF output to its JPEG (`matching`, `quality_match`
`jpeg`), per output pixel at its peak: the reference's float32 planes at every scale (64 bytes)
and a candidate's while it is scored (96), measured with tracemalloc on a 1200x900 picture."""


@dataclass(frozen=True)
class Plan:
    """What a render decodes: the reduction for saliency and one per ratio (one decode is alive
    at a time), and the memory its peak needs: the largest decode, the canvases and the outputs."""

    saliency_factor: int
    factors: tuple[int, ...]
    windows: tuple[tuple[int, int], ...]
    cost_bytes: int


def saliency_reduction(opened: OpenedImage, max_side: int) -> int:
    """The DCT reduction of the decode a render at `max_side` places its windows on: the one a
    whole-picture output would use."""
    return reduction(opened, needed_scale(opened.size, max_side), 1.0)


def plan(opened: OpenedImage, spec: RenderSpec) -> Plan:
    """The decodes `render` makes for `spec` on this (opened, not yet decoded) image."""
    width, height = opened.size
    windows = tuple(window_size(ratio, width, height) for ratio in spec.ratios)
    # The reduction a whole-picture output would use: no ratio's window is longer than the
    # picture, so every ratio decodes at this reduction or a finer one, and usually this one.
    # It needs no margin for detail: the saliency reads a copy of `SALIENCY_SIDE_PX` and the
    # faces one of `FACE_SEARCH_SIDE_PX`.
    saliency_factor = saliency_reduction(opened, spec.max_side)
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
    # each format, and AVIF's encoder and the matching search their working memory for the
    # largest output, one at a time.
    # The detail restoration (`resample.restore_detail`) copies one canvas at a time.
    canvas_pixels = sum(canvases.values()) + max(canvases.values())
    cost = decode + 4 * canvas_pixels + (4 + len(spec.formats)) * outputs
    largest = max(
        (math.floor(w * needed_scale((w, h), spec.max_side)) + 1)
        * (math.floor(h * needed_scale((w, h), spec.max_side)) + 1)
        for w, h in windows
    )
    if "avif" in spec.formats:
        cost += AVIF_ENCODER_BYTES_PER_PIXEL * largest
    if spec.quality_match == "jpeg" and any(name != "jpeg" for name in spec.formats):
        # One output is matched at a time, its WebP and AVIF against one reference.
        cost += MATCHING_BYTES_PER_PIXEL * largest
    if any(window != (width, height) for window in windows):
        cost += DETECTION_BYTES
    return Plan(saliency_factor, factors, windows, cost)


def clipped_focus(focus: Box, size: tuple[int, int]) -> Box:
    """`focus` clipped to a picture of `size`; `InvalidFocus` when it lies wholly outside."""
    left, top = max(0, focus[0]), max(0, focus[1])
    right, bottom = min(size[0], focus[2]), min(size[1], focus[3])
    if right <= left or bottom <= top:
        raise InvalidFocus(f"focus box {list(focus)} lies outside the {size[0]}x{size[1]} picture")
    return left, top, right, bottom


def placed_windows(
    picture: Image.Image,
    size: tuple[int, int],
    windows: tuple[tuple[int, int], ...],
    focus: Box | None,
) -> list[Box]:
    """Step 4 of the pipeline (docs/design.md §6): each window placed on the upright source of
    `size`, from the saliency and the faces of `picture` (its saliency decode). The focus box,
    when given (already clipped), is what each window keeps; otherwise the faces are."""
    saliency = saliency_map(small_copy(picture))
    faces = find_faces(picture, size)
    return [
        place_window(
            window,
            size,
            saliency,
            keep=focus if focus is not None else keep_box(faces, window, size),
            whole=[face.box for face in faces],
        )
        for window in windows
    ]


def cut_for(
    box: Box, ratio: Ratio, max_side: int, decoded: tuple[int, int], size: tuple[int, int]
) -> Cut:
    """The output to cut for a window `box` of a source of `size` decoded at `decoded` pixels:
    the window and its output size (its long side `max_side` at most, never upscaled)."""
    scale = (decoded[0] / size[0], decoded[1] / size[1])
    available = ((box[2] - box[0]) * scale[0], (box[3] - box[1]) * scale[1])
    return Cut(box, output_size(ratio, available, max_side))

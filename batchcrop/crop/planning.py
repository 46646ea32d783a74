"""The render's plan and cuts, shared by `render` and the window preview (`crop_boxes`).

`plan` says which look decode a render makes and the memory it needs; `output_sizes` lists the
outputs (each ratio at each size); `factors` gives each output's decode once the framing
(`framing.frame`, step 4 of the pipeline, docs/design.md §6) is known; `cut_for` is the output a
window becomes and `padded_cut` the output a padded picture becomes. The preview runs these
same functions, so that its crop boxes are the render's. Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchcrop.crop.decode import OpenedImage, decode_cost, reduction
from batchcrop.crop.errors import InvalidFocus
from batchcrop.crop.faces import DETECTION_BYTES
from batchcrop.crop.framing import Framed, Framing, needs_look, padded_span
from batchcrop.crop.geometry import Box, needed_scale, output_size, round_half_up, window_size
from batchcrop.crop.people import PEOPLE_DETECTION_BYTES
from batchcrop.crop.resample import Cut
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
    """What a render decodes: the reduction of the look decode (saliency, faces, trim, border)
    and whether framing needs it (`framing.needs_look`), and the memory its peak needs: the
    largest decode, the canvases and the outputs. The outputs' own reductions follow from
    their framing (`factors`); one decode is alive at a time."""

    saliency_factor: int
    look: bool
    cost_bytes: int


@dataclass(frozen=True)
class OutputSize:
    """One output of a ratio: the ratio (`index` in the spec's ratios), the long side it may
    reach (`long_side`) and the width asked for (None: the single size, `max_side`)."""

    index: int
    ratio: Ratio
    long_side: int
    requested_width: int | None


def output_sizes(spec: RenderSpec) -> tuple[OutputSize, ...]:
    """Every output of `spec` in output order: ratio by ratio, each ratio's sizes in order."""
    return tuple(
        OutputSize(index, ratio, long_side(ratio, width, spec.max_side), width)
        for index, ratio in enumerate(spec.ratios)
        for width in spec.sizes
    )


def long_side(ratio: Ratio, width: int | None, max_side: int) -> int:
    """The long side of a `ratio` output `width` pixels wide (`max_side` for the single size):
    `output_size` then makes it exactly `width` wide unless the source holds less."""
    if width is None:
        return max_side
    if ratio.w >= ratio.h:
        return width
    return max(1, round_half_up(width * ratio.h / ratio.w))


def saliency_reduction(opened: OpenedImage, max_side: int) -> int:
    """The DCT reduction of the decode a render at `max_side` places its windows on: the one a
    whole-picture output would use."""
    return reduction(opened, needed_scale(opened.size, max_side), 1.0)


def plan(opened: OpenedImage, spec: RenderSpec) -> Plan:
    """The look decode `render` makes for `spec` on this (opened, not yet decoded) image, and
    an upper estimate of the memory its render needs."""
    width, height = opened.size
    # The reduction a whole-picture output would use: no ratio's window is longer than the
    # picture, so every ratio decodes at this reduction or a finer one, and usually this one.
    # It needs no margin for detail: the saliency reads a copy of `SALIENCY_SIDE_PX` and the
    # faces one of `FACE_SEARCH_SIDE_PX`. With widths `max_side` keeps its default, so the
    # look is the same whichever widths are asked (docs/design.md §6, determinism).
    saliency_factor = saliency_reduction(opened, spec.max_side)
    look = needs_look(spec, opened.size)
    # Each output at the largest reduction still covering its own output (1/4 and 1/8 with a
    # margin); `resample.restore_detail` then makes up the detail the reduction softened, for
    # a tenth of the cost of a finer decode (ADR 0003). Before the look, what the framing will
    # choose is not known: every fit the request allows is counted, and a trimmed picture,
    # which may be any part of the source, at full resolution.
    spans: list[tuple[tuple[int, int], int]] = []
    for size in output_sizes(spec):
        window = window_size(size.ratio, width, height)
        if spec.fit != "pad":
            spans.append((window, size.long_side))
        if spec.fit != "crop":
            spans.append((padded_span((width, height), size.ratio), size.long_side))
    trimmed = spec.trim > 0

    def scale_of(span: tuple[int, int], side: int) -> float:
        return 1.0 if trimmed else needed_scale(span, side)

    factors = {reduction(opened, scale_of(span, side)) for span, side in spans}
    decode = max(decode_cost(opened, factor) for factor in {saliency_factor, *factors})
    # Beside the decode: one canvas per scale (whole picture at that scale) and each output
    # with its encoded bytes, all alive until the reduction's outputs are encoded.
    canvases: dict[float, int] = {}
    outputs = 0
    largest = 0
    for (span_w, span_h), side in spans:
        scale = scale_of((span_w, span_h), side)
        canvases[scale] = (math.floor(width * scale) + 1) * (math.floor(height * scale) + 1)
        fit = needed_scale((span_w, span_h), side)
        pixels = (math.floor(span_w * fit) + 1) * (math.floor(span_h * fit) + 1)
        outputs += pixels
        largest = max(largest, pixels)
    # 4 bytes per pixel; an output also has its encoded bytes (at most about 1 per pixel) in
    # each format, and AVIF's encoder and the matching search their working memory for the
    # largest output, one at a time.
    # The detail restoration (`resample.restore_detail`) copies one canvas at a time.
    canvas_pixels = sum(canvases.values()) + max(canvases.values())
    cost = decode + 4 * canvas_pixels + (4 + len(spec.formats)) * outputs
    if "avif" in spec.formats:
        cost += AVIF_ENCODER_BYTES_PER_PIXEL * largest
    if spec.quality_match == "jpeg" and any(name != "jpeg" for name in spec.formats):
        # One output is matched at a time, its WebP and AVIF against one reference.
        cost += MATCHING_BYTES_PER_PIXEL * largest
    if look:
        cost += DETECTION_BYTES + PEOPLE_DETECTION_BYTES
    return Plan(saliency_factor, look, cost)


def factors(
    opened: OpenedImage,
    framed: Framed,
    sizes: tuple[OutputSize, ...],
    stored: tuple[int, int],
) -> list[int]:
    """Each output's DCT reduction, from the span its framing covers (`Framing.span`);
    `stored` is the image's stored size, read before the look decode changed it."""
    return [
        reduction(
            opened,
            needed_scale(framed.ratios[size.index].span, size.long_side),
            stored=stored,
        )
        for size in sizes
    ]


def clipped_focus(focus: Box, size: tuple[int, int]) -> Box:
    """`focus` clipped to a picture of `size`; `InvalidFocus` when it lies wholly outside."""
    left, top = max(0, focus[0]), max(0, focus[1])
    right, bottom = min(size[0], focus[2]), min(size[1], focus[3])
    if right <= left or bottom <= top:
        raise InvalidFocus(f"focus box {list(focus)} lies outside the {size[0]}x{size[1]} picture")
    return left, top, right, bottom


def cut_for(
    box: Box, ratio: Ratio, max_side: int, decoded: tuple[int, int], size: tuple[int, int]
) -> Cut:
    """The output to cut for a window `box` of a source of `size` decoded at `decoded` pixels:
    the window and its output size (its long side `max_side` at most, never upscaled)."""
    scale = (decoded[0] / size[0], decoded[1] / size[1])
    available = ((box[2] - box[0]) * scale[0], (box[3] - box[1]) * scale[1])
    return Cut(box, output_size(ratio, available, max_side))


def padded_cut(
    framing: Framing,
    ratio: Ratio,
    max_side: int,
    decoded: tuple[int, int],
    size: tuple[int, int],
) -> tuple[Cut, tuple[int, int], tuple[int, int, int, int]]:
    """A padded output: the cut of the picture (`framing.box`) at the scale that fits it in
    the output, the output's size (its long side `max_side` at most, the picture never
    upscaled) and the padding (left, top, right, bottom) in output pixels that centres it."""
    scale = (decoded[0] / size[0], decoded[1] / size[1])
    span = (framing.span[0] * scale[0], framing.span[1] * scale[1])
    out_w, out_h = output_size(ratio, span, max_side)
    left, top, right, bottom = framing.box
    width, height = right - left, bottom - top
    fit = min(out_w / width, out_h / height)
    inner = (
        max(1, min(out_w, round_half_up(width * fit))),
        max(1, min(out_h, round_half_up(height * fit))),
    )
    pad_x, pad_y = out_w - inner[0], out_h - inner[1]
    padding = (pad_x // 2, pad_y // 2, pad_x - pad_x // 2, pad_y - pad_y // 2)
    return Cut(framing.box, inner), (out_w, out_h), padding

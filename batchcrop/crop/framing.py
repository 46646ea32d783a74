"""How each ratio's output holds the picture: trim, then crop or pad (docs/design.md §6, fit).

`frame` runs on the saliency decode (the look) of a source, before any output is resampled:
it trims near-uniform borders when the request asks (`trim`, a tolerance in levels), so a
product on a wide margin fills the frame; then each ratio is either cropped (its window placed
as step 4 of docs/design.md §6 places it, inside the trimmed frame) or padded (the whole trimmed
picture, centred in the smallest frame of the ratio around it). Under `auto` a ratio is cropped
when its window can hold the subject (the item's focus box; else the picture's content on a
near-uniform border, its salient region and its faces) and padded when cropping would cut it.
The padding's colour is the request's, or under `auto` the picture's border colour when that
border is near-uniform, else white.

Everything here reads only the look decode, whose reduction depends on the source and the
single-size `max_side` alone, so a ratio's framing is the same whichever other ratios or widths
are asked with it (docs/design.md §6, determinism). Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

from batchcrop.crop.faces import FACE_CONFIDENCE, Face, SearchCopies, find_faces
from batchcrop.crop.geometry import Box, place_window, round_half_up, window_size
from batchcrop.crop.keep import keep_box
from batchcrop.crop.people import Person, find_people
from batchcrop.crop.saliency import saliency_map, small_copy
from batchcrop.crop.spec import AUTO_COLOUR, Ratio, RenderSpec, colour_rgb

BORDER_PX = 2
"""Rows and columns of the look decode that make the picture's border."""
BORDER_TOLERANCE = 24
"""A border is near-uniform when `BORDER_SHARE` of its pixels lie within this many levels (each
channel) of its median colour: a studio white with JPEG noise and a faint vignette passes, a
photograph's edge does not."""
BORDER_SHARE = 0.9
"""A tenth of the border may differ: a product touching the edge (a colour wheel on black
reaches within 3 px of it) leaves its background plain."""
SUBJECT_TOLERANCE = 24
"""Under `auto`, a pixel further than this from a near-uniform border's colour is the subject's."""
SALIENT_SHARE = 0.25
"""Under `auto`, saliency cells at least this share of the peak are the subject's."""
CONTENT_MARGIN_PX = 1
"""Look pixels kept beyond the content found, on each side (`trimmed_box`, the subject)."""
WHITE = (255, 255, 255)

Colour = tuple[int, int, int]


@dataclass(frozen=True)
class Framing:
    """One ratio's framing: the `fit` used (`crop` or `pad`), the source `box` its output
    shows (the window, or the whole trimmed picture when padded) and the `span` (width,
    height) in source pixels its output covers (the window, or the padded frame)."""

    fit: str
    box: Box
    span: tuple[int, int]

    @property
    def frame_box(self) -> Box:
        """The output's extent in source pixels: the box, with the padding around it (reaching
        past the picture where padded), centred as `padded` pads."""
        left, top, right, bottom = self.box
        extra_x, extra_y = self.span[0] - (right - left), self.span[1] - (bottom - top)
        return (
            left - extra_x // 2,
            top - extra_y // 2,
            right + extra_x - extra_x // 2,
            bottom + extra_y - extra_y // 2,
        )


@dataclass(frozen=True)
class Framed:
    """A source's framing: the trimmed box (None: no trim asked), each ratio's `Framing` in the
    spec's order and the padding colour (RGB)."""

    trim_box: Box | None
    ratios: tuple[Framing, ...]
    colour: Colour


def needs_look(spec: RenderSpec, size: tuple[int, int]) -> bool:
    """Whether framing `spec` on a `size` source reads pixels (else every ratio's framing
    follows from the size: `frame(None, ...)`)."""
    if spec.trim or spec.fit == "auto":
        return True
    if spec.fit == "pad":
        return spec.pad_colour == AUTO_COLOUR
    return any(window_size(r, *size) != size for r in spec.ratios)


def frame(
    look: Image.Image | None, size: tuple[int, int], spec: RenderSpec, focus: Box | None
) -> Framed:
    """Each ratio's framing on a source of `size` whose look decode is `look` (None when
    `needs_look` says none is needed); `focus`, already clipped, is kept whole by the trim and
    by every crop."""
    whole = (0, 0, *size)
    trim_box = None
    if spec.trim and look is not None:
        trim_box = _union(trimmed_box(look, size, spec.trim), focus)
    box = trim_box or whole
    frame_size = (box[2] - box[0], box[3] - box[1])
    windows = [window_size(ratio, *frame_size) for ratio in spec.ratios]
    colour = _pad_colour(look, spec)
    crops: list[Box | None]
    if spec.fit == "pad":
        crops = [None] * len(windows)
    elif look is None or (spec.fit == "crop" and all(w == frame_size for w in windows)):
        crops = [(0, 0, *frame_size)] * len(windows)
    else:
        crops = _placed(_cut(look, size, box), frame_size, windows, spec, _moved(focus, box))
    framings = []
    for ratio, window, crop in zip(spec.ratios, windows, crops, strict=True):
        if spec.fit == "pad" or crop is None:
            framings.append(Framing("pad", box, padded_span(frame_size, ratio)))
        else:
            placed = (crop[0] + box[0], crop[1] + box[1], crop[2] + box[0], crop[3] + box[1])
            framings.append(Framing("crop", placed, window))
    return Framed(trim_box, tuple(framings), colour)


def padded_span(size: tuple[int, int], ratio: Ratio) -> tuple[int, int]:
    """The smallest frame of `ratio` (whole pixels) around a picture of `size`."""
    width, height = size
    if ratio.w * height >= ratio.h * width:  # the ratio is wider: pad left and right
        return max(width, round_half_up(height * ratio.w / ratio.h)), height
    return width, max(height, round_half_up(width * ratio.h / ratio.w))


def border_colour(look: Image.Image) -> Colour | None:
    """The median colour of the look decode's border when it is near-uniform; else None."""
    border = _border(np.asarray(look.convert("RGB"), dtype=np.int16))
    median = np.median(border, axis=0)
    spread = np.abs(border - median).max(axis=1)
    if float(np.mean(spread <= BORDER_TOLERANCE)) < BORDER_SHARE:
        return None
    red, green, blue = (round(float(v)) for v in median)
    return red, green, blue


def trimmed_box(look: Image.Image, size: tuple[int, int], tolerance: int) -> Box:
    """The source box left when rows and columns within `tolerance` levels of the border's
    median colour are trimmed from each side (the whole picture when nothing else is left).
    Rounded outwards to source pixels, so no pixel of what is kept is cut."""
    pixels = np.asarray(look.convert("RGB"), dtype=np.int16)
    return _content_box(pixels, size, np.median(_border(pixels), axis=0), tolerance)


def _content_box(
    pixels: npt.NDArray[np.int16],
    size: tuple[int, int],
    colour: npt.NDArray[np.float64],
    tolerance: int,
) -> Box:
    content: npt.NDArray[np.bool_] = np.any(np.abs(pixels - colour) > tolerance, axis=2)
    columns, rows = np.flatnonzero(content.any(axis=0)), np.flatnonzero(content.any(axis=1))
    if columns.size == 0:
        return 0, 0, *size
    scale_x, scale_y = size[0] / pixels.shape[1], size[1] / pixels.shape[0]
    # One look pixel of margin: a reduced decode averages a thin edge of the content with the
    # border around it, which may leave that look pixel within the tolerance.
    margin = CONTENT_MARGIN_PX
    return (
        max(0, math.floor((columns[0] - margin) * scale_x)),
        max(0, math.floor((rows[0] - margin) * scale_y)),
        min(size[0], math.ceil((columns[-1] + 1 + margin) * scale_x)),
        min(size[1], math.ceil((rows[-1] + 1 + margin) * scale_y)),
    )


def _border(pixels: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    """The outer `BORDER_PX` rows and columns' pixels, as an (n, 3) array."""
    edge = min(BORDER_PX, max(1, min(pixels.shape[:2]) // 2))
    parts = [
        pixels[:edge].reshape(-1, 3),
        pixels[-edge:].reshape(-1, 3),
        pixels[:, :edge].reshape(-1, 3),
        pixels[:, -edge:].reshape(-1, 3),
    ]
    return np.concatenate(parts)


def _pad_colour(look: Image.Image | None, spec: RenderSpec) -> Colour:
    if spec.pad_colour != AUTO_COLOUR:
        return colour_rgb(spec.pad_colour)
    if look is None or spec.fit == "crop":
        return WHITE
    return border_colour(look) or WHITE


def _cut(look: Image.Image, size: tuple[int, int], box: Box) -> Image.Image:
    """The part of the look decode showing the source `box`, rounded outwards."""
    if box == (0, 0, *size):
        return look
    scale_x, scale_y = look.width / size[0], look.height / size[1]
    return look.crop(
        (
            math.floor(box[0] * scale_x),
            math.floor(box[1] * scale_y),
            max(math.floor(box[0] * scale_x) + 1, math.ceil(box[2] * scale_x)),
            max(math.floor(box[1] * scale_y) + 1, math.ceil(box[3] * scale_y)),
        )
    )


def _moved(focus: Box | None, box: Box) -> Box | None:
    """`focus` in the coordinates of the frame `box` (which contains it)."""
    if focus is None:
        return None
    return focus[0] - box[0], focus[1] - box[1], focus[2] - box[0], focus[3] - box[1]


def _placed(
    picture: Image.Image,
    size: tuple[int, int],
    windows: Sequence[tuple[int, int]],
    spec: RenderSpec,
    focus: Box | None,
) -> list[Box | None]:
    """Each window placed on the frame `picture` of `size` (step 4 of
    docs/design.md §6); under `auto`, None for a window that cannot hold the subject."""
    saliency = saliency_map(small_copy(picture))
    copies = SearchCopies(picture)
    faces = find_faces(picture, size, copies=copies)
    people = find_people(picture, size, faces, copies=copies) if focus is None else ()
    whole = [face.box for face in faces]
    # A face the window must cut weighs as in `keep`: a doubtful detection gives way first.
    weights = [float(face.confidence * face.confidence) for face in faces]
    if spec.fit == "crop":
        return [
            place_window(
                w,
                size,
                saliency,
                keep=focus if focus is not None else keep_box(faces, w, size, people),
                whole=whole,
                whole_weights=weights,
            )
            for w in windows
        ]
    subject = focus if focus is not None else _subject(picture, size, saliency, faces, people)
    placed: list[Box | None] = []
    for w in windows:
        axis = 0 if w[0] < size[0] else 1
        fits = subject[axis + 2] - subject[axis] <= w[axis]
        placed.append(
            place_window(w, size, saliency, keep=subject, whole=whole, whole_weights=weights)
            if fits
            else None
        )
    return placed


def _subject(
    picture: Image.Image,
    size: tuple[int, int],
    saliency: npt.NDArray[np.float32],
    faces: Sequence[Face],
    people: Sequence[Person],
) -> Box:
    """What `auto` keeps whole: the content on a near-uniform border (every pixel unlike it),
    the salient region, the confident faces and the people found without one, as one box in
    the frame's pixels."""
    boxes: list[Box] = [face.box for face in faces if face.confidence >= FACE_CONFIDENCE]
    boxes.extend(person.box for person in people)
    colour = border_colour(picture)
    if colour is not None:
        pixels = np.asarray(picture, dtype=np.int16)
        boxes.append(_content_box(pixels, size, np.array(colour), SUBJECT_TOLERANCE))
    peak = float(saliency.max()) if saliency.size else 0.0
    if peak > 0:
        cells = saliency >= SALIENT_SHARE * peak
        columns, rows = np.flatnonzero(cells.any(axis=0)), np.flatnonzero(cells.any(axis=1))
        cell_x, cell_y = size[0] / saliency.shape[1], size[1] / saliency.shape[0]
        boxes.append(
            (
                math.floor(columns[0] * cell_x),
                math.floor(rows[0] * cell_y),
                min(size[0], math.ceil((columns[-1] + 1) * cell_x)),
                min(size[1], math.ceil((rows[-1] + 1) * cell_y)),
            )
        )
    union = _union_all(boxes)
    return union if union is not None else (0, 0, *size)


def _union(box: Box, other: Box | None) -> Box:
    return box if other is None else _union_all([box, other]) or box


def _union_all(boxes: Sequence[Box]) -> Box | None:
    if not boxes:
        return None
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )

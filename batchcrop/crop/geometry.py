"""Window geometry: which part of the source each ratio keeps, and the output size.

Every window is the largest of its ratio that fits the source (it spans the full width or the full
height), so only its position along one axis is chosen, from the saliency summed across the other
axis. A box the window must keep (the people in it, or the item's focus box) limits the positions
to those containing it, or centres the window on it when it is longer than the window; among the
positions left, those that do not cut through another face come first. Then the position keeps
(nearly) the most salient mass; among those positions it prefers edges
that cut through the least salience, then the one centred on the mass it keeps: a small subject
ends up centred, not pushed against the window's edge, and a subject at the image border stays
whole (the window is clamped to the image; its edge there cuts nothing).
Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from batchcrop.crop.spec import Ratio

PLACEMENT_TOLERANCE = 0.02
"""Positions keeping at least (1 - this) of the best salient mass count as equally good."""

CUT_TOLERANCE = 0.1
"""Edge cuts within this fraction of the profile's peak of the least-cutting position are equal."""

SALIENCY_QUANTA = 4096
"""Saliency is rounded to multiples of 1/this before placement (see `place_window`)."""

PLACEMENT_STEP_CELLS = 0.25
"""Candidate window positions are this many saliency-map cells apart."""

_FLOOR_SLACK = 1e-6  # absorbs float error in "at least this many pixels" comparisons

Box = tuple[int, int, int, int]
_HALF = Fraction(1, 2)


def round_half_up(value: float | Fraction) -> int:
    """Round to the nearest integer, halves up (Python's round() goes to even)."""
    return math.floor(value + _HALF)


def window_size(ratio: Ratio, width: int, height: int) -> tuple[int, int]:
    """The largest `ratio` window inside `width` by `height`, in whole pixels, each side ≥ 1."""
    if ratio.w * height >= ratio.h * width:
        return width, min(height, max(1, round_half_up(width * ratio.h / ratio.w)))
    return min(width, max(1, round_half_up(height * ratio.w / ratio.h))), height


def needed_scale(window: tuple[int, int], max_side: int) -> float:
    """The fraction of source resolution the window's output needs (1.0: never upscale)."""
    return min(1.0, max_side / max(window))


def output_size(ratio: Ratio, available: tuple[float, float], max_side: int) -> tuple[int, int]:
    """Output pixels for a crop `available` (width, height) pixels big at decoded scale.

    The long side of the ratio is `min(max_side, available)`; the other follows the ratio,
    rounded, and never exceeds what is available either: the aspect is exact within one pixel.
    """
    fit_w = max(1, math.floor(available[0] + _FLOOR_SLACK))
    fit_h = max(1, math.floor(available[1] + _FLOOR_SLACK))
    if ratio.w >= ratio.h:
        out_w = min(max_side, fit_w)
        return out_w, min(fit_h, max(1, round_half_up(out_w * ratio.h / ratio.w)))
    out_h = min(max_side, fit_h)
    return min(fit_w, max(1, round_half_up(out_h * ratio.w / ratio.h))), out_h


def place_window(
    window: tuple[int, int],
    size: tuple[int, int],
    saliency: npt.NDArray[np.float32],
    *,
    keep: Box | None = None,
    whole: Sequence[Box] = (),
    whole_weights: Sequence[float] | None = None,
) -> Box:
    """Position `window` inside a source of `size` using the saliency map (any resolution).

    `keep` (source pixels) is contained whenever the window can hold it along its free axis and
    centred otherwise; positions that leave each box of `whole` either inside or outside the
    window come first, and where none leaves every one so, those cutting the least weight
    (`whole_weights`, one per box; default 1 each). Returns `(left, top, right, bottom)` in
    source pixels, right/bottom exclusive.
    """
    weights = tuple(1.0 for _ in whole) if whole_weights is None else tuple(whole_weights)
    if len(weights) != len(whole):
        raise ValueError("one weight per box of `whole`")
    if any(weight <= 0 for weight in weights):
        raise ValueError("the weights of `whole` must be positive")
    (win_w, win_h), (width, height) = window, size
    # Whole numbers of 1/SALIENCY_QUANTA: every sum below is then exact, so last-bit float
    # differences between machines cannot flip a near-tie and change the crop (and the bytes).
    quanta = np.rint(saliency.astype(np.float64) * SALIENCY_QUANTA)
    if win_w < width:
        left = _start(quanta.sum(axis=0), width, win_w, _spans(keep, whole, 0), weights)
        return left, 0, left + win_w, win_h
    if win_h < height:
        top = _start(quanta.sum(axis=1), height, win_h, _spans(keep, whole, 1), weights)
        return 0, top, win_w, top + win_h
    return 0, 0, width, height


_Span = tuple[int, int]


def _spans(
    keep: Box | None, whole: Sequence[Box], axis: int
) -> tuple[_Span | None, tuple[_Span, ...]]:
    """The boxes' extents along `axis` (0: x, 1: y)."""
    kept = None if keep is None else (keep[axis], keep[axis + 2])
    return kept, tuple((box[axis], box[axis + 2]) for box in whole)


def _start(
    profile: npt.NDArray[np.float64],
    extent: int,
    length: int,
    spans: tuple[_Span | None, tuple[_Span, ...]],
    weights: tuple[float, ...],
) -> int:
    """The window's first pixel along its free axis (see `place_window`)."""
    keep, whole = spans
    low, high = 0, extent - length
    if keep is not None:
        if keep[1] - keep[0] > length:  # cannot hold it: centre on it
            centred = round_half_up(Fraction(keep[0] + keep[1] - length, 2))
            return min(max(low, centred), high)
        low, high = max(low, keep[1] - length), min(high, keep[0])
    cell = extent / profile.shape[0]
    start = _place(
        profile,
        length / cell,
        (low / cell, high / cell),
        tuple((a / cell, b / cell) for a, b in whole),
        weights,
    )
    return min(max(low, round_half_up(start * cell)), high)


def _place(
    profile: npt.NDArray[np.float64],
    length: float,
    bounds: tuple[float, float] | None = None,
    whole: Sequence[tuple[float, float]] = (),
    whole_weights: Sequence[float] = (),
) -> float:
    """Start (in cells) of a `length`-cell window over a 1-D saliency profile.

    Starts lie within `bounds` (default: the whole profile). Four preferences, in order: leave
    each span of `whole` entirely inside or outside (where no start does, cut the least weight
    of them, `whole_weights`, one per span); keep nearly the most salient mass; among
    those positions, cut through as little salience as possible (a window edge lying on the
    subject both cuts it and pushes it against the edge); among those, centre the window on the
    mass it keeps.
    """
    cells = int(profile.shape[0])
    slack = cells - length
    if slack <= 0:
        return 0.0
    low, high = (0.0, slack) if bounds is None else (max(0.0, bounds[0]), min(slack, bounds[1]))
    if high <= low:
        return low
    weights = profile.astype(np.float64)
    starts = np.append(np.arange(low, high, PLACEMENT_STEP_CELLS), high)
    filtered = False
    if whole:
        cut_weight = np.zeros(starts.shape, dtype=np.float64)
        for (first, last), weight in zip(whole, whole_weights, strict=True):
            inside = (starts <= first + _FLOOR_SLACK) & (starts + length >= last - _FLOOR_SLACK)
            outside = (starts >= last - _FLOOR_SLACK) | (starts + length <= first + _FLOOR_SLACK)
            cut_weight += np.where(inside | outside, 0.0, weight)
        lightest = cut_weight <= cut_weight.min()
        if not lightest.all():
            starts, filtered = starts[lightest], True
    mass, moment = _window_sums(weights, starts, length)
    best = float(mass.max())
    if best <= 0.0:  # nothing salient: the middle of what is allowed
        middle = (low + high) / 2
        return float(starts[int(np.argmin(np.abs(starts - middle)))]) if filtered else middle
    keeps = mass >= best * (1.0 - PLACEMENT_TOLERANCE)
    cut = _cut_salience(weights, starts, length)
    keeps &= cut <= cut[keeps].min() + CUT_TOLERANCE * float(weights.max())
    centroid = moment / np.maximum(mass, np.finfo(np.float64).tiny)
    off_centre = np.where(keeps, np.abs(centroid - (starts + length / 2)), np.inf)
    chosen: float = starts[int(np.argmin(off_centre))].item()
    return chosen


def _window_sums(
    weights: npt.NDArray[np.float64], starts: npt.NDArray[np.float64], length: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Mass and first moment (about cell 0) of the profile inside each window."""
    edges = np.arange(weights.shape[0] + 1, dtype=np.float64)
    mass_before = np.concatenate(([0.0], np.cumsum(weights)))
    moment_before = np.concatenate(([0.0], np.cumsum(weights * (edges[:-1] + 0.5))))
    # Linear interpolation of the cumulative sums: exact mass for a piecewise-constant profile.
    ends = starts + length
    mass = np.interp(ends, edges, mass_before) - np.interp(starts, edges, mass_before)
    moment = np.interp(ends, edges, moment_before) - np.interp(starts, edges, moment_before)
    return mass, moment


def _cut_salience(
    weights: npt.NDArray[np.float64], starts: npt.NDArray[np.float64], length: float
) -> npt.NDArray[np.float64]:
    """Salience next to each window's two edges; an edge on the image border cuts nothing."""
    cells = weights.shape[0]
    # Dilate by one cell: a salient cell touching the edge counts as cut, not only one crossed.
    near = np.maximum(weights, np.maximum(np.roll(weights, 1), np.roll(weights, -1)))
    near[0] = max(weights[0], weights[min(1, cells - 1)])
    near[-1] = max(weights[-1], weights[max(0, cells - 2)])
    first = np.clip(np.floor(starts).astype(np.int64), 0, cells - 1)
    last = np.clip(np.ceil(starts + length).astype(np.int64) - 1, 0, cells - 1)
    before = np.where(starts > _FLOOR_SLACK, near[first], 0.0)
    after = np.where(starts + length < cells - _FLOOR_SLACK, near[last], 0.0)
    return before + after

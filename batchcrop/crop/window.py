"""Window geometry: which part of the source each ratio keeps, and the output size.

Every window is the largest of its ratio that fits the source (it spans the full width or the full
height), so only its position along one axis is chosen, from the saliency summed across the other
axis. The position keeps (nearly) the most salient mass; among those positions it prefers edges
that cut through the least salience, then the one centred on the mass it keeps: a small subject
ends up centred, not pushed against the window's edge, and a subject at the image border stays
whole (the window is clamped to the image; its edge there cuts nothing).
Pure functions.
"""

from __future__ import annotations

import math
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
    window: tuple[int, int], size: tuple[int, int], saliency: npt.NDArray[np.float32]
) -> Box:
    """Position `window` inside a source of `size` using the saliency map (any resolution).

    Returns `(left, top, right, bottom)` in source pixels, right/bottom exclusive.
    """
    (win_w, win_h), (width, height) = window, size
    rows, cols = saliency.shape
    # Whole numbers of 1/SALIENCY_QUANTA: every sum below is then exact, so last-bit float
    # differences between machines cannot flip a near-tie and change the crop (and the bytes).
    quanta = np.rint(saliency.astype(np.float64) * SALIENCY_QUANTA)
    if win_w < width:
        cell = width / cols
        start = _place(quanta.sum(axis=0), win_w / cell) * cell
        left = min(max(0, round_half_up(start)), width - win_w)
        return left, 0, left + win_w, win_h
    if win_h < height:
        cell = height / rows
        start = _place(quanta.sum(axis=1), win_h / cell) * cell
        top = min(max(0, round_half_up(start)), height - win_h)
        return 0, top, win_w, top + win_h
    return 0, 0, width, height


def _place(profile: npt.NDArray[np.float64], length: float) -> float:
    """Start (in cells) of a `length`-cell window over a 1-D saliency profile.

    Three preferences, in order: keep nearly the most salient mass; among those positions, cut
    through as little salience as possible (a window edge lying on the subject both cuts it and
    pushes it against the edge); among those, centre the window on the mass it keeps.
    """
    cells = int(profile.shape[0])
    slack = cells - length
    if slack <= 0:
        return 0.0
    weights = profile.astype(np.float64)
    starts = np.append(np.arange(0.0, slack, PLACEMENT_STEP_CELLS), slack)
    mass, moment = _window_sums(weights, starts, length)
    best = float(mass.max())
    if best <= 0.0:
        return slack / 2
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

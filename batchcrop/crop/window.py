"""Window geometry: which part of the source each ratio keeps, and the output size.

Every window is the largest of its ratio that fits the source (it spans the full width or the full
height), so only its position along one axis is chosen. The position keeps the most salient mass
and, among the positions that keep nearly as much, puts the window's centre closest to the centre
of the mass it keeps: a small subject ends up centred, not pushed against the window's edge, and
a subject at the image border stays inside (the window is clamped to the image, never cut).
Pure functions.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from batchcrop.crop.spec import Ratio

PLACEMENT_TOLERANCE = 0.02
"""Positions keeping at least (1 - this) of the best salient mass count as equally good."""

PLACEMENT_STEP_CELLS = 0.25
"""Candidate window positions are this many saliency-map cells apart."""

_FLOOR_SLACK = 1e-6  # absorbs float error in "at least this many pixels" comparisons

Box = tuple[int, int, int, int]


def round_half_up(value: float) -> int:
    """Round to the nearest integer, halves up (Python's round() goes to even)."""
    return math.floor(value + 0.5)


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
    if win_w < width:
        cell = width / cols
        start = _place(saliency.sum(axis=0), win_w / cell) * cell
        left = min(max(0, round_half_up(start)), width - win_w)
        return left, 0, left + win_w, win_h
    if win_h < height:
        cell = height / rows
        start = _place(saliency.sum(axis=1), win_h / cell) * cell
        top = min(max(0, round_half_up(start)), height - win_h)
        return 0, top, win_w, top + win_h
    return 0, 0, width, height


def _place(profile: npt.NDArray[np.float32], length: float) -> float:
    """Start (in cells) of a `length`-cell window over a 1-D saliency profile."""
    cells = int(profile.shape[0])
    slack = cells - length
    if slack <= 0:
        return 0.0
    starts = np.append(np.arange(0.0, slack, PLACEMENT_STEP_CELLS), slack)
    edges = np.arange(cells + 1, dtype=np.float64)
    weights = profile.astype(np.float64)
    mass_before = np.concatenate(([0.0], np.cumsum(weights)))
    moment_before = np.concatenate(([0.0], np.cumsum(weights * (edges[:-1] + 0.5))))
    # Linear interpolation of the cumulative sums: exact mass for a piecewise-constant profile.
    mass = np.interp(starts + length, edges, mass_before) - np.interp(starts, edges, mass_before)
    moment = np.interp(starts + length, edges, moment_before) - np.interp(
        starts, edges, moment_before
    )
    best = float(mass.max())
    if best <= 0.0:
        return slack / 2
    centroid = moment / np.maximum(mass, np.finfo(np.float64).tiny)
    off_centre = np.abs(centroid - (starts + length / 2))
    off_centre[mass < best * (1.0 - PLACEMENT_TOLERANCE)] = np.inf
    chosen: float = starts[int(np.argmin(off_centre))].item()
    return chosen

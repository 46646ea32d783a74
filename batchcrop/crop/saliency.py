"""A saliency map on a small copy: where the subject probably is.

Four cues, each in fixed units so a plain picture's faint noise is never amplified:
centre-surround colour contrast at three scales (a region unlike its neighbourhood; smooth
gradients such as skies cancel out), luminance edges (texture and outlines), and colourfulness
and skin-like colour where they exceed their neighbourhood's (so sky, grass or sand spread over
the frame are background, not subject). The sum is lightly smoothed, each row's and column's
lower-quartile level is removed (horizons and poles crossing the frame are structure, not subject),
and a robust background level (median + 3 sigma, sigma from the median absolute deviation) is
subtracted, so a plain or uniformly textured background and its noise weigh nothing and the
subject's mass decides where windows go.
Pure numpy on ~30 k pixels: a few ms.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageFilter

SALIENCY_SIDE_PX = 192
"""Longest side of the small copy the map is computed on."""

SURROUND_FRACTIONS = (0.0625, 0.125, 0.25)
"""Surround box radii as fractions of the small copy's shorter side: several scales, so both
small details and the interior of large subjects stand out from their surroundings."""

LINE_PERCENTILE = 25.0
"""Per row and column, saliency up to this percentile is a line across the frame, not subject."""

BACKGROUND_SPREADS = 3.0
"""Saliency up to median + this many (robust) standard deviations counts as background."""
MAD_TO_SIGMA = 1.4826

CONTRAST_WEIGHT = 1.0
EDGE_WEIGHT = 1.0
CHROMA_WEIGHT = 0.5
SKIN_WEIGHT = 0.5

# Skin-like chroma box in YCbCr (Chai & Ngan); luma floor keeps dark browns out.
_SKIN_CB = (77.0, 127.0)
_SKIN_CR = (133.0, 173.0)
_SKIN_MIN_LUMA = 40.0

FloatArray = npt.NDArray[np.float32]


def small_copy(image: Image.Image) -> Image.Image:
    """Downscale `image` so its longest side is at most SALIENCY_SIDE_PX (never upscale)."""
    width, height = image.size
    longest = max(width, height)
    if longest <= SALIENCY_SIDE_PX:
        return image
    size = (
        max(1, round(width * SALIENCY_SIDE_PX / longest)),
        max(1, round(height * SALIENCY_SIDE_PX / longest)),
    )
    # reducing_gap: an integer box reduce first, then a short bilinear step; fast and alias-free.
    return image.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)


def skin_mask(
    luma: npt.NDArray[Any], cb: npt.NDArray[Any], cr: npt.NDArray[Any]
) -> npt.NDArray[np.bool_]:
    """Pixels whose YCbCr chroma lies in the skin-like box (Chai & Ngan), above a luma floor."""
    return (
        (cb >= _SKIN_CB[0])
        & (cb <= _SKIN_CB[1])
        & (cr >= _SKIN_CR[0])
        & (cr <= _SKIN_CR[1])
        & (luma >= _SKIN_MIN_LUMA)
    )


def saliency_map(image: Image.Image) -> FloatArray:
    """Saliency of an RGB image as a (rows, cols) float32 array ≥ 0, same size as `image`."""
    # Y, Cb, Cr carried in an "RGB"-labelled image: Pillow's box blur refuses mode YCbCr.
    ycc_image = Image.merge("RGB", image.convert("YCbCr").split())
    ycc = np.asarray(ycc_image, dtype=np.float32)
    luma, cb, cr = ycc[..., 0], ycc[..., 1], ycc[..., 2]
    # Pillow's box blur (C, edge pixels repeated beyond the border, so borders do not look
    # unlike their surround) does the large averages in well under a millisecond.
    centre_image = ycc_image.filter(ImageFilter.BoxBlur(1))
    centre = np.asarray(centre_image, dtype=np.float32)
    contrast = np.zeros_like(luma)
    for fraction in SURROUND_FRACTIONS:
        radius = max(1, round(min(image.size) * fraction))
        surround = np.asarray(centre_image.filter(ImageFilter.BoxBlur(radius)), dtype=np.float32)
        contrast += np.sqrt(np.sum((centre - surround) ** 2, axis=2)) / 255.0
    contrast /= len(SURROUND_FRACTIONS)
    grad_rows, grad_cols = _gradients(centre[..., 0])
    # sqrt of a sum of squares, not np.hypot: IEEE-exact operations give the same bits on every
    # machine, while hypot comes from the platform's libm (keys assume identical crops).
    edges = np.sqrt(grad_rows * grad_rows + grad_cols * grad_cols) / 255.0
    blue, red = cb - 128.0, cr - 128.0
    chroma = np.sqrt(blue * blue + red * red) / 128.0
    skin = skin_mask(luma, cb, cr).astype(np.float32)
    # Colourfulness and skin count only where they stand out from the neighbourhood: a blue
    # sky, green grass or skin-coloured sand covering a large area is background.
    wide = max(1, round(min(image.size) * SURROUND_FRACTIONS[-1]))
    chroma = np.maximum(chroma - box_mean(chroma, wide), 0.0)
    skin = np.maximum(skin - box_mean(skin, wide), 0.0)
    total = (
        CONTRAST_WEIGHT * contrast
        + EDGE_WEIGHT * edges
        + CHROMA_WEIGHT * chroma
        + SKIN_WEIGHT * skin
    )
    smooth = _without_lines(box_mean(total, 1))
    median = float(np.median(smooth))
    spread = float(np.median(np.abs(smooth - median)))
    floor = median + BACKGROUND_SPREADS * MAD_TO_SIGMA * spread
    result: FloatArray = np.maximum(smooth - floor, 0.0).astype(np.float32)
    return result


def _without_lines(saliency: FloatArray) -> FloatArray:
    """Remove what a whole row or column shares: horizons, shelf edges, poles crossing the frame.

    Subtracts each row's, then each column's, LINE_PERCENTILE level: a line across the frame
    (even partly hidden) is that level in its row and vanishes, while a subject filling less than
    three quarters of its rows and columns passes through.
    """
    rows_removed = np.maximum(
        saliency - np.percentile(saliency, LINE_PERCENTILE, axis=1, keepdims=True), 0.0
    )
    result: FloatArray = np.maximum(
        rows_removed - np.percentile(rows_removed, LINE_PERCENTILE, axis=0, keepdims=True), 0.0
    ).astype(np.float32)
    return result


def box_mean(values: FloatArray, radius: int) -> FloatArray:
    """Mean over a (2r+1)² box around each pixel, over the part of the box inside the array.

    Works on (rows, cols) or (rows, cols, channels).
    """
    out = values
    for axis in (0, 1):
        out = _box_mean_1d(out, radius, axis)
    return out


def _box_mean_1d(values: FloatArray, radius: int, axis: int) -> FloatArray:
    length = values.shape[axis]
    moved = np.moveaxis(values, axis, 0)
    cumulative = np.concatenate(
        [np.zeros((1, *moved.shape[1:]), dtype=np.float64), np.cumsum(moved, axis=0)]
    )
    index = np.arange(length)
    low = np.clip(index - radius, 0, length)
    high = np.clip(index + radius + 1, 0, length)
    counts = (high - low).astype(np.float64).reshape((length,) + (1,) * (moved.ndim - 1))
    means = (cumulative[high] - cumulative[low]) / counts
    result: FloatArray = np.moveaxis(means, 0, axis).astype(np.float32)
    return result


def _gradients(luma: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Central differences (one-sided at the borders), in luma units per pixel."""
    if min(luma.shape) < 2:
        zero = np.zeros_like(luma)
        return zero, zero
    grad_rows, grad_cols = np.gradient(luma)
    return np.asarray(grad_rows, dtype=np.float32), np.asarray(grad_cols, dtype=np.float32)

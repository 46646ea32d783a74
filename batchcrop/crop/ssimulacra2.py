"""SSIMULACRA2, the perceptual score WebP and AVIF outputs are matched to their JPEG's with.

The metric is libjxl's SSIMULACRA2 as the `ssimulacra2` package computes it (the `bench` extra,
which docs/benchmarks.md measures with): sRGB to linear to XYB, six scales halved in linear RGB,
at each an SSIM map and the ringing and blurring edge maps per XYB channel, mean and 4-norm,
weighted and mapped onto 0-100 (100: identical; a picture under 8 px on a side at some scale
stops there, and the weights are then read as the original reads them). The blur is the
package's: a Gaussian of sigma 1.5 over 11 taps, zeros beyond the left and right edges and a
mirror beyond the top and bottom. It differs in arithmetic only: float32 instead of float64, an
OpenCV separable filter instead of SciPy's, and the reference's planes computed once for every
picture scored against it (`Reference`); on the real photographs it agrees with the package to
within 0.01 points (tests/crop/test_ssimulacra2.py).

Pure: the same pixels and libraries give the same score, in any thread (OpenCV's filters split
rows between threads, and each output value is computed the same way whatever the split).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from numpy.typing import NDArray

Planes = NDArray[np.float32]
"""An (height, width, 3) float32 picture: linear RGB or XYB."""

BLUR_SIGMA = 1.5
BLUR_RADIUS_PX = 5
"""The package's Gaussian: SciPy's truncation at 3.33 sigma, int(3.33 * 1.5 + 0.5) taps a side."""
SCALES = 6
MIN_SIDE_PX = 8
SSIM_C2 = 0.0009

_OPSIN = np.array(
    [
        [0.30, 1.0 - 0.078 - 0.30, 0.078],
        [0.23, 1.0 - 0.078 - 0.23, 0.078],
        [0.24342268924547819, 0.20476744424496821, 1.0 - 0.24342268924547819 - 0.20476744424496821],
    ],
    dtype=np.float32,
)
_OPSIN_BIAS = 0.0037930732552754493
_CBRT_BIAS = float(np.cbrt(_OPSIN_BIAS))

_WEIGHTS = (
    0.0, 0.0007376606707406586, 0.0, 0.0, 0.0007793481682867309, 0.0, 0.0,
    0.0004371155730107379, 0.0, 1.1041726426657346, 0.00066284834129271,
    0.00015231632783718752, 0.0, 0.0016406437456599754, 0.0, 1.8422455520539298,
    11.441172603757666, 0.0, 0.0007989109436015163, 0.000176816438078653, 0.0,
    1.8787594979546387, 10.94906990605142, 0.0, 0.0007289346991508072, 0.9677937080626833,
    0.0, 0.00014003424285435884, 0.9981766977854967, 0.00031949755934435053,
    0.0004550992113792063, 0.0, 0.0, 0.0013648766163243398, 0.0, 0.0, 0.0, 0.0, 0.0,
    7.466890328078848, 0.0, 17.445833984131262, 0.0006235601634041466, 0.0, 0.0,
    6.683678146179332, 0.00037724407979611296, 1.027889937768264, 225.20515300849274, 0.0,
    0.0, 19.213238186143016, 0.0011401524586618361, 0.001237755635509985,
    176.39317598450694, 0.0, 0.0, 24.43300999870476, 0.28520802612117757,
    0.0004485436923833408, 0.0, 0.0, 0.0, 34.77906344483772, 44.835625328877896, 0.0, 0.0,
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0008680556573291698, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0005313191874358747, 0.0, 0.00016533814161379112, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0004179171803251336, 0.0017290828234722833, 0.0, 0.0020827005846636437, 0.0, 0.0,
    8.826982764996862, 23.19243343998926, 0.0, 95.1080498811086, 0.9863978034400682,
    0.9834382792465353, 0.0012286405048278493, 171.2667255897307, 0.9807858872435379, 0.0,
    0.0, 0.0, 0.0005130064588990679, 0.0, 0.00010854057858411537,
)  # fmt: skip
"""libjxl's 108 weights: per XYB channel, per scale, per norm (mean, 4-norm): the SSIM term,
then ringing, then blurring."""


def _linear_table() -> NDArray[np.float32]:
    values = np.arange(256, dtype=np.float64) / 255.0
    linear = np.where(values <= 0.04045, values / 12.92, ((values + 0.055) / 1.055) ** 2.4)
    return linear.astype(np.float32)


_LINEAR = _linear_table()
"""sRGB level (0-255) to linear light, computed once in float64."""

_x = np.arange(-BLUR_RADIUS_PX, BLUR_RADIUS_PX + 1, dtype=np.float64)
_KERNEL = np.exp(-0.5 * _x * _x / (BLUR_SIGMA * BLUR_SIGMA))
_KERNEL = (_KERNEL / _KERNEL.sum()).astype(np.float32).reshape(-1, 1)
_ONE = np.ones((1, 1), dtype=np.float32)
del _x


def linear_rgb(pixels: NDArray[np.uint8]) -> Planes:
    """An (height, width, 3) or (height, width) sRGB picture in linear light, (h, w, 3)."""
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[:, :, None], 3, axis=2)
    return _LINEAR[pixels]


def _xyb(linear: Planes) -> Planes:
    """Linear RGB to the metric's positive XYB (libjxl's opsin absorbance, cube root, offsets)."""
    mixed = linear @ _OPSIN.T + np.float32(_OPSIN_BIAS)
    np.maximum(mixed, 0, out=mixed)
    np.cbrt(mixed, out=mixed)
    mixed -= np.float32(_CBRT_BIAS)
    xyb = np.empty_like(mixed)
    xyb[..., 0] = (mixed[..., 0] - mixed[..., 1]) * np.float32(0.5 * 14.0) + np.float32(0.42)
    y = (mixed[..., 0] + mixed[..., 1]) * np.float32(0.5)
    xyb[..., 1] = y + np.float32(0.01)
    xyb[..., 2] = mixed[..., 2] - y + np.float32(0.55)
    return xyb


def _blur(planes: Planes) -> Planes:
    """The package's Gaussian: zeros beyond the left and right edges, a mirror beyond the top and
    bottom (SciPy's `reflect`: the edge pixel repeated, then inwards)."""
    across = cv2.sepFilter2D(planes, cv2.CV_32F, _KERNEL, _ONE, borderType=cv2.BORDER_CONSTANT)
    blurred = cv2.sepFilter2D(across, cv2.CV_32F, _ONE, _KERNEL, borderType=cv2.BORDER_REFLECT)
    return np.asarray(blurred, dtype=np.float32)


def _halved(linear: Planes) -> Planes:
    """2x2 box average; an odd last row or column averages the pixels it has."""
    height, width, _ = linear.shape
    if height % 2 or width % 2:
        linear = np.pad(linear, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    half: Planes = (linear[0::2, 0::2] + linear[1::2, 0::2]) + (
        linear[0::2, 1::2] + linear[1::2, 1::2]
    )
    half *= np.float32(0.25)
    return half


def _norms(values: Planes) -> list[tuple[float, float]]:
    """Per channel: the mean and the 4-norm (mean of the fourth powers, to the 1/4)."""
    squared = values * values
    # OpenCV's mean sums in float64, in a tenth of NumPy's time over a strided channel axis.
    means = cv2.mean(values)[:3]
    fourth = cv2.mean(squared * squared)[:3]
    return [(m, f**0.25) for m, f in zip(means, fourth, strict=True)]


@dataclass(frozen=True)
class _Scale:
    """The reference's planes at one scale: XYB, its blur, the blur of its square less the
    square of its blur (its local variance), and 1 + |XYB - blur| for the edge maps."""

    xyb: Planes
    mu: Planes
    sigma_less_mu: Planes
    edges: Planes


class Reference:
    """A reference picture, ready to score others of its size against (`score`).

    Construction costs about two thirds of one score; each score then blurs only the other
    picture's planes. Immutable once made: one reference may score from several threads.
    """

    def __init__(self, pixels: NDArray[np.uint8]) -> None:
        """`pixels`: the reference, (height, width, 3) RGB or (height, width) grey, sRGB."""
        self.shape = pixels.shape[:2]
        scales = []
        linear = linear_rgb(pixels)
        for _ in range(SCALES):
            if min(linear.shape[:2]) < MIN_SIDE_PX:
                break
            xyb = _xyb(linear)
            mu = _blur(xyb)
            edges = np.abs(xyb - mu) + np.float32(1.0)
            scales.append(_Scale(xyb, mu, _blur(xyb * xyb) - mu * mu, edges))
            linear = _halved(linear)
        self._scales = tuple(scales)

    def score(self, pixels: NDArray[np.uint8]) -> float:
        """SSIMULACRA2 of `pixels` (same size and layout rules as the reference) against it."""
        if pixels.shape[:2] != self.shape:
            raise ValueError(f"picture of {pixels.shape[:2]} scored against {self.shape}")
        linear = linear_rgb(pixels)
        terms: list[tuple[list[tuple[float, float]], ...]] = []
        for index, scale in enumerate(self._scales):
            if index:
                linear = _halved(linear)
            xyb = _xyb(linear)
            terms.append(_scale_terms(scale, xyb))
        return _combined(terms)


def _scale_terms(reference: _Scale, xyb: Planes) -> tuple[list[tuple[float, float]], ...]:
    """At one scale, per channel: the SSIM, ringing and blurring (mean, 4-norm) pairs.

    In place where it can: about seven planes of the picture's size are alive at its peak."""
    one, c2 = np.float32(1.0), np.float32(SSIM_C2)
    mu = _blur(xyb)
    # The edge maps first, so that `xyb` is needed no further than the cross term.
    ratio = np.abs(xyb - mu)
    ratio += one
    ratio /= reference.edges
    ratio -= one
    ringing = np.maximum(ratio, 0, dtype=np.float32)
    np.negative(ratio, out=ratio)
    np.maximum(ratio, 0, out=ratio)
    edge_terms = (_norms(ringing), _norms(ratio))
    del ringing, ratio
    denominator = _blur(xyb * xyb)  # sigma22 + mu22, less mu22 below
    numerator = _blur(reference.xyb * xyb)  # sigma12, less mu12 below
    product = reference.mu * mu
    numerator -= product
    numerator *= np.float32(2.0)
    numerator += c2
    np.subtract(reference.mu, mu, out=product)
    np.square(product, out=product)
    np.subtract(one, product, out=product)
    numerator *= product
    denominator += reference.sigma_less_mu
    np.square(mu, out=mu)
    denominator -= mu
    denominator += c2
    numerator /= denominator
    np.subtract(one, numerator, out=numerator)
    np.maximum(numerator, 0, out=numerator)
    return _norms(numerator), *edge_terms


def _combined(terms: list[tuple[list[tuple[float, float]], ...]]) -> float:
    """The weighted sum of every term, mapped onto 0-100 as libjxl does."""
    total = 0.0
    weights = iter(_WEIGHTS)
    for channel in range(3):
        for ssim, ringing, blurring in terms:
            for norm in range(2):
                total += next(weights) * abs(ssim[channel][norm])
                total += next(weights) * abs(ringing[channel][norm])
                total += next(weights) * abs(blurring[channel][norm])
    total *= 0.9562382616834844
    total = (
        2.326765642916932 * total
        - 0.020884521182843837 * total**2
        + 6.248496625763138e-05 * total**3
    )
    if total <= 0:
        return 100.0
    return float(100.0 - 10.0 * total**0.6276336467831387)


def score(reference: NDArray[np.uint8], distorted: NDArray[np.uint8]) -> float:
    """SSIMULACRA2 of `distorted` against `reference` (one-off; see `Reference` for many)."""
    return Reference(reference).score(distorted)

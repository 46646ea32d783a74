"""Resample outputs from a decoded picture, sharing work between outputs of one scale.

Outputs whose long side has the same scale (output pixels per source pixel) are cut from one
Lanczos resample of the *whole* picture at that scale: with the usual four ratios on a landscape
photo, 1:1 and 3:4 share the full-height scale and 4:3 and 16:9 the full-width one, so two
resamples do the work of four. That canvas depends only on the source, its decode and the scale,
never on which other outputs share it, so an output is the same pixels whatever else was asked
for (docs/design.md §6, determinism). Each output is an integer crop of its canvas; its window
moves by less than one output pixel to land on the canvas grid, and the returned crop box says
where it landed.

A canvas of an RGB picture is resampled by libvips' Lanczos-3 reduce, three to four times faster
than Pillow's on the same picture (vectorised; ADR 0024); everything else (a cut resampled alone,
a picture with transparency) by Pillow's Lanczos. Pure functions; both libraries release the GIL.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from fractions import Fraction
from types import ModuleType
from typing import Any

import cv2
import numpy as np
from PIL import Image

from batchcrop.crop.geometry import Box, round_half_up

RESIZE_REDUCING_GAP = 3.0
"""Pillow reduces by an integer box first while the remaining factor stays ≥ this; at 3.0 the
result is indistinguishable from a full Lanczos pass and much faster on large factors."""


@dataclass(frozen=True)
class Cut:
    """One output to make: its window `box` in source pixels and its `size` in output pixels."""

    box: Box
    size: tuple[int, int]

    @property
    def scale(self) -> Fraction:
        """Output pixels per source pixel along the long side (exact, for grouping)."""
        left, top, right, bottom = self.box
        if self.size[0] >= self.size[1]:
            return Fraction(self.size[0], right - left)
        return Fraction(self.size[1], bottom - top)


def resample_all(
    picture: Image.Image, cuts: list[Cut], source_size: tuple[int, int]
) -> list[tuple[Image.Image, Box]]:
    """Each cut's resized image and the crop box (source pixels) it really shows, in order.

    `picture` is the decoded source, possibly DCT-reduced from `source_size`.
    """
    decoded = (picture.width / source_size[0], picture.height / source_size[1])
    canvases: dict[Fraction, Image.Image] = {}
    packed = _Packed(picture)
    results = []
    for cut in cuts:
        landing = _on_canvas(cut, source_size)
        if landing is None:
            results.append((resize(picture, cut.box, cut.size, decoded), cut.box))
            continue
        scale, offset, box = landing
        if scale not in canvases:
            canvas_size = _canvas_size(scale, source_size)
            covered = (0.0, 0.0, float(canvas_size[0] / scale), float(canvas_size[1] / scale))
            canvases[scale] = resize_canvas(picture, covered, canvas_size, decoded, packed)
        crop = (offset[0], offset[1], offset[0] + cut.size[0], offset[1] + cut.size[1])
        canvas = canvases[scale]
        results.append((canvas if crop == (0, 0, *canvas.size) else canvas.crop(crop), box))
    return results


def shown_box(cut: Cut, source_size: tuple[int, int]) -> Box:
    """The crop box (source pixels) `resample_all` reports for `cut`: where its window lands on
    its scale's canvas, or the window itself when it is resampled alone. Reads no pixel."""
    landing = _on_canvas(cut, source_size)
    return cut.box if landing is None else landing[2]


def _canvas_size(scale: Fraction, source_size: tuple[int, int]) -> tuple[int, int]:
    # Whole canvas pixels at exactly `scale`: the canvas covers the source up to a fraction of
    # a pixel short of its right and bottom edges.
    return (
        max(1, math.floor(source_size[0] * scale)),
        max(1, math.floor(source_size[1] * scale)),
    )


def _on_canvas(
    cut: Cut, source_size: tuple[int, int]
) -> tuple[Fraction, tuple[int, int], Box] | None:
    """(scale, pixel offset on the canvas, source box shown) of a cut taken from its scale's
    canvas; None when it is resampled alone."""
    scale = cut.scale
    canvas_size = _canvas_size(scale, source_size)
    offset, box = _on_grid(cut, scale, source_size)
    whole_pixels = source_size[0] * scale >= 1 and source_size[1] * scale >= 1
    if (
        not whole_pixels
        or offset[0] + cut.size[0] > canvas_size[0]
        or offset[1] + cut.size[1] > canvas_size[1]
    ):
        # The window reaches the part of the last source pixel the canvas leaves out (it
        # touches the right or bottom edge), its output was rounded up past the canvas, or
        # the canvas would be under one pixel on a side (a very thin source): it is resampled
        # alone, which depends on nothing else either.
        return None
    return scale, offset, box


def _on_grid(cut: Cut, scale: Fraction, source: tuple[int, int]) -> tuple[tuple[int, int], Box]:
    """The cut's pixel offset on its scale's canvas and the source box it then shows."""
    offset_x = round_half_up(cut.box[0] * scale)
    offset_y = round_half_up(cut.box[1] * scale)
    width, height = cut.box[2] - cut.box[0], cut.box[3] - cut.box[1]
    left = min(max(0, round_half_up(offset_x / scale)), source[0] - width)
    top = min(max(0, round_half_up(offset_y / scale)), source[1] - height)
    return (offset_x, offset_y), (left, top, left + width, top + height)


class _Packed:
    """A picture's pixels as libvips reads them (three bytes per pixel), packed on first use
    and shared by the canvases cut from that picture: packing costs about as much as one
    reduce."""

    def __init__(self, picture: Image.Image) -> None:
        self._picture = picture
        self._image: Any = None

    def image(self) -> Any:
        """The picture as a pyvips image over the packed pixels."""
        if self._image is None:
            picture = self._picture
            self._image = _pyvips().Image.new_from_memory(
                packed_rgb(picture), picture.width, picture.height, 3, "uchar"
            )
        return self._image


PACK_STRIP_ROWS = 256


def packed_rgb(picture: Image.Image) -> bytearray:
    """`picture.tobytes()` (RGB, three bytes per pixel) without its second copy: Pillow joins
    the encoded chunks into the result, so a whole picture packed at once holds its packed size
    twice (on a 79 MP source about 230 MiB beyond the decode estimate, `decode.decode_cost`).
    Packed `PACK_STRIP_ROWS` rows at a time into one buffer instead."""
    if picture.mode != "RGB":
        raise ValueError(f"packed_rgb packs RGB pictures, not {picture.mode}")
    width, height = picture.size
    row = width * 3
    packed = bytearray(row * height)
    for top in range(0, height, PACK_STRIP_ROWS):
        bottom = min(height, top + PACK_STRIP_ROWS)
        packed[top * row : bottom * row] = picture.crop((0, top, width, bottom)).tobytes()
    return packed


def resize_canvas(
    picture: Image.Image,
    box: tuple[float, float, float, float],
    size: tuple[int, int],
    decoded: tuple[float, float],
    packed: _Packed | None = None,
) -> Image.Image:
    """`resize` of a `box` that starts at the picture's top-left corner (a canvas): by libvips'
    Lanczos-3 reduce for an RGB picture, with the same sampling positions as Pillow's (output
    pixel x's centre at (x + 1/2) * shrink) and its kernel likewise reading the picture beyond
    the box's far edges; `packed` is the picture's `_Packed`, when other canvases share it."""
    if picture.mode != "RGB" or box[0] != 0 or box[1] != 0:
        return resize(picture, box, size, decoded)
    width, height = box[2] * decoded[0], box[3] * decoded[1]
    source = (packed or _Packed(picture)).image()
    reduced = source.reduce(width / size[0], height / size[1], kernel="lanczos3")
    if (reduced.width, reduced.height) != size:  # its size rounds up to at least `size`
        reduced = reduced.crop(0, 0, *size)
    pixels = np.frombuffer(reduced.write_to_memory(), dtype=np.uint8).reshape(size[1], size[0], 3)
    factor = round(1 / decoded[0])
    return Image.fromarray(_sharpened(pixels, factor, width / size[0]), mode="RGB")


_VIPS_LOCK = threading.Lock()
_VIPS: list[ModuleType] = []


def _pyvips() -> ModuleType:
    """pyvips, imported on first use (it loads libvips: ~0.1 s, not for commands that never
    render) and set up once: no operation cache (it would keep source pictures alive) and one
    thread per call (a render is already one of the worker's slots)."""
    with _VIPS_LOCK:
        if not _VIPS:
            import pyvips  # noqa: PLC0415 - loads libvips; only when a render resamples

            pyvips.cache_set_max(0)
            pyvips.concurrency_set(1)
            _VIPS.append(pyvips)
        return _VIPS[0]


def pyvips_module() -> ModuleType:
    """pyvips, set up as the engine uses it (no operation cache, one thread per call)."""
    return _pyvips()


def vips_version() -> str:
    """libvips' version, e.g. "8.18.7": part of every derivative's variant."""
    vips = _pyvips()
    return ".".join(str(vips.version(part)) for part in range(3))


def resize(
    picture: Image.Image,
    box: tuple[float, float, float, float],
    size: tuple[int, int],
    decoded: tuple[float, float],
) -> Image.Image:
    """Lanczos-resample the source-pixel `box` of `picture` to `size`; `decoded` is the
    picture's size as a fraction (x, y) of the source's (DCT reduction)."""
    scaled = (box[0] * decoded[0], box[1] * decoded[1], box[2] * decoded[0], box[3] * decoded[1])
    resized = picture.resize(
        size, Image.Resampling.LANCZOS, box=scaled, reducing_gap=RESIZE_REDUCING_GAP
    )
    factor = round(1 / decoded[0])
    remaining = (scaled[2] - scaled[0]) / size[0]
    return restore_detail(resized, factor, remaining)


DETAIL_SAMPLES = 64
DETAIL_STEP = Fraction(1, 1024)


def detail_weight(factor: int, remaining: float) -> Fraction:
    """The weight `a` of the 3-tap kernel [-a, 1 + 2a, -a] that best undoes, up to the output's
    Nyquist frequency, the softening of a `factor`-times DCT reduction (the response of a box of
    `factor` source pixels) when `remaining` decoded pixels make one output pixel.

    Least squares over the output band [0, 0.45] cycles per pixel, rounded to 1/1024 so that the
    kernel is the same on every machine.
    """
    if factor <= 1:
        return Fraction(0)
    numerator = denominator = 0.0
    for step in range(1, DETAIL_SAMPLES + 1):
        frequency = 0.45 * step / DETAIL_SAMPLES  # cycles per output pixel
        decoded = frequency / max(1.0, remaining)  # cycles per decoded pixel
        response = math.sin(math.pi * decoded) / (factor * math.sin(math.pi * decoded / factor))
        gain = 4 * math.sin(math.pi * frequency) ** 2
        numerator += gain * (1 / response - 1)
        denominator += gain * gain
    return Fraction(round(numerator / denominator / DETAIL_STEP)) * DETAIL_STEP


def restore_detail(image: Image.Image, factor: int, remaining: float) -> Image.Image:
    """Sharpen `image` by the separable kernel of `detail_weight` (nothing for a full decode)."""
    if detail_weight(factor, remaining) == 0 or image.width < 3 or image.height < 3:
        return image
    return Image.fromarray(_sharpened(np.asarray(image), factor, remaining), mode=image.mode)


def _sharpened(pixels: np.ndarray, factor: int, remaining: float) -> np.ndarray:
    """`restore_detail` on an array of pixels (height, width[, bands]), the same array when
    there is nothing to do.

    OpenCV's separable filter (one thread, edges replicated) costs about a tenth of Pillow's
    3x3 kernel; the weights are multiples of 1/1024, exact in float32.
    """
    a = detail_weight(factor, remaining)
    if a == 0 or pixels.shape[0] < 3 or pixels.shape[1] < 3:
        return pixels
    side = np.array([-a, 1 + 2 * a, -a], dtype=np.float32)
    sharpened: np.ndarray = cv2.sepFilter2D(pixels, -1, side, side, borderType=cv2.BORDER_REPLICATE)
    return sharpened

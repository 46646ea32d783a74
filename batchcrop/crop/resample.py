"""Resample every output from the decoded picture, sharing work between outputs of one scale.

Outputs whose long side has the same scale (output pixels per source pixel) are cut from a single
Lanczos resample of the union of their windows: with the usual four ratios on a landscape photo,
1:1 and 3:4 share the full-height scale and 4:3 and 16:9 the full-width one, so two resamples
do the work of four. Each member is then an integer crop of the shared result; its window moves
by less than one output pixel to land on that grid, and the returned crop box says where it
landed. Pure functions; the Pillow calls release the GIL.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from PIL import Image

from batchcrop.crop.window import Box, round_half_up

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

    `picture` is the decoded source, possibly DCT-scaled from `source_size`.
    """
    decoded = (picture.width / source_size[0], picture.height / source_size[1])
    groups: dict[Fraction, list[int]] = {}
    for index, cut in enumerate(cuts):
        groups.setdefault(cut.scale, []).append(index)
    results: dict[int, tuple[Image.Image, Box]] = {}
    for scale, members in groups.items():
        group = [cuts[index] for index in members]
        shared = _shared_resample(picture, group, scale, decoded, source_size)
        for index, result in zip(members, shared, strict=True):
            results[index] = result
    return [results[index] for index in range(len(cuts))]


def _shared_resample(
    picture: Image.Image,
    cuts: list[Cut],
    scale: Fraction,
    decoded: tuple[float, float],
    source_size: tuple[int, int],
) -> list[tuple[Image.Image, Box]]:
    """Resample the union of `cuts` once at `scale`, then crop each member from it."""
    if len(cuts) == 1:
        return [(_resize(picture, cuts[0].box, cuts[0].size, decoded), cuts[0].box)]
    union = (
        min(cut.box[0] for cut in cuts),
        min(cut.box[1] for cut in cuts),
        max(cut.box[2] for cut in cuts),
        max(cut.box[3] for cut in cuts),
    )
    union_size = (
        max(1, round_half_up((union[2] - union[0]) * scale)),
        max(1, round_half_up((union[3] - union[1]) * scale)),
    )
    shared = _resize(picture, union, union_size, decoded)
    results = []
    for cut in cuts:
        placed = _place_on_grid(cut, union, union_size, scale, source_size)
        if placed is None:
            # Rounding left no room on the shared grid (only for outputs of a few pixels).
            results.append((_resize(picture, cut.box, cut.size, decoded), cut.box))
            continue
        offset, box = placed
        if offset == (0, 0) and cut.size == union_size:
            results.append((shared, box))
            continue
        crop = (offset[0], offset[1], offset[0] + cut.size[0], offset[1] + cut.size[1])
        results.append((shared.crop(crop), box))
    return results


def _place_on_grid(
    cut: Cut, union: Box, union_size: tuple[int, int], scale: Fraction, source: tuple[int, int]
) -> tuple[tuple[int, int], Box] | None:
    """The cut's pixel offset in the shared resample and the source box it then shows."""
    offset_x = min(round_half_up((cut.box[0] - union[0]) * scale), union_size[0] - cut.size[0])
    offset_y = min(round_half_up((cut.box[1] - union[1]) * scale), union_size[1] - cut.size[1])
    if offset_x < 0 or offset_y < 0:
        return None
    width, height = cut.box[2] - cut.box[0], cut.box[3] - cut.box[1]
    left = min(max(0, round_half_up(union[0] + offset_x / scale)), source[0] - width)
    top = min(max(0, round_half_up(union[1] + offset_y / scale)), source[1] - height)
    return (offset_x, offset_y), (left, top, left + width, top + height)


def _resize(
    picture: Image.Image, box: Box, size: tuple[int, int], decoded: tuple[float, float]
) -> Image.Image:
    """Lanczos-resample the source-pixel `box` of the decoded `picture` to `size`."""
    scaled = (box[0] * decoded[0], box[1] * decoded[1], box[2] * decoded[0], box[3] * decoded[1])
    return picture.resize(
        size, Image.Resampling.LANCZOS, box=scaled, reducing_gap=RESIZE_REDUCING_GAP
    )

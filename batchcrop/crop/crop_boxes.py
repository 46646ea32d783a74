"""Where each ratio's window would go, without rendering: the crop boxes `render` would report.

The operator page previews a focus box before re-cropping an item with it (docs/design.md §6,
re-crop). The preview runs the render's own steps up to placement — the same saliency decode,
saliency map, faces and `placed_windows` — and computes each crop box as the resampling would
report it (`resample.shown_box` on the decode size each ratio would use), so a preview equals the
`crop_box` of the derivatives a render with that focus box makes. It decodes once, at the
saliency reduction, and resamples and encodes nothing. Pure and thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchcrop.crop.budget import MemoryBudget, reserved
from batchcrop.crop.decode import decode_cost, decode_rgb, decoded_size, open_image
from batchcrop.crop.faces import DETECTION_BYTES
from batchcrop.crop.geometry import Box
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.people import PEOPLE_DETECTION_BYTES
from batchcrop.crop.planning import clipped_focus, cut_for, placed_windows, plan
from batchcrop.crop.resample import shown_box
from batchcrop.crop.spec import Ratio, RenderSpec


@dataclass(frozen=True)
class Preview:
    """The upright source `size`, the focus box as the render uses it (clipped to the picture,
    or None) and, per ratio in the spec's order, the crop box its derivatives would show."""

    size: tuple[int, int]
    focus: Box | None
    crop_boxes: tuple[tuple[Ratio, Box], ...]


def preview_windows(
    data: bytes,
    spec: RenderSpec,
    *,
    focus: Box | None = None,
    budget: MemoryBudget | None = None,
    timeout: float | None = None,
    max_pixels: int = MAX_SOURCE_PIXELS,
) -> Preview:
    """The crop boxes `render(data, spec, focus=focus)` would give each ratio.

    Raises what `render` raises before placing (`InvalidImage`, `ImageTooLarge`,
    `UnsupportedImage`, `InvalidFocus` for a box wholly outside the picture). With a budget,
    the saliency decode and the face search are reserved from it, waiting at most `timeout`
    seconds (`BudgetBusy`).
    """
    opened = open_image(data, max_pixels)
    size = opened.size
    if focus is not None:
        focus = clipped_focus(focus, size)
    decodes = plan(opened, spec)
    # Read before decoding: a JPEG's draft changes the opened image's size.
    decoded = [decoded_size(opened, factor) for factor in decodes.factors]
    boxes: list[Box] = [(0, 0, *size)] * len(decodes.windows)
    if any(window != size for window in decodes.windows):
        cost = (
            decode_cost(opened, decodes.saliency_factor) + DETECTION_BYTES + PEOPLE_DETECTION_BYTES
        )
        with reserved(budget, cost, timeout=timeout):
            picture = decode_rgb(opened, decodes.saliency_factor)
            boxes = placed_windows(picture, size, decodes.windows, focus)
            del picture
    crop_boxes = tuple(
        (ratio, shown_box(cut_for(box, ratio, spec.max_side, sizes, size), size))
        for ratio, box, sizes in zip(spec.ratios, boxes, decoded, strict=True)
    )
    return Preview(size=size, focus=focus, crop_boxes=crop_boxes)

"""Where each ratio's window would go, without rendering: the crop boxes `render` would report.

The operator page previews a focus box before re-cropping an item with it (docs/design.md §6,
re-crop). The preview runs the render's own steps up to placement — the same saliency decode,
saliency map, faces, people and `framing.frame` — and computes each crop box as the resampling would
report it (`resample.shown_box` on the decode size each ratio would use), so a preview equals the
`crop_box` of the derivatives a render with that focus box makes. It decodes once, at the
saliency reduction, and resamples and encodes nothing. Pure and thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from batchcrop.crop.budget import MemoryBudget, reserved
from batchcrop.crop.decode import (
    DCT_FACTORS,
    OpenedImage,
    decode_cost,
    decode_rgb,
    decoded_size,
    open_image,
)
from batchcrop.crop.faces import DETECTION_BYTES
from batchcrop.crop.framing import frame
from batchcrop.crop.geometry import Box
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.people import PEOPLE_DETECTION_BYTES
from batchcrop.crop.planning import (
    Plan,
    clipped_focus,
    cut_for,
    factors,
    output_sizes,
    padded_cut,
    plan,
)
from batchcrop.crop.resample import shown_box
from batchcrop.crop.spec import Ratio, RenderSpec


@dataclass(frozen=True)
class Window:
    """One ratio's output as the render would make it at its first size: the `fit` used, the
    `crop_box` it shows and its `frame_box`, the output's extent in source pixels (the crop box
    itself when cropped; reaching past the picture by the padding when padded)."""

    ratio: Ratio
    fit: str
    crop_box: Box
    frame_box: Box


@dataclass(frozen=True)
class Preview:
    """The upright source `size`, the focus box as the render uses it (clipped to the picture,
    or None), the trimmed box (None: no trim asked) and, per ratio in the spec's order, its
    `Window`."""

    size: tuple[int, int]
    focus: Box | None
    trim_box: Box | None
    windows: tuple[Window, ...]

    @property
    def crop_boxes(self) -> tuple[tuple[Ratio, Box], ...]:
        """(ratio, crop box) per ratio."""
        return tuple((window.ratio, window.crop_box) for window in self.windows)


def look_cost(opened: OpenedImage, decodes: Plan) -> int:
    """What a preview reserves when framing needs the look: its decode, the face search and
    the person search (0 when no ratio needs it)."""
    if not decodes.look:
        return 0
    return decode_cost(opened, decodes.saliency_factor) + DETECTION_BYTES + PEOPLE_DETECTION_BYTES


def preview_windows(
    data: bytes,
    spec: RenderSpec,
    *,
    focus: Box | None = None,
    budget: MemoryBudget | None = None,
    timeout: float | None = None,
    max_pixels: int = MAX_SOURCE_PIXELS,
) -> Preview:
    """The crop boxes, fits and frames `render(data, spec, focus=focus)` would give each ratio
    (at its first size: every size of a ratio shows the same part of the source, within the
    rounding of its canvas).

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
    sizes = output_sizes(spec)[:: len(spec.sizes)]  # each ratio's first size
    # Read before decoding: a JPEG's draft changes the opened image's size.
    decoded = {factor: decoded_size(opened, factor) for factor in DCT_FACTORS}
    stored = opened.image.size
    if decodes.look:
        with reserved(budget, look_cost(opened, decodes), timeout=timeout):
            picture = decode_rgb(opened, decodes.saliency_factor)
            framed = frame(picture, size, spec, focus)
            del picture
    else:
        framed = frame(None, size, spec, focus)
    chosen = factors(opened, framed, sizes, stored)
    windows = []
    for output, factor in zip(sizes, chosen, strict=True):
        framing = framed.ratios[output.index]
        if framing.fit == "crop":
            cut = cut_for(framing.box, output.ratio, output.long_side, decoded[factor], size)
            box = shown_box(cut, size)
            windows.append(Window(output.ratio, "crop", box, box))
        else:
            cut, _, _ = padded_cut(framing, output.ratio, output.long_side, decoded[factor], size)
            shown = replace(framing, box=shown_box(cut, size))
            windows.append(Window(output.ratio, "pad", shown.box, shown.frame_box))
    return Preview(size=size, focus=focus, trim_box=framed.trim_box, windows=tuple(windows))

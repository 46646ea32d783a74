"""The API's decodes as render-child jobs: a source thumbnail and the windows of a focus box.

They run in a `RenderPool` of the server's own (docs/design.md §5, previews; ADR 0037), so
that a decode that takes too long is killed at its deadline and one whose client has gone is
killed at once, instead of holding one of the server's few decode slots for minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchcrop.crop.crop_boxes import Preview, look_cost, preview_windows
from batchcrop.crop.decode import decode_cost, open_image
from batchcrop.crop.geometry import Box
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.planning import clipped_focus, plan
from batchcrop.crop.spec import RenderSpec
from batchcrop.crop.thumbnails import Thumbnail, thumbnail, thumbnail_reduction


@dataclass(frozen=True)
class ThumbnailJob:
    """`crop.thumbnail(data, max_side)` in a child."""

    data: bytes
    max_side: int

    def cost_bytes(self) -> int:
        """The thumbnail decode's estimated peak (as `thumbnail` reserves it)."""
        opened = open_image(self.data, MAX_SOURCE_PIXELS)
        try:
            return decode_cost(opened, thumbnail_reduction(opened, self.max_side))
        finally:
            opened.image.close()

    def run(self) -> Thumbnail:
        """The thumbnail."""
        return thumbnail(self.data, self.max_side)


@dataclass(frozen=True)
class WindowsJob:
    """`crop.crop_boxes.preview_windows(data, spec, focus=focus)` in a child."""

    data: bytes
    spec: RenderSpec
    focus: Box | None = None

    def cost_bytes(self) -> int:
        """The look decode, the face search and the person search, when framing needs the look
        (as `preview_windows` reserves them); raises `InvalidFocus` for a box outside the picture
        before any child is used."""
        opened = open_image(self.data, MAX_SOURCE_PIXELS)
        try:
            if self.focus is not None:
                clipped_focus(self.focus, opened.size)
            return look_cost(opened, plan(opened, self.spec))
        finally:
            opened.image.close()

    def run(self) -> Preview:
        """Each ratio's crop box."""
        return preview_windows(self.data, self.spec, focus=self.focus)

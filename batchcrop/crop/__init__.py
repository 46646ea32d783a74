"""Smart crop engine: source bytes in, one smart-cropped, resized, encoded image per ratio and
output format (JPEG, WebP, AVIF) out.

Pure functions, no storage and no database. See `render` for the pipeline and
`docs/adr/0003-saliency-window-crop.md` for how windows are chosen.

Names are imported from their submodules on first use, so that commands that never crop do
not load NumPy, Pillow and OpenCV.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from batchcrop.crop.budget import MIB, BudgetBusy, MemoryBudget
    from batchcrop.crop.encode import FORMATS, OutputFormat
    from batchcrop.crop.errors import CropError, ImageTooLarge, InvalidImage, UnsupportedImage
    from batchcrop.crop.faces import face_detector
    from batchcrop.crop.fields import SpecError
    from batchcrop.crop.limits import IMAGE_SUFFIXES, MAX_SOURCE_PIXELS
    from batchcrop.crop.render import render
    from batchcrop.crop.spec import RATIOS_DEFAULT, Ratio, RenderSpec, Rendition
    from batchcrop.crop.thumbnails import (
        PREVIEW_MAX_SIDE_PX,
        PreviewTaker,
        Thumbnail,
        source_preview,
        thumbnail,
    )
    from batchcrop.crop.variant import ALGORITHM_VERSION, preview_variant, variant_of

_HOMES = {
    "MIB": "batchcrop.crop.budget",
    "BudgetBusy": "batchcrop.crop.budget",
    "MemoryBudget": "batchcrop.crop.budget",
    "face_detector": "batchcrop.crop.faces",
    "IMAGE_SUFFIXES": "batchcrop.crop.limits",
    "MAX_SOURCE_PIXELS": "batchcrop.crop.limits",
    "FORMATS": "batchcrop.crop.encode",
    "OutputFormat": "batchcrop.crop.encode",
    "CropError": "batchcrop.crop.errors",
    "ImageTooLarge": "batchcrop.crop.errors",
    "InvalidImage": "batchcrop.crop.errors",
    "UnsupportedImage": "batchcrop.crop.errors",
    "PREVIEW_MAX_SIDE_PX": "batchcrop.crop.thumbnails",
    "PreviewTaker": "batchcrop.crop.thumbnails",
    "Thumbnail": "batchcrop.crop.thumbnails",
    "source_preview": "batchcrop.crop.thumbnails",
    "thumbnail": "batchcrop.crop.thumbnails",
    "render": "batchcrop.crop.render",
    "RATIOS_DEFAULT": "batchcrop.crop.spec",
    "Ratio": "batchcrop.crop.spec",
    "RenderSpec": "batchcrop.crop.spec",
    "Rendition": "batchcrop.crop.spec",
    "SpecError": "batchcrop.crop.fields",
    "ALGORITHM_VERSION": "batchcrop.crop.variant",
    "variant_of": "batchcrop.crop.variant",
    "preview_variant": "batchcrop.crop.variant",
}

__all__ = [
    "ALGORITHM_VERSION",
    "FORMATS",
    "IMAGE_SUFFIXES",
    "MAX_SOURCE_PIXELS",
    "MIB",
    "PREVIEW_MAX_SIDE_PX",
    "RATIOS_DEFAULT",
    "BudgetBusy",
    "CropError",
    "ImageTooLarge",
    "InvalidImage",
    "MemoryBudget",
    "OutputFormat",
    "PreviewTaker",
    "Ratio",
    "RenderSpec",
    "Rendition",
    "SpecError",
    "Thumbnail",
    "UnsupportedImage",
    "face_detector",
    "preview_variant",
    "render",
    "source_preview",
    "thumbnail",
    "variant_of",
]


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value

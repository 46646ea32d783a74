"""Smart crop engine: source bytes in, one smart-cropped, resized, encoded image per ratio and
output format (JPEG, WebP, AVIF) out.

Pure functions, no storage and no database. See `render` for the pipeline and
`docs/adr/0003-saliency-window-crop.md` for how windows are chosen.
"""

from batchcrop.crop.budget import MIB, BudgetBusy, MemoryBudget
from batchcrop.crop.decode import IMAGE_SUFFIXES, MAX_SOURCE_PIXELS
from batchcrop.crop.encode import FORMATS, OutputFormat
from batchcrop.crop.errors import CropError, ImageTooLarge, InvalidImage, UnsupportedImage
from batchcrop.crop.render import render
from batchcrop.crop.spec import RATIOS_DEFAULT, Ratio, RenderSpec, Rendition, SpecError
from batchcrop.crop.variant import ALGORITHM_VERSION, variant_of

__all__ = [
    "ALGORITHM_VERSION",
    "FORMATS",
    "IMAGE_SUFFIXES",
    "MAX_SOURCE_PIXELS",
    "MIB",
    "RATIOS_DEFAULT",
    "BudgetBusy",
    "CropError",
    "ImageTooLarge",
    "InvalidImage",
    "MemoryBudget",
    "OutputFormat",
    "Ratio",
    "RenderSpec",
    "Rendition",
    "SpecError",
    "UnsupportedImage",
    "render",
    "variant_of",
]

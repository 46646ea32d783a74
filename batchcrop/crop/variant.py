"""The variant: a short hash of everything besides the source and ratio that changes output bytes.

Same source + same spec + same libraries ⇒ same variant ⇒ same key ⇒ same bytes. Bump
`ALGORITHM_VERSION` whenever saliency, window placement, resampling or encoder settings change.
"""

from __future__ import annotations

import hashlib
from functools import cache

import numpy as np
import PIL
from PIL import features

from batchcrop.crop.spec import RenderSpec

ALGORITHM_VERSION = "3"
OUTPUT_FORMAT = "jpeg-baseline-420"
VARIANT_HEX_CHARS = 12


@cache
def _library_versions() -> str:
    """Versions of the libraries whose output reaches the bytes.

    Pillow, libjpeg(-turbo) and LittleCMS make the pixels and bytes; numpy computes the saliency
    that places the windows.
    """
    libjpeg = features.version("jpg") or "none"
    turbo = features.version("libjpeg_turbo") or "none"
    lcms = features.version("littlecms2") or "none"
    return (
        f"pillow={PIL.__version__};libjpeg={libjpeg};turbo={turbo};lcms={lcms};"
        f"numpy={np.__version__}"
    )


def variant_of(spec: RenderSpec) -> str:
    """A 12-hex-digit hash of max side, quality, format, algorithm and library versions.

    The ratios are not part of it: the key names the ratio separately. Pure and thread-safe.
    """
    text = (
        f"max_side={spec.max_side};quality={spec.quality};format={OUTPUT_FORMAT};"
        f"algorithm={ALGORITHM_VERSION};{_library_versions()}"
    )
    return hashlib.sha256(text.encode()).hexdigest()[:VARIANT_HEX_CHARS]

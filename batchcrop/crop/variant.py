"""The variant: a short hash of everything besides the source and ratio that changes output bytes.

Same source + same spec + same libraries ⇒ same variant ⇒ same key ⇒ same bytes. Bump
`ALGORITHM_VERSION` whenever saliency, face detection, window placement, resampling or encoder
settings change. The face detector's name and version are part of the text (`detector=`): a
worker without it has another variant and, besides, claims no batch (docs/design.md §6, faces).
"""

from __future__ import annotations

import hashlib
from functools import cache

import cv2
import numpy as np
import PIL
from PIL import features

from batchcrop.crop.encode import encoder_settings
from batchcrop.crop.faces import face_detector
from batchcrop.crop.preview import PREVIEW_MAX_SIDE_PX, THUMBNAIL_QUALITY
from batchcrop.crop.resample import vips_version
from batchcrop.crop.spec import RenderSpec
from batchcrop.crop.window import Box

ALGORITHM_VERSION = "6"
PREVIEW_VERSION = "2"
"""Bump when the stored preview's pipeline (`preview.thumbnail`) changes its bytes."""
OUTPUT_FORMAT = "jpeg-baseline-420"
VARIANT_HEX_CHARS = 12


@cache
def _library_versions() -> str:
    """Versions of the libraries whose output reaches the bytes.

    Pillow, libjpeg(-turbo), LittleCMS and libvips (the canvases' resampling) make the pixels
    and bytes; numpy computes the saliency and the face detector (`faces.face_detector()`, `none`
    where it is not installed) finds the faces that place the windows; OpenCV sharpens.
    """
    libjpeg = features.version("jpg") or "none"
    turbo = features.version("libjpeg_turbo") or "none"
    lcms = features.version("littlecms2") or "none"
    return (
        f"pillow={PIL.__version__};libjpeg={libjpeg};turbo={turbo};lcms={lcms};"
        f"numpy={np.__version__};opencv={cv2.__version__};vips={vips_version()};"
        f"detector={face_detector() or 'none'}"
    )


def variant_of(spec: RenderSpec, focus: Box | None = None, output: str = "jpeg") -> str:
    """A 12-hex-digit hash of max side, quality, the output format's encoder settings, algorithm,
    library versions and the item's focus box when it has one.

    The ratios and the other formats asked for are not part of it: the key names the ratio and
    the format's extension separately. A JPEG's variant is the one JPEG derivatives always had;
    another format adds its encoder settings and library versions (`encoder_settings`). Pure
    and thread-safe.
    """
    text = (
        f"max_side={spec.max_side};quality={spec.quality};format={OUTPUT_FORMAT};"
        f"algorithm={ALGORITHM_VERSION};{_library_versions()}"
    )
    if output != "jpeg":
        text += f";output={encoder_settings(output, spec.quality)}"
    if focus is not None:
        text += ";focus={},{},{},{}".format(*focus)
    return hashlib.sha256(text.encode()).hexdigest()[:VARIANT_HEX_CHARS]


@cache
def preview_variant() -> str:
    """A 12-hex-digit hash of the stored preview's size, quality, pipeline version and the
    library versions, naming the preview of a source (docs/design.md §5, previews). It holds
    nothing of a batch: every batch of a source shares one preview."""
    text = (
        f"preview={PREVIEW_VERSION};max_side={PREVIEW_MAX_SIDE_PX};quality={THUMBNAIL_QUALITY};"
        f"{_library_versions()}"
    )
    return hashlib.sha256(text.encode()).hexdigest()[:VARIANT_HEX_CHARS]

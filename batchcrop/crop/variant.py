"""The variant: a short hash of everything besides the source and ratio that changes output bytes.

Same source + same spec + same libraries ⇒ same variant ⇒ same key ⇒ same bytes. Bump
`ALGORITHM_VERSION` whenever saliency, face detection, window placement, resampling or encoder
settings change. The face detector's name and version are part of the text (`detector=`): a
worker without it has another variant and, besides, claims no batch (docs/design.md §6, faces).
So are the person prior's detector and settings (`people=`, OpenCV's HOG: ADR 0038).
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

import cv2
import numpy as np
import PIL
from PIL import features

from batchcrop.crop.faces import face_detector
from batchcrop.crop.geometry import Box
from batchcrop.crop.matching import encoder_settings
from batchcrop.crop.people import person_detector
from batchcrop.crop.resample import vips_version
from batchcrop.crop.spec import RenderSpec
from batchcrop.crop.thumbnails import PREVIEW_MAX_SIDE_PX, THUMBNAIL_QUALITY

ALGORITHM_VERSION = "9"
PREVIEW_VERSION = "2"
"""Bump when the stored preview's pipeline (`preview.thumbnail`) changes its bytes."""
OUTPUT_FORMAT = "jpeg-baseline-420"
VARIANT_HEX_CHARS = 12


@cache
def _library_versions() -> str:
    """Versions of the libraries whose output reaches the bytes.

    Pillow, libjpeg(-turbo), LittleCMS and libvips (the canvases' resampling) make the pixels
    and bytes; numpy computes the saliency and the face detector (`faces.face_detector()`, `none`
    where it is not installed) finds the faces that place the windows; OpenCV sharpens and finds
    the people without a face (`people.person_detector()`, its settings).
    """
    libjpeg = features.version("jpg") or "none"
    turbo = features.version("libjpeg_turbo") or "none"
    lcms = features.version("littlecms2") or "none"
    return (
        f"pillow={PIL.__version__};libjpeg={libjpeg};turbo={turbo};lcms={lcms};"
        f"numpy={np.__version__};opencv={cv2.__version__};vips={vips_version()};"
        f"detector={face_detector() or 'none'};people={person_detector()}"
    )


def variant_of(spec: RenderSpec, focus: Box | None = None, output: str = "jpeg") -> str:
    """A 12-hex-digit hash of `variant_text`. Pure and thread-safe."""
    return hashlib.sha256(variant_text(spec, focus, output).encode()).hexdigest()[
        :VARIANT_HEX_CHARS
    ]


def variant_text(spec: RenderSpec, focus: Box | None = None, output: str = "jpeg") -> str:
    """What the variant hashes: the request's byte-changing fields the key does not name
    (`RenderSpec.variant_settings`: max side, quality, and any field added later that is not at
    its default), the output format's encoder settings, algorithm, library versions and the
    item's focus box when it has one.

    The ratios and the formats asked for are not part of it: the key names the ratio and the
    format's extension separately. A JPEG's variant is the one JPEG derivatives always had;
    another format adds its encoder settings and library versions (`encoder_settings`). The
    text of the first release's fields is fixed (`max_side=1200;quality=85;format=…`): stored
    derivatives keep their keys (docs/design.md §5).
    """
    settings = ";".join(
        f"{name}={_setting_text(value)}" for name, value in spec.variant_settings().items()
    )
    text = f"{settings};format={OUTPUT_FORMAT};algorithm={ALGORITHM_VERSION};{_library_versions()}"
    if output != "jpeg":
        text += f";output={encoder_settings(output, spec.quality, spec.quality_match)}"
    if focus is not None:
        text += ";focus={},{},{},{}".format(*focus)
    return text


def _setting_text(value: Any) -> str:
    """A record value in the variant's text: `1200`, a list as `a,b`."""
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


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

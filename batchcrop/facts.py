"""The facts stored with each derivative (docs/design.md §5), and what a taken key's facts say.

Every derivative is written with its facts as user metadata (S3 `x-amz-meta-*`; on a local folder
a file beside it): the source's sha256, the ratio, the format, the variant, the crop box, the
image's width and height, its byte count, and the writer. The store adds the bytes' sha256. When a
write finds its key taken by other bytes, the stored object's facts decide: the same source,
ratio, format and variant mean the same derivative rendered elsewhere (another CPU's SIMD
rounding), and the stored object stands for it in the manifest; anything else is a
`derivative_conflict`.
"""

from __future__ import annotations

from batchcrop import __version__
from batchcrop.crop import Rendition
from batchcrop.documents import Derivative
from storage import ObjectInfo

SOURCE_SHA256 = "source-sha256"
RATIO = "ratio"
FORMAT = "format"
"""Absent from JPEG derivatives written before formats existed: read as `jpeg`."""
VARIANT = "variant"
CROP_BOX = "crop-box"
WIDTH = "width"
HEIGHT = "height"
BYTES = "bytes"
WRITER = "writer"
WRITER_PREFIX = "batchcrop/"


def derivative_facts(source_sha256: str, variant: str, rendition: Rendition) -> dict[str, str]:
    """The user metadata written with `rendition` (names lowercase with hyphens, values ASCII)."""
    return {
        SOURCE_SHA256: source_sha256,
        RATIO: str(rendition.ratio),
        FORMAT: rendition.format,
        VARIANT: variant,
        CROP_BOX: ",".join(str(v) for v in rendition.crop_box),
        WIDTH: str(rendition.width),
        HEIGHT: str(rendition.height),
        BYTES: str(len(rendition.data)),
        WRITER: f"{WRITER_PREFIX}{__version__}",
    }


def stored_derivative(
    existing: ObjectInfo | None,
    *,
    source_sha256: str,
    ratio: str,
    variant: str,
    output: str = "jpeg",
) -> Derivative | None:
    """The manifest row of the stored object `existing`, if its facts say batchcrop wrote it for
    this source, ratio, variant and output format; None when they name others, are missing or
    malformed, or do not describe the object (its size), or the store knows no sha256 for it."""
    if existing is None or existing.sha256 is None:
        return None
    facts = existing.metadata
    if not facts.get(WRITER, "").startswith(WRITER_PREFIX):
        return None
    if (facts.get(SOURCE_SHA256), facts.get(RATIO), facts.get(VARIANT)) != (
        source_sha256,
        ratio,
        variant,
    ) or facts.get(FORMAT, "jpeg") != output:
        return None
    try:
        width, height, size = (int(facts[name]) for name in (WIDTH, HEIGHT, BYTES))
        left, top, right, bottom = (int(v) for v in facts[CROP_BOX].split(","))
    except (KeyError, ValueError):
        return None
    if size != existing.size:
        return None
    return Derivative(
        ratio=ratio,
        format=output,
        key=existing.key,
        width=width,
        height=height,
        bytes=existing.size,
        sha256=existing.sha256,
        crop_box=(left, top, right, bottom),
    )

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
from batchcrop.crop import Rendition, Thumbnail
from batchcrop.documents import Derivative, Preview
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
KIND = "kind"
"""`preview` on a source's preview; absent on derivatives."""
PREVIEW_KIND = "preview"
SOURCE_WIDTH = "source-width"
SOURCE_HEIGHT = "source-height"


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


def preview_facts(source_sha256: str, variant: str, preview: Thumbnail) -> dict[str, str]:
    """The user metadata written with a source's preview (docs/design.md §5, previews)."""
    return {
        KIND: PREVIEW_KIND,
        SOURCE_SHA256: source_sha256,
        VARIANT: variant,
        WIDTH: str(preview.width),
        HEIGHT: str(preview.height),
        SOURCE_WIDTH: str(preview.source_width),
        SOURCE_HEIGHT: str(preview.source_height),
        BYTES: str(len(preview.data)),
        WRITER: f"{WRITER_PREFIX}{__version__}",
    }


def stored_preview(
    existing: ObjectInfo | None, *, source_sha256: str, variant: str
) -> Preview | None:
    """The preview record of the stored object `existing`, if its facts say batchcrop wrote it
    as the preview of this source in this variant; None otherwise (as `stored_derivative`)."""
    if existing is None or existing.sha256 is None:
        return None
    facts = existing.metadata
    if not facts.get(WRITER, "").startswith(WRITER_PREFIX):
        return None
    if (facts.get(KIND), facts.get(SOURCE_SHA256), facts.get(VARIANT)) != (
        PREVIEW_KIND,
        source_sha256,
        variant,
    ):
        return None
    try:
        width, height, source_width, source_height, size = (
            int(facts[name]) for name in (WIDTH, HEIGHT, SOURCE_WIDTH, SOURCE_HEIGHT, BYTES)
        )
    except (KeyError, ValueError):
        return None
    if size != existing.size:
        return None
    return Preview(
        key=existing.key,
        width=width,
        height=height,
        bytes=existing.size,
        sha256=existing.sha256,
        source_width=source_width,
        source_height=source_height,
    )

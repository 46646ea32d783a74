"""The facts stored with each derivative (docs/design.md §5), and what a taken key's facts say.

Every derivative is written with its facts as user metadata (S3 `x-amz-meta-*`; on a local folder
a file beside it): the source's sha256, the ratio, the format, the variant, the crop box, the
image's width and height, its byte count, and the writer. The store adds the bytes' sha256. When a
write finds its key taken by other bytes, the stored object's facts decide: the same source,
ratio, format and variant mean the same derivative rendered elsewhere (another CPU's SIMD
rounding), and the stored object stands for it in the manifest; anything else is a
`derivative_conflict`. Facts are read back as untrusted input (anyone with write access to the
store can edit them): every number must be a plain decimal in range, the crop box inside the
source, the sha256 the store's own (docs/design.md §5).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from batchcrop import __version__
from batchcrop.batches.documents import Derivative, Preview
from batchcrop.crop import Rendition, Thumbnail
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
FIT = "fit"
PADDING = "padding"
TRIM_BOX = "trim-box"
REQUESTED_WIDTH = "requested-width"
"""Absent from derivatives written before fit, trim and widths existed: a single-size crop
without trim."""
SOURCE_WIDTH = "source-width"
SOURCE_HEIGHT = "source-height"
NUMBER_DIGITS_MAX = 10
"""Digits of a number in the facts: more than any image dimension or derivative size."""
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def derivative_facts(source_sha256: str, variant: str, rendition: Rendition) -> dict[str, str]:
    """The user metadata written with `rendition` (names lowercase with hyphens, values ASCII)."""
    facts = {
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
    # Written only off today's single-size crop, so that a derivative's facts stay what they
    # were for requests that do not use them.
    if rendition.fit != "crop":
        facts[FIT] = rendition.fit
        facts[PADDING] = ",".join(str(v) for v in rendition.padding)
    if rendition.trim_box is not None:
        facts[TRIM_BOX] = ",".join(str(v) for v in rendition.trim_box)
    if rendition.requested_width is not None:
        facts[REQUESTED_WIDTH] = str(rendition.requested_width)
    return facts


def stored_derivative(
    existing: ObjectInfo | None,
    *,
    source_sha256: str,
    ratio: str,
    variant: str,
    output: str = "jpeg",
    source_size: tuple[int, int] | None = None,
    requested_width: int | None = None,
) -> Derivative | None:
    """The manifest row of the stored object `existing`, if its facts say batchcrop wrote it for
    this source, ratio, variant and output format; None when they name others, are missing or
    malformed or out of range (`source_size`: the source's oriented pixels, which the crop box
    must lie inside), do not describe the object (its size), or the store knows no sha256 for
    it."""
    if existing is None or existing.sha256 is None or not SHA256_HEX.fullmatch(existing.sha256):
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
    if facts.get(REQUESTED_WIDTH) != (None if requested_width is None else str(requested_width)):
        return None
    checked = _checked_numbers(facts, existing.size, source_size)
    framing = _framing(facts, source_size)
    if checked is None or framing is None:
        return None
    width, height, (left, top, right, bottom) = checked
    fit, padding, trim_box = framing
    return Derivative(
        ratio=ratio,
        format=output,
        key=existing.key,
        width=width,
        height=height,
        bytes=existing.size,
        sha256=existing.sha256,
        crop_box=(left, top, right, bottom),
        fit=fit,
        padding=padding,
        trim_box=trim_box,
        requested_width=requested_width,
    )


def _framing(
    facts: Mapping[str, str], source_size: tuple[int, int] | None
) -> tuple[str, tuple[int, int, int, int], tuple[int, int, int, int] | None] | None:
    """(fit, padding, trim box) of the facts, or None when they are malformed: a fit that is
    not `crop` or `pad`, a padding or a trim box that is not four numbers, a trim box empty or
    outside the source."""
    fit = facts.get(FIT, "crop")
    padding = _numbers(facts.get(PADDING, "0,0,0,0").split(","))
    if fit not in {"crop", "pad"} or padding is None or len(padding) != len("ltrb"):
        return None
    trim_box = None
    if TRIM_BOX in facts:
        box = _numbers(facts[TRIM_BOX].split(","))
        if box is None or len(box) != len("ltrb"):
            return None
        source_width, source_height = source_size or (box[2], box[3])
        if not (box[0] < box[2] <= source_width and box[1] < box[3] <= source_height):
            return None
        trim_box = (box[0], box[1], box[2], box[3])
    return fit, (padding[0], padding[1], padding[2], padding[3]), trim_box


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
    numbers = _numbers([facts.get(n) for n in (WIDTH, HEIGHT, SOURCE_WIDTH, SOURCE_HEIGHT, BYTES)])
    if numbers is None or min(numbers) < 1:
        return None
    width, height, source_width, source_height, size = numbers
    if size != existing.size or width > source_width or height > source_height:
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


def _checked_numbers(
    facts: Mapping[str, str], size: int, source_size: tuple[int, int] | None
) -> tuple[int, int, tuple[int, int, int, int]] | None:
    """(width, height, crop box) of the facts when every number is well formed and in range:
    positive sizes, the byte count the object's, the box non-empty and inside the source."""
    numbers = _numbers([facts.get(WIDTH), facts.get(HEIGHT), facts.get(BYTES)])
    box = _numbers(facts.get(CROP_BOX, "").split(","))
    if numbers is None or box is None or len(box) != len(("left", "top", "right", "bottom")):
        return None
    width, height, stated = numbers
    left, top, right, bottom = box
    if min(width, height, stated) < 1 or stated != size:
        return None
    source_width, source_height = source_size or (right, bottom)
    if not (left < right <= source_width and top < bottom <= source_height):
        return None
    return width, height, (left, top, right, bottom)


def _numbers(texts: Sequence[str | None]) -> list[int] | None:
    """Each text as a whole number written in plain ASCII digits (`int` would also take signs,
    spaces, underscores and other scripts' digits); None if any is not one."""
    numbers = []
    for text in texts:
        if text is None or not (text.isascii() and text.isdigit()) or len(text) > NUMBER_DIGITS_MAX:
            return None
        numbers.append(int(text))
    return numbers

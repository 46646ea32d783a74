"""What to render: aspect ratios, the render request, and the rendered derivative.

All three are frozen values validated at construction, so a `RenderSpec` that exists is valid and
can be shared between threads freely. `RenderSpec` is the one home of the render request
(docs/design.md §6): each of its fields is declared once, with its default, limits, help text
and its part in a derivative's storage key (`batchcrop/crop/fields.py`), and everything else is
built from that declaration: its checks, its stored record, the factory that reads user input,
the variant (`batchcrop/crop/variant.py`), the CLI flags and the API body fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from batchcrop.crop.fields import (
    DECLARATION,
    KeyPart,
    RenderField,
    SpecError,
    list_field,
    text_field,
    whole_field,
)

RATIO_TERM_MAX = 100
RATIOS_MAX_COUNT = 16
MAX_SIDE_PX_DEFAULT = 1200
MAX_SIDE_PX_MIN = 16
MAX_SIDE_PX_MAX = 10_000
QUALITY_DEFAULT = 85
QUALITY_MIN = 1
QUALITY_MAX = 100
RATIOS_DEFAULT = ("1:1", "4:3", "16:9", "3:4")
FORMAT_NAMES = ("jpeg", "webp", "avif")
"""The output formats a request may ask for (`batchcrop/crop/encode.py` encodes them)."""
FORMATS_DEFAULT = ("jpeg",)
WIDTHS_MAX_COUNT = 8
"""Widths a request may ask for per ratio (`widths`): a `srcset` rarely holds more."""
FIT_NAMES = ("crop", "pad", "auto")
"""How a ratio's output holds the picture (docs/design.md §6, fit): cut to the ratio, the whole
picture padded to it, or per source and ratio crop when the subject fits the window, else pad."""
FIT_DEFAULT = "crop"
AUTO_COLOUR = "auto"
"""`pad_colour`'s value for the picture's own border colour (white when the border is not
near-uniform)."""
PAD_COLOUR_DEFAULT = AUTO_COLOUR
BACKGROUND_DEFAULT = "#ffffff"
"""What a transparent source is flattened onto for the formats that do not keep its alpha."""
TRIM_TOLERANCE_MAX = 128
"""The loosest trim tolerance, in levels of 0-255 per channel: beyond it, borders are no longer
near-uniform but half the picture."""

_COLOUR_PATTERN = re.compile(r"#?([0-9a-fA-F]{6}|[0-9a-fA-F]{3})")
QUALITY_MATCHES = ("table", "jpeg")
"""How WebP's and AVIF's settings are found (`batchcrop/crop/matching.py`, ADR 0039): `table`,
the calibrated setting, one encode per output; `jpeg`, a search per output for the JPEG's
SSIMULACRA2 score within its bytes, several encodes and scores per output."""
QUALITY_MATCH_DEFAULT = "table"

_RATIO_PATTERN = re.compile(r"\s*([0-9]+)\s*[:xX]\s*([0-9]+)\s*")
_DECLARED: dict[type[RenderSpec], tuple[RenderField, ...]] = {}
"""Each spec class's declarations, read once (`RenderSpec.declarations`)."""


@dataclass(frozen=True, order=True)
class Ratio:
    """An aspect ratio `w:h` of two whole numbers in 1..100 (16:9 and 32:18 are different keys)."""

    w: int
    h: int

    def __post_init__(self) -> None:
        for name, term in (("w", self.w), ("h", self.h)):
            if isinstance(term, bool) or not isinstance(term, int):
                raise ValueError(f"ratio {name} must be a whole number, got {term!r}")
            if not 1 <= term <= RATIO_TERM_MAX:
                raise ValueError(f"ratio {name} must be in 1..{RATIO_TERM_MAX}, got {term}")

    @classmethod
    def parse(cls, text: str) -> Ratio:
        """Parse `"16:9"` or `"16x9"`; raise ValueError saying what is wrong otherwise."""
        match = _RATIO_PATTERN.fullmatch(text)
        if match is None:
            raise ValueError(f"ratio must look like 16:9 (two whole numbers), got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.w}:{self.h}"

    @property
    def key(self) -> str:
        """The form used in storage keys: `16x9`."""
        return f"{self.w}x{self.h}"

    @property
    def aspect(self) -> float:
        """Width over height."""
        return self.w / self.h


def _format_name(text: str) -> str:
    return text.strip().lower()


def _choice_name(text: str) -> str:
    return text.strip().lower()


def parse_colour(text: str) -> str:
    """`#rrggbb` of `"#RRGGBB"`, `"rrggbb"`, `"#rgb"` or `"rgb"`; ValueError saying what is
    wrong otherwise."""
    match = _COLOUR_PATTERN.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a colour: write it #rrggbb (#ffffff is white)")
    digits = match.group(1).lower()
    return "#" + (digits if len(digits) == 6 else "".join(d + d for d in digits))


def _pad_colour(text: str) -> str:
    if text.strip().lower() == AUTO_COLOUR:
        return AUTO_COLOUR
    try:
        return parse_colour(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a colour: write it #rrggbb (#ffffff is white) or auto"
        ) from None


def colour_rgb(colour: str) -> tuple[int, int, int]:
    """The (r, g, b) of a `#rrggbb` colour."""
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _width(text: str) -> int:
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):
        raise ValueError(f"a width must be a whole number of pixels, got {text!r}")
    width = int(stripped)
    if not MAX_SIDE_PX_MIN <= width <= MAX_SIDE_PX_MAX:
        raise ValueError(f"a width must be in {MAX_SIDE_PX_MIN}..{MAX_SIDE_PX_MAX}, got {width}")
    return width


@dataclass(frozen=True)
class RenderSpec:
    """The derivatives wanted per source: ratios (in output order), longest side, quality (on
    the JPEG scale, the same visual quality in every format), output formats (in output order),
    widths (several sizes per ratio instead of the one `max_side` gives), fit (crop, pad or
    auto), the padding colour, the trim tolerance and the background a transparent source is
    flattened onto (docs/design.md §6, fit), and how WebP's and AVIF's settings meet the
    quality (`quality_match`).

    Each field is declared once with `whole_field`, `text_field` or `list_field`
    (docs/design.md §6). Its
    record (`to_record`) is what a batch stores, what the status document shows and what the
    idempotency fingerprint hashes; a field added here reaches those, the variant (by its
    `KeyPart`) and the CLI flags by itself, and the API body by one typed line that
    `tests/api/test_render_fields.py` asks for.
    """

    ratios: tuple[Ratio, ...] = list_field(
        RATIOS_DEFAULT,
        RATIOS_MAX_COUNT,
        item_type=Ratio,
        parse_item=Ratio.parse,
        noun="ratio",
        example="16:9",
        help="aspect ratios w:h (16:9 or 16x9), distinct, in output order",
        key=KeyPart.NAMED,
        original=True,
    )
    max_side: int = whole_field(
        MAX_SIDE_PX_DEFAULT,
        MAX_SIDE_PX_MIN,
        MAX_SIDE_PX_MAX,
        help="longest output side in pixels",
        key=KeyPart.VARIANT,
        original=True,
    )
    quality: int = whole_field(
        QUALITY_DEFAULT,
        QUALITY_MIN,
        QUALITY_MAX,
        help="quality on the JPEG scale: WebP and AVIF are encoded to look the same",
        key=KeyPart.VARIANT,
        original=True,
    )
    formats: tuple[str, ...] = list_field(
        FORMATS_DEFAULT,
        len(FORMAT_NAMES),
        item_type=str,
        parse_item=_format_name,
        noun="format",
        example="webp",
        help="output formats, distinct, in output order: one derivative per ratio and format",
        key=KeyPart.NAMED,
        choices=FORMAT_NAMES,
    )
    widths: tuple[int, ...] = list_field(
        (),
        WIDTHS_MAX_COUNT,
        item_type=int,
        parse_item=_width,
        noun="width",
        example="640",
        help="output widths in pixels, distinct: one derivative per ratio, width and format, "
        "never upscaled (none: one size, max_side)",
        key=KeyPart.NAMED,
        low=0,
    )
    fit: str = text_field(
        FIT_DEFAULT,
        parse_item=_choice_name,
        example="pad",
        help="crop to each ratio, pad the whole picture to it, or auto: crop when the subject "
        "fits the window, pad when cropping would cut it",
        key=KeyPart.VARIANT,
        choices=FIT_NAMES,
    )
    pad_colour: str = text_field(
        PAD_COLOUR_DEFAULT,
        parse_item=_pad_colour,
        example="#ffffff",
        help="what padding is filled with: #rrggbb, or auto (the picture's border colour when "
        "it is near-uniform, else white)",
        key=KeyPart.VARIANT,
    )
    trim: int = whole_field(
        0,
        0,
        TRIM_TOLERANCE_MAX,
        help="trim borders within this many levels (0-255) of the border colour before "
        "cropping or padding (0: no trim)",
        key=KeyPart.VARIANT,
    )
    background: str = text_field(
        BACKGROUND_DEFAULT,
        parse_item=parse_colour,
        example="#ffffff",
        help="the colour a transparent source is flattened onto (#rrggbb) in formats without "
        "transparency",
        key=KeyPart.VARIANT,
    )
    quality_match: str = text_field(
        QUALITY_MATCH_DEFAULT,
        parse_item=_choice_name,
        example="jpeg",
        help="how WebP and AVIF meet the quality: table (calibrated, one encode per output) or "
        "jpeg (each output searched for its JPEG's SSIMULACRA2 score, many times slower)",
        key=KeyPart.VARIANT,
        choices=QUALITY_MATCHES,
    )

    def __post_init__(self) -> None:
        for declared in self.declarations():
            declared.check(getattr(self, declared.name))
        if self.widths and self.max_side != MAX_SIDE_PX_DEFAULT:
            raise SpecError(
                "widths",
                "widths and max_side are two forms of the output size: give one of them",
            )

    @property
    def sizes(self) -> tuple[int | None, ...]:
        """The sizes asked for per ratio, in output order: each width, or None alone for the
        single size `max_side` gives."""
        return self.widths or (None,)

    @classmethod
    def declarations(cls) -> tuple[RenderField, ...]:
        """The fields' declarations in record order, each with its name and default; raise
        TypeError if a field was not made by `whole_field`, `list_field` or
        `choice_field`."""
        declared = _DECLARED.get(cls)
        if declared is None:  # two threads may both read them: the same tuple either way
            declared = _DECLARED[cls] = _declarations(cls)
        return declared

    @classmethod
    def declared(cls, name: str) -> RenderField:
        """The declaration of the field `name`; KeyError if there is none."""
        for declared in cls.declarations():
            if declared.name == name:
                return declared
        raise KeyError(name)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The public fields, in record order: CLI flags and API body fields of the same names."""
        return tuple(declared.name for declared in cls.declarations())

    @classmethod
    def from_input(cls, values: Mapping[str, Any]) -> RenderSpec:
        """The one factory for user input (CLI and API): raise `SpecError` naming the field.

        `values` maps field names to raw values; absent or None fields take their defaults.
        A list field (`ratios`, `formats`) takes a sequence of texts or one comma-separated
        text (`"16:9,1:1"`, `"jpeg,webp"`).
        """
        return cls(
            **{
                declared.name: declared.read(values[declared.name])
                for declared in cls.declarations()
                if values.get(declared.name) is not None
            }
        )

    def to_record(self) -> dict[str, Any]:
        """The public fields as JSON values (ratios as `"16:9"` texts), in declaration order."""
        return {d.name: d.record(getattr(self, d.name)) for d in self.declarations()}

    def fingerprinted(self) -> dict[str, Any]:
        """The record as idempotency fingerprints hash it.

        A field added after the first release is left out while it holds its default, so a
        request that does not use it keeps the fingerprint it had before the field existed (an
        idempotency key in flight across an upgrade still matches its batch).
        """
        return {d.name: d.record(value) for d, value in self._hashed()}

    def variant_settings(self) -> dict[str, Any]:
        """The byte-changing fields the key does not name (`KeyPart.VARIANT`), as JSON values in
        declaration order, as the variant hashes them (`batchcrop/crop/variant.py`).

        As in `fingerprinted`, a field added after the first release is left out while it holds
        its default, so the keys of derivatives stored before it existed stay the same.
        """
        return {d.name: d.record(value) for d, value in self._hashed() if d.key is KeyPart.VARIANT}

    def _hashed(self) -> list[tuple[RenderField, Any]]:
        """The fields a hash of the request includes: the first release's always, any other
        when it is not at its default."""
        pairs = [(d, getattr(self, d.name)) for d in self.declarations()]
        return [(d, value) for d, value in pairs if d.original or value != d.default]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RenderSpec:
        """The spec a stored record describes; fields added later take their defaults."""
        return cls.from_input(record)


def _declarations(cls: type[RenderSpec]) -> tuple[RenderField, ...]:
    declared = []
    for spec_field in fields(cls):
        declaration = spec_field.metadata.get(DECLARATION)
        if not isinstance(declaration, RenderField):
            raise TypeError(
                f"{cls.__name__}.{spec_field.name} is not declared: render fields are made by "
                "whole_field, text_field or list_field (docs/design.md §6)"
            )
        declared.append(replace(declaration, name=spec_field.name, default=spec_field.default))
    return tuple(declared)


@dataclass(frozen=True)
class Rendition:
    """One encoded derivative: one ratio at one size in one format (`FORMAT_NAMES`).

    `width`/`height` are the image's pixels; `crop_box` is `(left, top, right, bottom)` in source
    pixels after EXIF orientation (right/bottom exclusive): the part of the source the image
    shows; `sha256` is the hex digest of `data`; `source_size` is the source's (width, height)
    after orientation, when known. `fit` is the fit used (`crop` or `pad`: `auto` resolves to
    one of them), `padding` the (left, top, right, bottom) output pixels of padding around the
    picture, `trim_box` the source box left after trimming (None: no trim asked) and
    `requested_width` the width asked for (None: the single size of `max_side`); a `width`
    below it means the source held no more (never upscaled).
    """

    ratio: Ratio
    data: bytes
    width: int
    height: int
    sha256: str
    crop_box: tuple[int, int, int, int]
    format: str = "jpeg"
    source_size: tuple[int, int] | None = None
    fit: str = FIT_DEFAULT
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    trim_box: tuple[int, int, int, int] | None = None
    requested_width: int | None = None

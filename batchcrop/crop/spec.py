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
    choice_field,
    list_field,
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


@dataclass(frozen=True)
class RenderSpec:
    """The derivatives wanted per source: ratios (in output order), longest side, quality (on
    the JPEG scale, the same visual quality in every format), output formats (in output order)
    and how WebP's and AVIF's settings meet the quality (`quality_match`).

    Each field is declared once with `whole_field`, `list_field` or `choice_field`
    (docs/design.md §6). Its record (`to_record`) is what a batch stores, what the status
    document shows and what the idempotency fingerprint hashes; a field added here reaches
    those, the variant (by its `KeyPart`) and the CLI flags by itself, and the API body by one
    typed line that `tests/api/test_render_fields.py` asks for.
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
    quality_match: str = choice_field(
        QUALITY_MATCH_DEFAULT,
        QUALITY_MATCHES,
        help="how WebP and AVIF meet the quality: table (calibrated, one encode per output) or "
        "jpeg (each output searched for its JPEG's SSIMULACRA2 score, many times slower)",
        key=KeyPart.VARIANT,
    )

    def __post_init__(self) -> None:
        for declared in self.declarations():
            declared.check(getattr(self, declared.name))

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
                "whole_field, list_field or choice_field (docs/design.md §6)"
            )
        declared.append(replace(declaration, name=spec_field.name, default=spec_field.default))
    return tuple(declared)


@dataclass(frozen=True)
class Rendition:
    """One encoded derivative: one ratio in one format (`FORMAT_NAMES`).

    `width`/`height` are the image's pixels; `crop_box` is `(left, top, right, bottom)` in source
    pixels after EXIF orientation (right/bottom exclusive); `sha256` is the hex digest of `data`;
    `source_size` is the source's (width, height) after orientation, when known.
    """

    ratio: Ratio
    data: bytes
    width: int
    height: int
    sha256: str
    crop_box: tuple[int, int, int, int]
    format: str = "jpeg"
    source_size: tuple[int, int] | None = None

"""What to render: aspect ratios, the render request, and the rendered derivative.

All three are frozen values validated at construction, so a `RenderSpec` that exists is valid and
can be shared between threads freely. `RenderSpec` is the one home of the render request: its
public fields, their defaults and limits, its stored record and the factory that builds it from
user input (CLI flags or an API body) all live here (docs/design.md §6).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

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
FINGERPRINTED_ALWAYS = ("ratios", "max_side", "quality")
"""The first release's fields: idempotency fingerprints always hash them (see `fingerprinted`)."""

_RATIO_PATTERN = re.compile(r"\s*([0-9]+)\s*[:xX]\s*([0-9]+)\s*")


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


class SpecError(ValueError):
    """A render request field with an unusable value; `field` names it (`ratios[1]`, `quality`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class RenderSpec:
    """The derivatives wanted per source: ratios (in output order), longest side, quality (on
    the JPEG scale, the same visual quality in every format) and output formats (in output order).

    Its record (`to_record`) is what a batch stores, what the status document shows and what
    the idempotency fingerprint hashes; a field added here reaches all three by itself.
    """

    ratios: tuple[Ratio, ...]
    max_side: int = MAX_SIDE_PX_DEFAULT
    quality: int = QUALITY_DEFAULT
    formats: tuple[str, ...] = FORMATS_DEFAULT

    def __post_init__(self) -> None:
        if not isinstance(self.ratios, tuple) or not all(
            isinstance(ratio, Ratio) for ratio in self.ratios
        ):
            raise ValueError("ratios must be a tuple of Ratio")
        if not 1 <= len(self.ratios) <= RATIOS_MAX_COUNT:
            raise ValueError(
                f"ratios must hold 1..{RATIOS_MAX_COUNT} ratios, got {len(self.ratios)}"
            )
        if len(set(self.ratios)) != len(self.ratios):
            raise ValueError("ratios must be distinct")
        _check_whole("max_side", self.max_side, MAX_SIDE_PX_MIN, MAX_SIDE_PX_MAX)
        _check_whole("quality", self.quality, QUALITY_MIN, QUALITY_MAX)
        if not isinstance(self.formats, tuple) or not 1 <= len(self.formats) <= len(FORMAT_NAMES):
            raise ValueError(f"formats must hold 1..{len(FORMAT_NAMES)} formats")
        for name in self.formats:
            if name not in FORMAT_NAMES:
                raise ValueError(f"formats: {name!r} is not one of {', '.join(FORMAT_NAMES)}")
        if len(set(self.formats)) != len(self.formats):
            raise ValueError("formats must be distinct")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The public fields, in record order: CLI flags and API body fields of the same names."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_input(cls, values: Mapping[str, Any]) -> RenderSpec:
        """The one factory for user input (CLI and API): raise `SpecError` naming the field.

        `values` maps field names to raw values; absent or None fields take their defaults.
        `ratios` is a sequence of `"16:9"` texts or one comma-separated text; so is `formats`
        (`"jpeg,webp"`).
        """
        given = {name: values[name] for name in cls.field_names() if values.get(name) is not None}
        raw_ratios = given.pop("ratios", RATIOS_DEFAULT)
        if isinstance(raw_ratios, str):
            raw_ratios = [r for r in raw_ratios.split(",") if r.strip()]
        given["ratios"] = _parse_ratios(raw_ratios)
        if "formats" in given:
            given["formats"] = _parse_formats(given["formats"])
        try:
            return cls(**given)
        except ValueError as exc:
            message = str(exc)
            field = next((n for n in cls.field_names() if message.startswith(n)), "ratios")
            raise SpecError(field, message) from exc

    def to_record(self) -> dict[str, Any]:
        """The public fields as JSON values (ratios as `"16:9"` texts), in declaration order."""
        record: dict[str, Any] = {name: getattr(self, name) for name in self.field_names()}
        record["ratios"] = [str(r) for r in self.ratios]
        record["formats"] = list(self.formats)
        return record

    def fingerprinted(self) -> dict[str, Any]:
        """The record as idempotency fingerprints hash it.

        A field added after the first release is left out while it holds its default, so a
        request that does not use it keeps the fingerprint it had before the field existed (an
        idempotency key in flight across an upgrade still matches its batch).
        """
        defaults = {
            f.name: list(f.default) if isinstance(f.default, tuple) else f.default
            for f in fields(self)
        }
        return {
            name: value
            for name, value in self.to_record().items()
            if name in FINGERPRINTED_ALWAYS or value != defaults[name]
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RenderSpec:
        """The spec a stored record describes; fields added later take their defaults."""
        return cls.from_input(record)


def _parse_ratios(texts: Sequence[Any]) -> tuple[Ratio, ...]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise SpecError("ratios", "ratios must be a list of texts such as 16:9")
    ratios = []
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise SpecError(f"ratios[{index}]", f"ratio must be a text such as 16:9, got {text!r}")
        try:
            ratios.append(Ratio.parse(text))
        except ValueError as exc:
            raise SpecError(f"ratios[{index}]", str(exc)) from exc
    return tuple(ratios)


def _parse_formats(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [name for name in raw.split(",") if name.strip()]
    if not isinstance(raw, Sequence):
        raise SpecError("formats", "formats must be a list of texts such as jpeg")
    names = []
    for index, name in enumerate(raw):
        if not isinstance(name, str):
            raise SpecError(
                f"formats[{index}]", f"format must be a text such as webp, got {name!r}"
            )
        names.append(name.strip().lower())
    return tuple(names)


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


def _check_whole(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")

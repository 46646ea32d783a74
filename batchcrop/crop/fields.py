"""How a render request field is declared (docs/design.md §6): once, with everything about it.

`RenderSpec` (`batchcrop/crop/spec.py`) makes each of its fields with `whole_field`,
`text_field` or `list_field`; its checks, record, input reading, the variant, the CLI flags and
the API body fields are built from the `RenderField` each carries (ADR 0026).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from batchcrop.errors import FieldError

DECLARATION = "batchcrop.render_field"
"""The dataclass field metadata key holding a field's `RenderField`."""


class SpecError(FieldError):
    """A render request field with an unusable value; `field` names it (`ratios[1]`, `quality`)."""


class KeyPart(enum.Enum):
    """A render field's part in a derivative's storage key (docs/design.md §5)."""

    VARIANT = "variant"
    """It changes the bytes and the key does not name it: the variant hashes it (`max_side`)."""
    NAMED = "named"
    """It changes the bytes and the key names it by itself: the ratio, the format's extension."""
    NONE = "none"
    """It changes no derivative's bytes (how the outputs are listed, say)."""


@dataclass(frozen=True, kw_only=True)
class RenderField:
    """Everything about one render request field: made once by `whole_field`, `text_field` or
    `list_field`, read back (with the dataclass field's `name` and `default`) from
    `RenderSpec.declarations`.

    Its checks, its record, its reading of user input, its part in the variant, its CLI flag
    and its API body field are all built from this. A whole number lies in `low..high`; a text
    (`text` set) is one text that `parse_item` reads into its canonical form (`#ffffff`), among
    `choices` when there are any; a list holds `low..high` distinct items of `item_type`, given
    as texts (`"16:9"`, `"webp"`, `"640"`) that `parse_item` reads, each among `choices` when
    there are any. `original`: one of the first
    release's fields, which the idempotency fingerprint and the variant always hash; a field
    added later is hashed only when it is not at its default, so fingerprints and keys made
    before it existed stay what they were.
    """

    help: str
    key: KeyPart
    low: int
    high: int
    original: bool = False
    item_type: type | None = None
    parse_item: Callable[[str], Any] | None = None
    noun: str = ""
    example: str = ""
    choices: tuple[str, ...] = ()
    text: bool = False
    name: str = ""
    default: Any = None

    @property
    def is_list(self) -> bool:
        """A list (`ratios`, `formats`, `widths`) rather than one value."""
        return self.item_type is not None

    @property
    def kind(self) -> str:
        """`list`, `text` or `whole`: the form a flag reads and a body field takes."""
        return "list" if self.is_list else "text" if self.text else "whole"

    @property
    def flag(self) -> str:
        """The CLI flag of the same name: `--max-side`."""
        return "--" + self.name.replace("_", "-")

    @property
    def default_record(self) -> Any:
        """The default as a record, an API body or a flag gives it: `["1:1", "4:3"]`, `1200`."""
        return self.record(self.default)

    def record(self, value: Any) -> Any:
        """`value` as JSON: a list for a list, of texts (`Ratio` prints as `16:9`) or of whole
        numbers (`widths`)."""
        if not self.is_list:
            return value
        return [item if self.item_type is int else str(item) for item in value]

    def read(self, raw: Any) -> Any:
        """The value that user input `raw` gives (a list: a sequence of texts or one
        comma-separated text; whole-number items may also be given as numbers); raise
        `SpecError` naming the field or item when it cannot."""
        if self.parse_item is None:
            return raw  # a whole number: `check` refuses anything else
        if self.text:
            if not isinstance(raw, str):
                raise SpecError(self.name, f"{self.name} must be a text such as {self.example}")
            try:
                return self.parse_item(raw)
            except ValueError as exc:
                raise SpecError(self.name, f"{self.name}: {exc}") from exc
        if isinstance(raw, str):
            raw = [text for text in raw.split(",") if text.strip()]
        if not isinstance(raw, Sequence):
            raise SpecError(
                self.name, f"{self.name} must be a list of texts such as {self.example}"
            )
        items = []
        for index, given in enumerate(raw):
            where = f"{self.name}[{index}]"
            whole = isinstance(given, int) and not isinstance(given, bool)
            text = str(given) if self.item_type is int and whole else given
            if not isinstance(text, str):
                raise SpecError(
                    where, f"{self.noun} must be a text such as {self.example}, got {text!r}"
                )
            try:
                items.append(self.parse_item(text))
            except ValueError as exc:
                raise SpecError(where, str(exc)) from exc
        return tuple(items)

    def check(self, value: Any) -> None:
        """Raise `SpecError` naming the field unless `value` is one of its values."""
        name = self.name
        if self.text:
            if not isinstance(value, str):
                raise SpecError(name, f"{name} must be a text, got {value!r}")
            if self.choices and value not in self.choices:
                raise SpecError(name, f"{name}: {value!r} is not one of {', '.join(self.choices)}")
            return
        if self.item_type is None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise SpecError(name, f"{name} must be a whole number, got {value!r}")
            if not self.low <= value <= self.high:
                raise SpecError(name, f"{name} must be in {self.low}..{self.high}, got {value}")
            return
        if not isinstance(value, tuple) or not all(isinstance(v, self.item_type) for v in value):
            raise SpecError(name, f"{name} must be a tuple of {self.item_type.__name__}")
        if not self.low <= len(value) <= self.high:
            raise SpecError(
                name, f"{name} must hold {self.low}..{self.high} {self.noun}s, got {len(value)}"
            )
        for item in value if self.choices else ():
            if item not in self.choices:
                raise SpecError(name, f"{name}: {item!r} is not one of {', '.join(self.choices)}")
        if len(set(value)) != len(value):
            raise SpecError(name, f"{name} must be distinct")


def whole_field(
    default: int, low: int, high: int, *, help: str, key: KeyPart, original: bool = False
) -> Any:
    """A `RenderSpec` field holding a whole number in `low..high` (see `RenderField`)."""
    declared = RenderField(help=help, key=key, low=low, high=high, original=original)
    return field(default=default, metadata={DECLARATION: declared})


def text_field(
    default: str,
    *,
    parse_item: Callable[[str], str],
    example: str,
    help: str,
    key: KeyPart,
    choices: tuple[str, ...] = (),
) -> Any:
    """A `RenderSpec` field holding one text, read into its canonical form by `parse_item`
    (which raises ValueError saying what is wrong), among `choices` when given (see
    `RenderField`)."""
    declared = RenderField(
        help=help,
        key=key,
        low=0,
        high=0,
        parse_item=parse_item,
        noun="text",
        example=example,
        choices=choices,
        text=True,
    )
    return field(default=declared.read(default), metadata={DECLARATION: declared})


def list_field(
    default: Sequence[str],
    high: int,
    *,
    item_type: type,
    parse_item: Callable[[str], Any],
    noun: str,
    example: str,
    help: str,
    key: KeyPart,
    choices: tuple[str, ...] = (),
    original: bool = False,
    low: int = 1,
) -> Any:
    """A `RenderSpec` field holding `low`..`high` distinct items, given as texts (and recorded
    as texts, or as numbers for `item_type` int); its default is given as texts too (see
    `RenderField`)."""
    declared = RenderField(
        help=help,
        key=key,
        low=low,
        high=high,
        original=original,
        item_type=item_type,
        parse_item=parse_item,
        noun=noun,
        example=example,
        choices=choices,
    )
    return field(default=declared.read(default), metadata={DECLARATION: declared})


def choice_field(
    default: str,
    choices: tuple[str, ...],
    *,
    help: str,
    key: KeyPart,
    original: bool = False,
) -> Any:
    """A `RenderSpec` field holding one text among `choices`, read trimmed and in lower case
    (see `RenderField`)."""
    declared = RenderField(
        help=help,
        key=key,
        low=1,
        high=1,
        original=original,
        parse_item=_choice_text,
        noun="choice",
        example=choices[0],
        choices=choices,
    )
    return field(default=default, metadata={DECLARATION: declared})


def _choice_text(text: str) -> str:
    return text.strip().lower()

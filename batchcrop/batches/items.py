"""The items of a submission: one `ItemRequest` per source, and `ItemList`, a request's items
kept as columns, with the texts a submission writes for them — the lease payloads, the items'
part of the idempotency fingerprint, their time-ordered ids — made without an object per item
(a CLI submission may carry a million; docs/design.md §3, creation; ADR 0023).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any, overload

from batchcrop.crop.limits import MAX_SOURCE_PIXELS

if TYPE_CHECKING:
    from batchcrop.crop.geometry import Box

FOCUS_TERMS = ("left", "top", "right", "bottom")
FOCUS_PX_MAX = MAX_SOURCE_PIXELS
"""No side of a picture the engine accepts is longer than its pixel limit, so a larger
coordinate could never fall inside one; the limit also keeps every value a small integer."""


SOURCE_CHARS_MAX = 4096
REF_CHARS_MAX = 256
"""The longest source and ref an item may have, through the API and the CLI alike."""

_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Unicode's control characters (category Cc: C0, DEL and C1), matched in C: a body of 100,000
items holds 200,000 texts to check, a CLI submission up to millions."""


def storable_text(text: str) -> str:
    """Refuse what no database column can hold (NUL, lone UTF-16 surrogates, which is also
    what a file name that is not UTF-8 becomes) and control characters, which would act on the
    terminal of whoever lists the batch."""
    if "\0" in text:
        raise ValueError("must not contain NUL characters")
    if _CONTROL_CHARACTERS.search(text):
        raise ValueError("must not contain control characters")
    if not _utf8(text):
        raise ValueError("must be valid Unicode text (no lone surrogates)")
    return text


def unstorable(texts: Sequence[str], chars_max: int) -> tuple[int, str] | None:
    """The first of `texts` that `storable_text` refuses or that is longer than `chars_max`,
    as (position, reason); None when all are fine. All are checked at once (one length scan,
    one pattern search and one encode over their concatenation), and one by one only to find
    the culprit."""
    if not texts:
        return None
    if max(map(len, texts)) <= chars_max:
        joined = "".join(texts)
        # isprintable(): a quicker pass that no control character survives (nor some others, such
        # as U+2028, which the pattern then clears).
        controls = not joined.isprintable() and _CONTROL_CHARACTERS.search(joined) is not None
        if not controls and _utf8(joined):
            return None
    for position, text in enumerate(texts):
        if len(text) > chars_max:
            return position, f"is longer than {chars_max} characters"
        try:
            storable_text(text)
        except ValueError as exc:
            return position, str(exc)
    return None  # not reached: the bulk check found something


def _utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (no lone surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class FocusError(ValueError):
    """A focus box that is not four whole numbers forming a box; `term` names the offending one
    (`left`, `top`, `right`, `bottom`), so the CLI can name its CSV column and the API its
    field."""

    def __init__(self, term: str, message: str) -> None:
        super().__init__(message)
        self.term = term


def focus_box(values: Sequence[object]) -> Box:
    """The focus box `(left, top, right, bottom)` of `values`, checked; FocusError otherwise.

    Coordinates are upright source pixels (after EXIF orientation), right and bottom exclusive,
    as a derivative's `crop_box`. Only the shape is checked here: whether the box meets the
    picture is known once the source is read (the item then fails `invalid_focus`).
    """
    if len(values) != len(FOCUS_TERMS):
        raise FocusError("left", "a focus box is four numbers: left, top, right, bottom")
    checked: list[int] = []
    for term, value in zip(FOCUS_TERMS, values, strict=True):
        # bool is an int to Python, never a coordinate to a caller.
        if not isinstance(value, int) or isinstance(value, bool):
            raise FocusError(term, f"{term} must be a whole number")
        if not 0 <= value <= FOCUS_PX_MAX:
            raise FocusError(term, f"{term} must be in 0..{FOCUS_PX_MAX}")
        checked.append(value)
    left, top, right, bottom = checked
    if right <= left:
        raise FocusError("right", "right must be greater than left")
    if bottom <= top:
        raise FocusError("bottom", "bottom must be greater than top")
    return left, top, right, bottom


def focus_from_text(text: str) -> Box:
    """The focus box written `left,top,right,bottom` (the CLI's `--focus`, the API's `?focus=`),
    checked by `focus_box`; FocusError otherwise."""
    parts = text.split(",")
    if len(parts) != len(FOCUS_TERMS):
        raise FocusError("left", "a focus box is four numbers: left,top,right,bottom")
    values: list[object] = []
    for term, part in zip(FOCUS_TERMS, parts, strict=True):
        digits = part.strip()
        # isascii: str.isdigit() also accepts digits int() refuses, such as "²".
        if not (digits.isascii() and digits.isdigit()) or len(digits) > len(str(FOCUS_PX_MAX)):
            raise FocusError(term, f"{term} must be a whole number in 0..{FOCUS_PX_MAX}")
        values.append(int(digits))
    return focus_box(values)


def payload_focus(payload: Mapping[str, Any]) -> Box | None:
    """An item payload's focus box as a tuple (JSON stores it as a list), or None."""
    values = payload.get("focus_box")
    return None if values is None else focus_box(values)


@dataclass(frozen=True)
class ItemRequest:
    """One source to crop, with the caller's reference (e.g. a SKU) and, when the caller knows
    where the product is, a focus box every derivative keeps (docs/design.md §6)."""

    source: str
    ref: str | None = None
    focus_box: Box | None = None

    def __post_init__(self) -> None:
        if self.focus_box is not None:
            # A list from a caller becomes the tuple the crop engine and the hash expect.
            object.__setattr__(self, "focus_box", focus_box(self.focus_box))

    def payload(self) -> dict[str, Any]:
        """The lease item's payload: `focus_box` only when set, so items without one (and every
        item written before focus boxes existed) look alike."""
        payload: dict[str, Any] = {"source": self.source, "ref": self.ref}
        if self.focus_box is not None:
            payload["focus_box"] = list(self.focus_box)
        return payload

    def fingerprinted(self) -> list[Any]:
        """This item in the request fingerprint: (source, ref), plus the focus box when set, so
        requests without focus boxes keep the fingerprints they always had."""
        if self.focus_box is None:
            return [self.source, self.ref]
        return [self.source, self.ref, list(self.focus_box)]


class ItemList(Sequence[ItemRequest]):
    """A request's items as three columns — sources, refs, and the focus boxes of the few items
    that have one, by position — read as a sequence of `ItemRequest`s (made on access).

    `payload_texts` and `fingerprint_json` give exactly what `json.dumps` gives for each item's
    `payload()` and for the list of their `fingerprinted()` forms, from the encoded strings
    alone: a submission never builds a dict, list or object per item."""

    __slots__ = ("_focus", "_refs", "_sources")

    def __init__(
        self,
        sources: Sequence[str],
        refs: Sequence[str | None] | None = None,
        focus_boxes: Mapping[int, Sequence[object]] | None = None,
    ) -> None:
        """`refs` None: no item has one. `focus_boxes`: by position, checked by `focus_box`."""
        self._sources = list(sources)
        self._refs: list[str | None] = [None] * len(self._sources) if refs is None else list(refs)
        if len(self._refs) != len(self._sources):
            raise ValueError("an item list needs as many refs as sources")
        self._focus: dict[int, Box] = {}
        for index, values in sorted((focus_boxes or {}).items()):
            if not 0 <= index < len(self._sources):
                raise IndexError(f"focus box for item {index} of {len(self._sources)}")
            self._focus[index] = focus_box(values)

    @classmethod
    def of(cls, items: Iterable[ItemRequest]) -> ItemList:
        """The columns of `items` (already an `ItemList`: itself)."""
        if isinstance(items, ItemList):
            return items
        listed = list(items)
        focus = {i: item.focus_box for i, item in enumerate(listed) if item.focus_box is not None}
        return cls([i.source for i in listed], [i.ref for i in listed], focus)

    def __len__(self) -> int:
        return len(self._sources)

    @overload
    def __getitem__(self, index: int) -> ItemRequest: ...

    @overload
    def __getitem__(self, index: slice) -> ItemList: ...

    def __getitem__(self, index: int | slice) -> ItemRequest | ItemList:
        if isinstance(index, slice):
            positions = range(len(self))[index]
            return ItemList(
                [self._sources[i] for i in positions],
                [self._refs[i] for i in positions],
                {n: self._focus[i] for n, i in enumerate(positions) if i in self._focus},
            )
        position = range(len(self))[index]
        return ItemRequest(self._sources[position], self._refs[position], self._focus.get(position))

    def __iter__(self) -> Iterator[ItemRequest]:
        focus = self._focus
        for i, (source, ref) in enumerate(zip(self._sources, self._refs, strict=True)):
            yield ItemRequest(source, ref, focus.get(i))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ItemList):
            return NotImplemented
        return (self._sources, self._refs, self._focus) == (
            other._sources,
            other._refs,
            other._focus,
        )

    def __hash__(self) -> int:
        return hash((tuple(self._sources), tuple(self._refs), tuple(sorted(self._focus.items()))))

    def __add__(self, other: ItemList) -> ItemList:
        shifted = {len(self) + i: box for i, box in other._focus.items()}
        return ItemList(
            self._sources + other._sources, self._refs + other._refs, {**self._focus, **shifted}
        )

    def __repr__(self) -> str:
        return f"ItemList({len(self)} items)"

    @property
    def sources(self) -> Sequence[str]:
        """Every item's source, in order."""
        return self._sources

    def unstorable(self) -> tuple[int, str, str] | None:
        """The first item whose source or ref the API would refuse (`storable_text`, the
        length limits), as (position, "source" or "ref", reason); None when all are fine."""
        found = []
        for column, texts, chars_max in (
            ("source", self._sources, SOURCE_CHARS_MAX),
            ("ref", [ref or "" for ref in self._refs], REF_CHARS_MAX),
        ):
            problem = unstorable(texts, chars_max)
            if problem is not None:
                found.append((problem[0], column, problem[1]))
        return min(found, default=None)

    def payload_texts(self) -> Iterator[str]:
        """Each item's lease payload as JSON text: `json.dumps(item.payload())`."""
        encoded, focus = encode_basestring_ascii, self._focus
        for i, (source, ref) in enumerate(zip(self._sources, self._refs, strict=True)):
            text = (
                f'{{"source": {encoded(source)}, "ref": {"null" if ref is None else encoded(ref)}'
            )
            if i in focus:
                yield f'{text}, "focus_box": {_box_text(focus[i])}}}'
            else:
                yield text + "}"

    def fingerprint_json(self) -> str:
        """The items' part of the request fingerprint: `json.dumps` of the list of every item's
        `fingerprinted()` form, byte for byte (ADR 0023: fingerprints are unchanged)."""
        encoded, focus = encode_basestring_ascii, self._focus
        parts = [
            f"[{encoded(source)}, {'null' if ref is None else encoded(ref)}]"
            for source, ref in zip(self._sources, self._refs, strict=True)
        ]
        for i, box in focus.items():
            parts[i] = f"{parts[i][:-1]}, {_box_text(box)}]"
        return "[" + ", ".join(parts) + "]"


def _box_text(box: Box) -> str:
    left, top, right, bottom = box
    return f"[{left}, {top}, {right}, {bottom}]"


IDS_PER_DRAW = 4096
"""Item ids made per draw from the OS's random source (one system call, not one per item)."""
_COUNTER_BITS = 26
_LOW_HEX = [f"{n:03x}" for n in range(4096)]


def time_ordered_uuids() -> Iterator[str]:
    """Endless item ids: version 7 UUIDs (RFC 9562) in canonical text, strictly increasing in
    the order drawn, so that an index on them grows at its end rather than at a random page.

    The 48-bit timestamp is the generator's first draw (milliseconds); a 26-bit counter follows
    (RFC 9562 method 1: in `rand_a` and the top of `rand_b`; past 2**26 ids the timestamp moves
    on by one), then 48 random bits. Ids of one submission share their first 14 to 20 hex
    digits, so an id prefix that names one of them is longer than with random ids."""
    stamp = time.time_ns() // 1_000_000
    counter = 0
    while True:
        randomness = os.urandom(6 * IDS_PER_DRAW).hex()
        at = 0
        while at < len(randomness):
            if counter == 1 << _COUNTER_BITS:
                stamp, counter = stamp + 1, 0
            high = f"{stamp:012x}"
            # Up to 4,096 ids share everything but the counter's low 12 bits and the randomness.
            prefix = f"{high[:8]}-{high[8:]}-7{counter >> 14:03x}-{8 | (counter >> 12) & 3:x}"
            run = min(4096 - (counter & 0xFFF), (len(randomness) - at) // 12)
            for low in range(counter & 0xFFF, (counter & 0xFFF) + run):
                yield f"{prefix}{_LOW_HEX[low]}-{randomness[at : at + 12]}"
                at += 12
            counter += run

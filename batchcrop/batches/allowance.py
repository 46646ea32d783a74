"""How many failed items a batch tolerates (docs/design.md §4): `--allow-failures N` or `P%`,
given at submission and stored with the batch as its canonical text."""

from __future__ import annotations

import math
import re
from fractions import Fraction

ALLOW_FAILURES_COUNT_MAX = 100_000
"""The largest count accepted: a batch holds at most this many items (`ITEMS_PER_BATCH_MAX`)."""

_COUNT = re.compile(r"[0-9]{1,6}")
_PERCENT = re.compile(r"([0-9]{1,3}(?:\.[0-9]{1,2})?)%")
ALLOW_FAILURES_HELP = (
    "a whole number of items (0 to 100000) or a percentage of the batch's items "
    "(0% to 100%, two decimals at most), e.g. 5 or 2.5%"
)


def allow_failures_text(given: str | int) -> str:
    """The canonical stored form of an allowance (`"5"`, `"2.5%"`); ValueError (the CLI's
    usage error, the API's 422 naming `allow_failures`) for anything else, such as a negative
    count, a percentage above 100 or a fraction of an item."""
    text = str(given).strip() if not isinstance(given, bool) else ""
    count = _COUNT.fullmatch(text)
    if count is not None and int(text) <= ALLOW_FAILURES_COUNT_MAX:
        return str(int(text))
    percent = _PERCENT.fullmatch(text)
    if percent is not None and Fraction(percent.group(1)) <= 100:
        return f"{float(Fraction(percent.group(1))):g}%"
    raise ValueError(f"allow_failures must be {ALLOW_FAILURES_HELP}; not {str(given)!r}")


def failures_allowed(text: str | None, total: int) -> int:
    """How many of a batch's `total` items may fail with the batch still `succeeded`: the count,
    or the percentage of `total` rounded down (5% of 164 items: 8). 0 without an allowance."""
    if text is None:
        return 0
    if text.endswith("%"):
        return math.floor(Fraction(text[:-1]) * total / 100)
    return int(text)

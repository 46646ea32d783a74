"""Prose that stays true: a number written beside a constant's name is the constant's value, and
the ADR index lists every record with the status its `Status:` line gives."""

from __future__ import annotations

import importlib
import re
from dataclasses import fields
from fractions import Fraction
from pathlib import Path

from batchcrop.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("batchcrop", "leases", "storage")
PROSE = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py")),
]
"""Living prose: ADRs and the changelog record what was true when written, and are left out."""

NAME = r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`"
NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
UNIT = r"(?: ?(px|ms|s|h|d|MiB|characters)\b)?"
NAME_THEN_NUMBER = re.compile(NAME + r"(?: \(|, )" + NUMBER + UNIT)
"""`` `NAME` (256 px) `` or `` `NAME`, 900 s ``."""
NUMBER_THEN_NAME = re.compile(r"(?<![\w.])" + NUMBER + UNIT + r" \(" + NAME + r"[),]")
"""``900 (`NAME`)`` or ``1024 (`NAME`,``."""
UNIT_VALUES = {"ms": Fraction(1, 1000), "h": Fraction(3600), "d": Fraction(86400)}
"""Units a `_SECONDS` constant may be written in; MiB is a byte count's unit."""


def _definitions() -> dict[str, str]:
    """Each module-level constant of the three packages → the module that assigns it."""
    found: dict[str, str] = {}
    assignment = re.compile(r"^([A-Z][A-Z0-9_]+)(?:: [^=]+)? = ", re.MULTILINE)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for match in assignment.finditer(path.read_text(encoding="utf-8")):
                found.setdefault(match.group(1), module)
    return found


def _written_value(name: str, number: str, unit: str | None) -> Fraction:
    value = Fraction(number.replace(",", ""))
    if unit == "MiB" and not name.endswith("_MIB"):
        return value * 1024 * 1024
    if name.endswith("_SECONDS") and unit in UNIT_VALUES:
        return value * UNIT_VALUES[unit]
    return value


def _mentions() -> list[tuple[str, str, str, str | None]]:
    """(where, constant, number, unit) for every number written beside a constant's name."""
    mentions = []
    for path in PROSE:
        text = " ".join(path.read_text(encoding="utf-8").split())
        where = str(path.relative_to(ROOT))
        for match in NAME_THEN_NUMBER.finditer(text):
            mentions.append((where, match.group(1), match.group(2), match.group(3)))
        for match in NUMBER_THEN_NAME.finditer(text):
            mentions.append((where, match.group(3), match.group(1), match.group(2)))
    return mentions


def test_numbers_beside_constant_names_are_their_values() -> None:
    """Wherever the docs or comments write a constant's name with a number (`FACE_SEARCH_SIDE_PX`
    (256 px)), the constant exists and has that value; beside a variable's name, the number is
    its setting's default."""
    definitions = _definitions()
    defaults = {f.name: f.default for f in fields(Settings) if isinstance(f.default, (int, float))}
    mentions = _mentions()
    wrong = []
    for where, name, number, unit in mentions:
        if name.startswith("BATCHCROP_"):
            # A variable: its default is the setting's (a variable that is no setting, such as
            # BATCHCROP_LOG_LEVEL, is left to its own tests).
            setting = name.removeprefix("BATCHCROP_").lower()
            if setting in defaults and Fraction(defaults[setting]) != _written_value(
                name, number, unit
            ):
                wrong.append(f"{where}: `{name}` defaults to {defaults[setting]}, written {number}")
            continue
        if name not in definitions:
            wrong.append(f"{where}: `{name}` is no constant of {', '.join(PACKAGES)}")
            continue
        actual = getattr(importlib.import_module(definitions[name]), name)
        if Fraction(actual) != _written_value(name, number, unit):
            wrong.append(f"{where}: `{name}` is {actual}, written as {number} {unit or ''}")
    assert len(mentions) > 30, mentions  # the patterns still find the docs' mentions
    assert wrong == []


ADR_DIR = ROOT / "docs" / "adr"
STATUS_LINE = re.compile(
    r"^Status: accepted(?:; amended by ADR ([\d, ]+)|; superseded by ADR (\d+))?"
)
INDEX_ROW = re.compile(
    r"^\| \[(\d{4})\]\((\S+)\) \| (.+) \| (Accepted|Amended by [\d, ]+|Superseded by \d+) \|$"
)


def test_the_adr_index_lists_every_record_with_its_status() -> None:
    """docs/adr/README.md has one row per record, titled as the record, with the status its
    `Status:` line states."""
    rows = {}
    for line in (ADR_DIR / "README.md").read_text(encoding="utf-8").splitlines():
        match = INDEX_ROW.match(line)
        if match:
            rows[match.group(1)] = match.groups()[1:]
    records = {}
    for path in sorted(ADR_DIR.glob("[0-9][0-9][0-9][0-9]-*.md")):
        lines = path.read_text(encoding="utf-8").splitlines()
        status = next(
            (STATUS_LINE.match(line) for line in lines[:6] if line.startswith("Status:")), None
        )
        assert status is not None, f"{path.name} has no Status: line"
        amended, superseded = status.groups()
        expected = (
            f"Superseded by {superseded}"
            if superseded
            else f"Amended by {amended}"
            if amended
            else "Accepted"
        )
        records[path.name[:4]] = (path.name, lines[0].split(" — ", 1)[1], expected)
    assert rows == records

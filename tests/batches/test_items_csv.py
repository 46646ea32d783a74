"""`--items-csv`: sources, refs and the optional focus columns, and the usage errors they raise."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from batchcrop.cli.commands import UsageError, _csv_items
from batchcrop.crop import IMAGE_SUFFIXES
from storage import SourceReader

FOCUS_HEADER = ["source", "ref", "focus_left", "focus_top", "focus_right", "focus_bottom"]


def _write(tmp_path: Path, header: list[str], rows: list[list[str]]) -> str:
    path = tmp_path / "items.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def _read(path: str) -> list[tuple[str, str | None, tuple[int, int, int, int] | None]]:
    items = _csv_items(path, SourceReader(None, suffixes=IMAGE_SUFFIXES))
    return [(Path(i.source).name, i.ref, i.focus_box) for i in items]


def test_all_four_focus_columns_or_none(tmp_path: Path) -> None:
    """A row with all four focus columns gets a focus box; a row with none gets no box."""
    path = _write(
        tmp_path,
        FOCUS_HEADER,
        [
            ["/photos/a.jpg", "sku-a", "10", "20", "300", " 400 "],
            ["/photos/b.jpg", "sku-b", "", "", "", ""],
            ["/photos/c.jpg", "", "0", "0", "1", "1"],
        ],
    )
    assert _read(path) == [
        ("a.jpg", "sku-a", (10, 20, 300, 400)),
        ("b.jpg", "sku-b", None),
        ("c.jpg", None, (0, 0, 1, 1)),
    ]


def test_a_csv_without_focus_columns_still_reads(tmp_path: Path) -> None:
    """The columns are optional: the CSVs written before focus boxes read as they did."""
    path = _write(tmp_path, ["source", "ref"], [["/photos/a.jpg", "sku-a"]])
    assert _read(path) == [("a.jpg", "sku-a", None)]


@pytest.mark.parametrize(
    ("focus", "needle"),
    [
        (["10", "20", "300", ""], "row 3: focus_bottom has no value: give all four"),
        (["", "20", "", ""], "row 3: focus_left has no value: give all four"),
        (["10", "twenty", "300", "400"], "row 3: focus_top must be a whole number"),
        (["10", "20", "300.5", "400"], "row 3: focus_right must be a whole number"),
        (["10", "20", "１２３", "400"], "row 3: focus_right must be a whole number"),
        (["10", "20", "1e3", "400"], "row 3: focus_right must be a whole number"),
        (["-1", "20", "300", "400"], "row 3: focus_left: left must be in 0.."),
        (["10", "20", "300", "99999999999"], "row 3: focus_bottom: bottom must be in 0.."),
        (["300", "20", "10", "400"], "row 3: focus_right: right must be greater than left"),
        (["10", "400", "300", "400"], "row 3: focus_bottom: bottom must be greater than top"),
    ],
)
def test_bad_focus_columns_are_usage_errors_naming_row_and_column(
    tmp_path: Path, focus: list[str], needle: str
) -> None:
    """Partial, non-numeric or impossible focus columns: a usage error (exit 2) naming the file,
    the row (its line in the file) and the column."""
    path = _write(
        tmp_path,
        FOCUS_HEADER,
        [["/photos/a.jpg", "sku-a", "1", "2", "3", "4"], ["/photos/b.jpg", "sku-b", *focus]],
    )
    with pytest.raises(UsageError) as raised:
        _read(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert needle in str(raised.value)


def test_a_header_with_some_focus_columns_names_the_missing_one(tmp_path: Path) -> None:
    """A CSV with only some of the four columns fails on the first row that uses them."""
    path = _write(
        tmp_path,
        ["source", "focus_left", "focus_top", "focus_right"],
        [["/photos/a.jpg", "", "", ""], ["/photos/b.jpg", "1", "2", "3"]],
    )
    with pytest.raises(UsageError, match="row 3: focus_bottom has no value"):
        _read(path)


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        (["/photos/b.jpg", "sku\0b"], "row 4: ref must not contain NUL characters"),
        (["/photos/b.jpg", "\x1b[31mred"], "row 4: ref must not contain control characters"),
        (["/photos/b\x85.jpg", "sku-b"], "row 4: source must not contain control characters"),
        (["/photos/b.jpg", "é" * 257], "row 4: ref is longer than 256 characters"),
        (["/photos/" + "b" * 4100 + ".jpg", ""], "row 4: source is longer than 4096"),
    ],
)
def test_texts_the_api_refuses_are_usage_errors_naming_the_row(
    tmp_path: Path, row: list[str], needle: str
) -> None:
    """The CSV's sources and refs obey the API's rules (no NUL, which PostgreSQL cannot store,
    no control characters, the same lengths), and the error names the row an editor shows:
    here the fourth line, after a blank one."""
    path = _write(tmp_path, ["source", "ref"], [["/photos/a.jpg", "sku-a"], [], row])
    with pytest.raises(UsageError, match=needle):
        _read(path)


def test_a_csv_starting_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    """A spreadsheet's "CSV UTF-8" export begins with U+FEFF; its first column is still
    `source`."""
    path = tmp_path / "excel.csv"
    path.write_bytes("source,ref\r\n/photos/a.jpg,sku-a\r\n".encode("utf-8-sig"))
    assert _read(str(path)) == [("a.jpg", "sku-a", None)]

"""`status --watch`: rate, ETA, quiet time, fleet, and a database outage waited out."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from batchcrop.cli import reporting
from leases import DatabaseUnavailable


def _document(done: int, total: int = 10) -> dict[str, Any]:
    counts = dict.fromkeys(
        ("queued", "in_progress", "retryable", "succeeded", "failed", "abandoned"), 0
    )
    counts["succeeded"], counts["queued"] = done, total - done
    return {
        "id": "b",
        "state": "succeeded" if done == total else "in_progress",
        "cancel_requested": False,
        "ratios": ["1:1"],
        "max_side": 1200,
        "quality": 85,
        "formats": ["jpeg"],
        "total": total,
        "counts": counts,
        "failures": {},
        "created_at": "2026-01-01T00:00:00.000Z",
        "deadline_at": "2026-01-02T00:00:00.000Z",
        "terminal_reason": None,
    }


def _text(table: Any) -> str:
    console = Console(file=io.StringIO(), width=200)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_watch_rides_out_an_outage_and_shows_the_fleet() -> None:
    """A read failing with DatabaseUnavailable is shown and retried; the watch ends normally
    at the terminal document, having shown rate, ETA and leases held by absent workers."""
    replies: list[Any] = [
        _document(2),
        DatabaseUnavailable("connection refused"),
        _document(6),
        _document(10),
    ]
    shown: list[str] = []
    original = reporting.watch_table

    def spy(document: dict[str, Any], state: reporting.WatchState) -> Any:
        table = original(document, state)
        shown.append(_text(table))
        return table

    def read() -> dict[str, Any]:
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return dict(reply)

    fleet = {"alive": 1, "held_by_alive": 1, "held_by_absent": 2}
    reporting.watch_table = spy  # type: ignore[assignment]
    try:
        final = reporting.watch(read, fleet=lambda: fleet, interval_seconds=0.01, stderr=True)
    finally:
        reporting.watch_table = original  # type: ignore[assignment]
    assert final["state"] == "succeeded"
    assert any("database" in t and "connection refused" in t and "retrying" in t for t in shown)
    assert any("items/s" in t and "eta" in t for t in shown)
    assert any("2 leases held by workers no longer seen" in t for t in shown)
    assert any("1 alive" in t for t in shown)
    assert "last change" in shown[-1]


def test_the_first_read_dates_the_last_change_from_the_document() -> None:
    """A watch started on a batch idle for ten minutes says so, not "0 s ago": the last change
    of the first read is the document's `updated_at`."""
    state = reporting.WatchState()
    ten_minutes_ago = datetime.now(UTC) - timedelta(minutes=10)
    document = {**_document(3), "updated_at": ten_minutes_ago.isoformat().replace("+00:00", "Z")}
    state.observe(document)
    shown = _text(reporting.watch_table(document, state))
    assert "last change │ 600 s ago" in shown or "last change │ 601 s ago" in shown, shown


def test_the_progress_bar_notes_items_held_by_another_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run`'s bar says when items stay in progress that it is not processing (a killed earlier
    run's, waiting for the worker timeout), instead of sitting still without a word; a
    momentary count (an item just claimed) is not noted."""
    shown = io.StringIO()
    monkeypatch.setattr(
        reporting,
        "_console",
        lambda stderr=False: Console(file=shown, force_terminal=True, width=200),
    )
    with reporting.progress_bar(enabled=True, elsewhere_note="{} held elsewhere".format) as bar:
        bar(_document(3), 2)
    assert "held elsewhere" not in shown.getvalue()  # not yet for long
    monkeypatch.setattr(reporting, "ELSEWHERE_NOTE_SECONDS", 0.0)
    with reporting.progress_bar(enabled=True, elsewhere_note="{} held elsewhere".format) as bar:
        bar(_document(3), 2)
    assert "2 held elsewhere" in shown.getvalue()

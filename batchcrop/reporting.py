"""Human output of the CLI: progress bar, summary table, listings. Documents go to stdout
only with `--json`; the progress bar draws on stderr."""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from leases import TERMINAL, State

WATCH_INTERVAL_SECONDS = 2.0


# Bidirectional overrides and isolates can make a line read as something it does not say.
_BIDI_CONTROLS = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def literal(value: object) -> Text:
    """`value` as plain text for the terminal: never markup, and every control character
    (escape sequences, carriage returns, bidi overrides) shown as a visible escape instead of
    acting on the terminal. Documents carry strings the API accepted from clients (refs,
    sources, reasons), so every cell goes through here."""
    text = "" if value is None else str(value)
    shown = "".join(
        ascii(c)[1:-1] if unicodedata.category(c) == "Cc" or c in _BIDI_CONTROLS else c
        for c in text
    )
    return Text(shown)


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _done(document: dict[str, Any]) -> int:
    return sum(int(document["counts"][s.value]) for s in TERMINAL)


@contextmanager
def progress_bar(*, enabled: bool) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A progress bar on stderr fed with status documents: done/total, rate, failures."""
    if not enabled:
        yield lambda document: None
        return
    started = time.monotonic()
    first_done: list[int] = []
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("{task.fields[failures]}"),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=False,
    )
    task = progress.add_task("cropping", total=None, rate="", failures="")

    def update(document: dict[str, Any]) -> None:
        done = _done(document)
        if not first_done:
            first_done.append(done)
        elapsed = max(time.monotonic() - started, 1e-6)
        rate = (done - first_done[0]) / elapsed
        bad = sum(document["counts"][s.value] for s in TERMINAL if s is not State.SUCCEEDED)
        progress.update(
            task,
            total=document["total"],
            completed=done,
            rate=f"{rate:.1f} items/s",
            failures=f"[red]{bad} failed[/red]" if bad else "0 failed",
        )

    with progress:
        yield update


def status_table(document: dict[str, Any]) -> Table:
    """The status document as a small table."""
    table = Table(title=literal(f"batch {document['id']}"), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "state",
        literal(
            document["state"] + (" (cancel requested)" if document["cancel_requested"] else "")
        ),
    )
    table.add_row("items", f"{_done(document)}/{document['total']} done")
    for name, n in document["counts"].items():
        if n:
            table.add_row(f"  {name}", str(n))
    for category, n in document["failures"].items():
        table.add_row(literal(f"  failure: {category}"), str(n))
    table.add_row("ratios", literal(", ".join(document["ratios"])))
    table.add_row("created", literal(document["created_at"]))
    table.add_row("deadline", literal(document["deadline_at"]))
    if document["terminal_reason"]:
        table.add_row("result", literal(document["terminal_reason"]))
    return table


def print_status(document: dict[str, Any], *, out_dir: str | None = None) -> None:
    """Print the status table, and where the derivatives went when known."""
    console = _console()
    console.print(status_table(document))
    if out_dir:
        console.print(literal(f"Derivatives are under {out_dir}/derivatives/"))
        console.print(literal(f"Details: batchcrop items {document['id']}"))


def print_batches(documents: Sequence[dict[str, Any]]) -> None:
    """One line per batch."""
    table = Table("id", "state", "done/total", "failures", "created", "deadline")
    for d in documents:
        failures = ", ".join(f"{k}: {v}" for k, v in d["failures"].items())
        cells = (d["id"], d["state"], f"{_done(d)}/{d['total']}", failures)
        table.add_row(*map(literal, (*cells, d["created_at"], d["deadline_at"])))
    _console().print(table)


def print_items(documents: Sequence[dict[str, Any]]) -> None:
    """One line per item; `focus` is the item's focus box as left,top,right,bottom."""
    table = Table("id", "ref", "focus", "state", "attempt", "error", "derivatives")
    for d in documents:
        focus = ",".join(map(str, d["focus_box"])) if d.get("focus_box") else None
        cells = (d["id"], d["ref"], focus, d["state"], d["attempt"], d["error_category"])
        table.add_row(*map(literal, cells), str(len(d["derivatives"])))
    _console().print(table)


def print_events(documents: Sequence[dict[str, Any]]) -> None:
    """One line per transition."""
    table = Table("at", "item", "attempt", "from", "to", "reason", "worker")
    for d in documents:
        cells = (
            d["at"],
            d["item_id"],
            d["attempt"],
            d["from_state"],
            d["to_state"],
            d["reason"],
            d["worker_id"],
        )
        table.add_row(*map(literal, cells))
    _console().print(table)


def watch(read: Callable[[], dict[str, Any]], *, stderr: bool = False) -> dict[str, Any]:
    """Redraw the status until the batch is terminal; returns the last document.

    With `stderr` the table is drawn there, leaving stdout to a JSON document.
    """
    document = read()
    console = _console(stderr=stderr)
    with Live(status_table(document), console=console, auto_refresh=False) as live:
        while document["state"] not in TERMINAL:
            time.sleep(WATCH_INTERVAL_SECONDS)
            document = read()
            live.update(status_table(document), refresh=True)
    return document

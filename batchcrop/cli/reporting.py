"""Human output of the CLI: progress bar, summary table, listings. Documents go to stdout
only with `--json`; the progress bar draws on stderr."""

from __future__ import annotations

import time
import unicodedata
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from batchcrop.batches.documents import parse_iso
from leases import TERMINAL, DatabaseUnavailable, State

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


ID_CHARS = 36
"""A UUID's length: id columns are never narrower, so a table never cuts an id (other columns
wrap instead), and an id can be copied whole from any terminal width."""


def _show(
    columns: Sequence[str],
    rows: Sequence[Sequence[Text]],
    *,
    ids: Sequence[str] = ("id",),
    folded: Sequence[str] = ("source",),
) -> None:
    """Print `rows` as a table when every cell fits on one line of the terminal (or the
    output's 80 columns), else as a stack of `name  value` records, one per row, each value
    whole on its line: a table squeezed narrower than its cells wraps them a character per
    line. In the table, id columns (`ids`) keep every id whole and on one line; long free text
    (`folded`) wraps first, so short columns (states, counts) stay readable."""
    console = _console()
    natural = [len(name) for name in columns]
    for row in rows:
        for i, cell in enumerate(row):
            natural[i] = max(natural[i], cell.cell_len)
    # Free text may wrap inside its column: it needs only a readable width, not its length.
    natural = [
        min(width, FOLDED_WIDTH) if name in folded else width
        for name, width in zip(columns, natural, strict=True)
    ]
    if sum(natural) + 3 * len(columns) + 1 <= console.width:
        table = _table(columns, ids, folded)
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    width = max(len(name) for name in columns)
    for n, row in enumerate(rows):
        if n:
            console.print()
        for name, cell in zip(columns, row, strict=True):
            if cell.plain:
                console.print(Text(f"{name:<{width}}  ") + cell)


FOLDED_WIDTH = 24
"""The width a wrapping column (a source, a message) needs for a table to be chosen."""


def _table(columns: Sequence[str], ids: Sequence[str], folded: Sequence[str]) -> Table:
    table = Table()
    for name in columns:
        if name in ids:
            table.add_column(name, no_wrap=True, min_width=ID_CHARS)
        elif name in ("state", "status"):
            table.add_column(name, no_wrap=True, min_width=len("in_progress"))
        elif name in folded:
            table.add_column(name, overflow="fold", ratio=1)
        else:
            table.add_column(name, overflow="fold")
    return table


class _Console(Console):
    """Rich's console, whose broken pipe is the CLI's: Rich's own ends the process with exit 1,
    which reads as a failed command; `cli.main` exits 141 (128 + SIGPIPE), as `--json` does."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def _console(stderr: bool = False) -> Console:
    return _Console(stderr=stderr, highlight=False, soft_wrap=True)


def _done(document: dict[str, Any]) -> int:
    return sum(int(document["counts"][s.value]) for s in TERMINAL)


ELSEWHERE_NOTE_SECONDS = 2.0
"""Items held elsewhere are noted once they have stayed this long (an item claimed by this run
is counted in progress a moment before its attempt starts)."""


@contextmanager
def progress_bar(
    *, enabled: bool, elsewhere_note: Callable[[int], str]
) -> Iterator[Callable[[dict[str, Any], int], None]]:
    """A progress bar on stderr fed with status documents and how many in-progress items are
    held by other processes: done/total, rate, failures, and `elsewhere_note(count)` once such
    items have stayed for `ELSEWHERE_NOTE_SECONDS`."""
    if not enabled:
        yield lambda document, elsewhere: None
        return
    elsewhere_since: list[float] = []
    started = time.monotonic()
    first_done: list[int] = []
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("{task.fields[failures]}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[elsewhere]}"),
        console=_console(stderr=True),
        transient=False,
    )
    task = progress.add_task("cropping", total=None, rate="", failures="", elsewhere="")

    def update(document: dict[str, Any], elsewhere: int) -> None:
        done = _done(document)
        now = time.monotonic()
        if elsewhere <= 0:
            elsewhere_since.clear()
        elif not elsewhere_since:
            elsewhere_since.append(now)
        noted = bool(elsewhere_since) and now - elsewhere_since[0] >= ELSEWHERE_NOTE_SECONDS
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
            elsewhere=f"[yellow]{elsewhere_note(elsewhere)}[/yellow]" if noted else "",
        )

    with progress:
        yield update


def status_table(document: dict[str, Any]) -> Table:
    """The status document as a small table."""
    table = Table(title=literal(f"batch {document['id']}"), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    if document.get("label"):
        table.add_row("label", literal(document["label"]))
    table.add_row(
        "state",
        literal(
            document["state"]
            + (" (cancel requested)" if document["cancel_requested"] else "")
            + (" (paused)" if document.get("paused") else "")
        ),
    )
    if document.get("priority"):
        table.add_row("priority", literal(document["priority"]))
    table.add_row("items", f"{_done(document)}/{document['total']} done")
    for name, n in document["counts"].items():
        if n:
            table.add_row(f"  {name}", str(n))
    for category, n in document["failures"].items():
        table.add_row(literal(f"  failure: {category}"), str(n))
    table.add_row("ratios", literal(", ".join(document["ratios"])))
    table.add_row("formats", literal(", ".join(document["formats"])))
    table.add_row("max side", literal(f"{document['max_side']} px"))
    table.add_row("quality", literal(document["quality"]))
    if document.get("allow_failures") is not None:
        allowed = f"{document['failures_allowed']} ({document['allow_failures']})"
        table.add_row("failures allowed", literal(allowed))
    if document.get("store"):
        table.add_row("store", literal(document["store"]))
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
    rows = []
    for d in documents:
        failures = ", ".join(f"{k}: {v}" for k, v in d["failures"].items())
        cells = (d["id"], d.get("label"), d["state"], f"{_done(d)}/{d['total']}", failures)
        rows.append([literal(c) for c in (*cells, d["created_at"], d["deadline_at"])])
    if not rows:
        _console().print("no batches")
        return
    _show(("id", "label", "state", "done/total", "failures", "created", "deadline"), rows)


def print_items(documents: Sequence[dict[str, Any]]) -> None:
    """One line per item; `focus` is the item's focus box as left,top,right,bottom."""
    rows = []
    for d in documents:
        focus = ",".join(map(str, d["focus_box"])) if d.get("focus_box") else None
        cells = (
            d["id"], d["ref"], d["source"], focus, d["state"], d["attempt"], d["error_category"],
            d["error_message"],
        )  # fmt: skip
        rows.append([*map(literal, cells), literal(len(d["derivatives"]))])
    if not rows:
        _console().print("no items")
        return
    _show(
        ("id", "ref", "source", "focus", "state", "attempt", "error", "message", "derivatives"),
        rows,
        folded=("source", "message"),
    )


def print_events(documents: Sequence[dict[str, Any]]) -> None:
    """One line per transition: with its worker, lease token and correlation id (to find the
    attempt's log lines), and a failed attempt's message; an operator re-crop's reason shows its
    focus box."""
    rows = []
    for d in documents:
        reason = d["reason"]
        if d.get("focus_box"):
            reason = f"{reason} {','.join(map(str, d['focus_box']))}"
        cells = (
            d["at"],
            d["item_id"],
            d["attempt"],
            d["from_state"],
            d["to_state"],
            reason,
            d["message"],
            d["worker_id"],
            d["lease_token"],
            d["correlation_id"],
        )
        rows.append([literal(c) for c in cells])
    _show(
        (
            "at", "item", "attempt", "from", "to", "reason", "message", "worker", "lease token",
            "correlation",
        ),
        rows,
        ids=("item",),
        folded=("message", "worker"),
    )  # fmt: skip


def print_workers(documents: Sequence[dict[str, Any]]) -> None:
    """One line per worker of the registry: whether it is alive, where, and what it holds."""
    rows = []
    for d in documents:
        seen = None if d["seen_seconds_ago"] is None else f"{d['seen_seconds_ago']:g} s ago"
        batches = "all" if d["status"] != "unregistered" and not d["batch_ids"] else d["batch_ids"]
        cells = (
            d["id"], d["status"], d["host"], d["pid"], d["version"], seen, d["concurrency"],
            ",".join(batches) if isinstance(batches, list) else batches, d["store"],
            d.get("store_max_concurrent"), d["leases_held"], d["held_not_in_flight"],
            d["oldest_lease_at"],
        )  # fmt: skip
        rows.append([literal(c) for c in cells])
    _show(
        (
            "id", "status", "host", "pid", "version", "seen", "slots", "batches", "store",
            "store limit", "held", "not in flight", "oldest lease",
        ),
        rows,
    )  # fmt: skip
    if not documents:
        _console().print("no worker is registered and no lease is held")


def _age_seconds(iso_time: str | None) -> float:
    """Seconds since `iso_time` (a document's UTC time, "…Z"), at least 0; 0 when absent."""
    if not iso_time:
        return 0.0
    return max(0.0, (datetime.now(UTC) - parse_iso(iso_time)).total_seconds())


@dataclass
class WatchState:
    """What `status --watch` knows besides the document: recent progress samples (for the
    rate and ETA), when the done count last moved, the fleet, and an ongoing outage."""

    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=30))
    changed_at: float = field(default_factory=time.monotonic)
    fleet: dict[str, int] | None = None
    outage_since: float | None = None
    outage_reason: str = ""

    def observe(self, document: dict[str, Any]) -> None:
        """Record one successful read."""
        now, done = time.monotonic(), _done(document)
        if not self.samples:
            # The first read: the batch last changed when its document says, not when the
            # watch began (clamped: the database's clock may run ahead of this machine's).
            self.changed_at = now - _age_seconds(document.get("updated_at"))
        elif self.samples[-1][1] != done:
            self.changed_at = now
        self.samples.append((now, done))
        self.outage_since = None

    def rate(self) -> float | None:
        """Items finished per second over the recent samples (None before two samples)."""
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None


def watch_table(document: dict[str, Any], state: WatchState) -> Table:
    """The status table with the watch's own rows: rate, ETA, quiet time, fleet, outage."""
    table = status_table(document)
    rate = state.rate()
    left = document["total"] - _done(document)
    if rate is not None:
        table.add_row("rate", f"{rate:.2f} items/s")
        if document["state"] not in TERMINAL:
            eta = f"{left / rate:.0f} s" if rate > 0 else "unknown (no progress)"
            table.add_row("eta", eta)
    table.add_row("last change", f"{time.monotonic() - state.changed_at:.0f} s ago")
    if state.fleet is not None:
        table.add_row(
            "workers",
            f"{state.fleet['alive']} alive, holding {state.fleet['held_by_alive']} of this batch",
        )
        if state.fleet["held_by_absent"]:
            table.add_row(
                Text("  not seen", style="bold red"),
                Text(
                    f"{state.fleet['held_by_absent']} leases held by workers no longer seen",
                    style="red",
                ),
            )
    if state.outage_since is not None:
        waited = time.monotonic() - state.outage_since
        table.add_row(
            Text("database", style="bold red"),
            literal(f"unavailable for {waited:.0f} s ({state.outage_reason}); retrying"),
        )
    return table


def watch(
    read: Callable[[], dict[str, Any]],
    *,
    stderr: bool = False,
    fleet: Callable[[], dict[str, int]] | None = None,
    interval_seconds: float = WATCH_INTERVAL_SECONDS,
) -> dict[str, Any]:
    """Redraw the status until the batch is terminal; returns the last document.

    Shows the rate and ETA over the last minute of samples, the time since the done count last
    moved and, with `fleet`, the live workers and the leases held by workers no longer seen. A
    database outage is shown and waited out (the last table stays up), never a reason to exit.
    With `stderr` the table is drawn there, leaving stdout to a JSON document.
    """
    state = WatchState()
    document = read()
    state.observe(document)
    console = _console(stderr=stderr)
    with Live(watch_table(document, state), console=console, auto_refresh=False) as live:
        while document["state"] not in TERMINAL:
            time.sleep(interval_seconds)
            try:
                document = read()
                state.observe(document)
                state.fleet = fleet() if fleet is not None else None
            except DatabaseUnavailable as exc:
                if state.outage_since is None:
                    state.outage_since = time.monotonic()
                state.outage_reason = (str(exc).splitlines() or ["unreachable"])[0]
            live.update(watch_table(document, state), refresh=True)
    return document

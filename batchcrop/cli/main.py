"""The `batchcrop` command line (docs/design.md §7 is its contract): parsing and exit codes.

Each `BATCHCROP_X_Y` variable has its flag `--x-y` on every command it applies to; the flag wins.
Errors are one line on stderr and an exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

# Only light modules here: `--help`, `--version` and reading commands must start fast
# (`bench/startup.py`). The commands, and whatever they need, are imported when one runs.
from batchcrop import __version__
from batchcrop.batches.allowance import allow_failures_text
from batchcrop.callbacks.hosts import PORT_MAX
from batchcrop.cli.exit_codes import Exit
from batchcrop.crop.fields import RenderField
from batchcrop.crop.spec import RenderSpec
from batchcrop.errors import FieldError
from batchcrop.renders.defaults import RENDER_DEADLINE_SECONDS
from batchcrop.settings import (
    CALLBACK_RETRY_SECONDS,
    CONCURRENCY,
    DATABASE_URL,
    DEADLINE_SECONDS,
    DEADLINE_SECONDS_MAX,
    DECODE_MEMORY_MIB,
    FALLBACK_POLL_SECONDS,
    IDLE_POLL_SECONDS,
    MAX_ATTEMPTS,
    MAX_SOURCE_BYTES,
    REAPER_INTERVAL_SECONDS,
    SHUTDOWN_GRACE_SECONDS,
)
from leases.defaults import LEASE_SECONDS, MAX_ATTEMPT_SECONDS, WORKER_TIMEOUT_SECONDS
from leases.models import PRIORITY_MAX, PRIORITY_MIN, REQUEUEABLE, state_names

STATE_NAMES = state_names()
LOG_LEVEL_DEFAULT = "WARNING"
LOG_LEVEL_LONG_RUNNING = "INFO"
LONG_RUNNING_COMMANDS = frozenset({"worker", "serve"})
"""Commands that log at INFO unless told otherwise: their log is how an operator follows them."""
METRICS_HOST_DEFAULT = "127.0.0.1"
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a command whose reader went away (`| head`)."""


class _Commands:
    """`batchcrop.cli.commands`, imported only once a command runs (not to parse or show help):
    `commands.run` is a handler that imports the module and calls its `run`."""

    def __getattr__(self, name: str) -> Callable[[argparse.Namespace], int]:
        def handler(args: argparse.Namespace) -> int:
            from batchcrop.cli import commands as module  # noqa: PLC0415  (see the imports)

            function: Callable[[argparse.Namespace], int] = getattr(module, name)
            return function(args)

        return handler


commands = _Commands()

REQUEUEABLE_NAMES = ",".join(state_names(REQUEUEABLE))


def _database_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("database")
    g.add_argument(
        "--database-url",
        metavar="URL",
        help=f"BATCHCROP_DATABASE_URL (default {DATABASE_URL})",
    )
    g.add_argument(
        "--lease-seconds",
        type=float,
        metavar="S",
        help=f"BATCHCROP_LEASE_SECONDS (default {LEASE_SECONDS:g})",
    )
    g.add_argument(
        "--max-attempt-seconds",
        type=float,
        metavar="S",
        help=f"BATCHCROP_MAX_ATTEMPT_SECONDS (default {MAX_ATTEMPT_SECONDS:g})",
    )
    g.add_argument(
        "--reaper-interval-seconds",
        type=float,
        metavar="S",
        help=f"BATCHCROP_REAPER_INTERVAL_SECONDS (default {REAPER_INTERVAL_SECONDS:g})",
    )
    g.add_argument(
        "--worker-timeout-seconds",
        type=float,
        metavar="S",
        help="BATCHCROP_WORKER_TIMEOUT_SECONDS: a worker not seen this long is taken for dead and "
        f"its leases are released (default {WORKER_TIMEOUT_SECONDS:g})",
    )
    g.add_argument(
        "--idle-poll-seconds",
        type=float,
        metavar="S",
        help="BATCHCROP_IDLE_POLL_SECONDS: how often an idle worker slot or deliverer looks for "
        f"work on SQLite (default {IDLE_POLL_SECONDS:g})",
    )
    g.add_argument(
        "--fallback-poll-seconds",
        type=float,
        metavar="S",
        help="BATCHCROP_FALLBACK_POLL_SECONDS: how often it looks on PostgreSQL, where "
        f"notifications wake it (default {FALLBACK_POLL_SECONDS:g})",
    )


def _store_flags(p: argparse.ArgumentParser, *, with_store: bool = True) -> None:
    g = p.add_argument_group("storage")
    if with_store:
        g.add_argument(
            "--store", metavar="URL", help="BATCHCROP_STORE: file://DIR or s3://bucket/prefix"
        )
    g.add_argument(
        "--s3-endpoint-url",
        metavar="URL",
        help="BATCHCROP_S3_ENDPOINT_URL for S3-compatible stores",
    )
    g.add_argument(
        "--s3-request-checksum",
        choices=["when_supported", "when_required"],
        help="BATCHCROP_S3_REQUEST_CHECKSUM",
    )
    g.add_argument(
        "--max-source-bytes",
        type=int,
        metavar="N",
        help=f"BATCHCROP_MAX_SOURCE_BYTES (default {MAX_SOURCE_BYTES // 2**20} MiB)",
    )
    g.add_argument(
        "--store-max-concurrent",
        type=int,
        metavar="N",
        help="BATCHCROP_STORE_MAX_CONCURRENT: the most attempts in progress at once across the "
        "fleet that write to this store (an S3 bucket's request budget; give every worker of "
        "the store the same value; default no limit)",
    )
    g.add_argument(
        "--decode-memory-mib",
        type=int,
        metavar="N",
        help="BATCHCROP_DECODE_MEMORY_MIB: decoded-pixel memory shared by this process's renders "
        f"(default {DECODE_MEMORY_MIB}); a source needing more fails image_too_large",
    )


def _render_process_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("render processes")
    g.add_argument(
        "--render-processes",
        type=int,
        metavar="N",
        help="child processes that render (default one per slot; 0 renders in the slots' "
        "threads, where a render cannot be stopped)",
    )
    g.add_argument(
        "--render-deadline-seconds",
        type=float,
        default=RENDER_DEADLINE_SECONDS,
        metavar="S",
        help="a render in a child past this is killed and its item fails render_timeout "
        f"(default {RENDER_DEADLINE_SECONDS:g})",
    )


def render_processes(args: argparse.Namespace, slots: int) -> int:
    """The render processes `--render-processes` asks for (default one per slot), with
    `--render-deadline-seconds` checked too: ValueError saying what is wrong."""
    processes = slots if args.render_processes is None else args.render_processes
    if processes < 0:
        raise ValueError("--render-processes must be 0 (render in threads) or more")
    if not args.render_deadline_seconds > 0:
        raise ValueError("--render-deadline-seconds must be positive")
    return processes


def _render_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("batch")
    # One flag per `RenderSpec` field, built from its declaration; unset flags are None and
    # take the spec's own defaults (`RenderSpec.from_input`), which the help states.
    for declared in RenderSpec.declarations():
        g.add_argument(
            declared.flag,
            type=int if declared.kind == "whole" else str,
            metavar=_render_flag_metavar(declared),
            help=_render_flag_help(declared),
        )
    g.add_argument(
        "--deadline",
        default=f"{DEADLINE_SECONDS / 3600:g}h",
        help=(
            "batch deadline from now, e.g. 90m, 2h, 1d "
            f"(default {DEADLINE_SECONDS / 3600:g}h, at most {DEADLINE_SECONDS_MAX / 86400:g}d)"
        ),
    )
    g.add_argument(
        "--max-attempts",
        type=int,
        default=MAX_ATTEMPTS,
        help=f"attempts per item before it fails (default {MAX_ATTEMPTS})",
    )
    g.add_argument("--label", help="a human label for the batch (listings, `batches --label`)")
    g.add_argument(
        "--priority",
        type=_priority,
        default=0,
        metavar="P",
        help=f"how its claims rank against other batches', {PRIORITY_MIN} to {PRIORITY_MAX}: "
        "higher first, a waiting batch rising one level per aging step (default 0)",
    )
    g.add_argument(
        "--allow-failures",
        type=_allow_failures,
        metavar="N|P%",
        help="failed items the batch tolerates and still ends succeeded (exit 0), as a count "
        "or a percentage of its items, e.g. 5 or 2.5%% (default 0)",
    )


def _render_flag_metavar(declared: RenderField) -> str:
    """A render flag's value as help shows it: `N`, `TEXT`, `RATIO,...` or `crop|pad|auto`."""
    if declared.text and declared.choices:
        return "|".join(declared.choices)
    return _RENDER_METAVARS[declared.kind].format(noun=declared.noun.upper())


def _render_flag_help(declared: RenderField) -> str:
    """A render flag's help: the declaration's help, limits and default (`%` escaped: argparse
    formats help texts)."""
    if declared.text:
        limits = f"one of {', '.join(declared.choices)}" if declared.choices else ""
    elif not declared.is_list:
        limits = f"{declared.low} to {declared.high}"
    elif declared.choices:
        limits = f"comma-separated among {', '.join(declared.choices)}"
    else:
        limits = f"comma-separated, {declared.low} to {declared.high} of them"
    default = declared.default_record
    shown = ",".join(str(v) for v in default) if isinstance(default, list) else default
    shown = shown if shown != "" else "none"
    limited = f"; {limits}" if limits else ""
    return f"{declared.help}{limited} (default {shown})".replace("%", "%%")


_RENDER_METAVARS = {"whole": "N", "text": "TEXT", "list": "{noun},..."}
"""A render flag's value as help shows it, by the field's kind."""


def _callback_flags(p: argparse.ArgumentParser, *, with_url: bool) -> None:
    g = p.add_argument_group("completion callbacks")
    if with_url:
        g.add_argument(
            "--callback-url",
            metavar="URL",
            help="POST the final status document here, signed, when the batch ends "
            "(its host must be in BATCHCROP_CALLBACK_HOSTS)",
        )
    g.add_argument(
        "--callback-hosts",
        metavar="HOSTS",
        help="BATCHCROP_CALLBACK_HOSTS: comma-separated hosts callbacks may go to (*.example.com "
        "for subdomains; empty: none). The secret is BATCHCROP_CALLBACK_SECRET (environment only)",
    )
    g.add_argument(
        "--callback-retry-seconds",
        type=float,
        metavar="S",
        help="BATCHCROP_CALLBACK_RETRY_SECONDS: first retry of a failed delivery, doubling to an "
        f"hour, for 24 h (default {CALLBACK_RETRY_SECONDS:g})",
    )
    # The former names (ADR 0030), accepted and left out of the help.
    if with_url:
        g.add_argument("--notify-url", dest="callback_url", help=argparse.SUPPRESS)
    g.add_argument("--notify-hosts", dest="callback_hosts", help=argparse.SUPPRESS)
    g.add_argument(
        "--notify-retry-seconds", dest="callback_retry_seconds", type=float, help=argparse.SUPPRESS
    )


def _force_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="render every item, even one whose derivatives are all stored already "
        "(by default such an item succeeds from the stored objects' facts)",
    )


def _migrate_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--migrate",
        action="store_true",
        help="create or migrate the schema at start (one-machine deployments); by default the "
        "schema is only checked and `batchcrop db upgrade` is a deploy step",
    )


def _json_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print the {what} as JSON on stdout")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and a pointer to `--help`, not the whole
    usage block above the line that matters (the README: mistakes are one line)."""

    def error(self, message: str) -> NoReturn:
        self.exit(int(Exit.USAGE), f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _states(text: str) -> list[str]:
    """Comma-separated item state names, as a flag's type (`items`, `requeue`)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or any(name not in STATE_NAMES for name in names):
        raise argparse.ArgumentTypeError(
            f"states are {', '.join(STATE_NAMES)}, comma-separated; not {text!r}"
        )
    return names


def _priority(text: str) -> int:
    """A batch priority, as a flag's type: a whole number within the bounds."""
    try:
        value = int(text)
    except ValueError:
        value = PRIORITY_MAX + 1
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise argparse.ArgumentTypeError(
            f"a priority is a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}, not {text!r}"
        )
    return value


def _allow_failures(text: str) -> str:
    """`--allow-failures`, as a flag's type: its canonical text, or a usage error."""
    try:
        return allow_failures_text(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("allow_failures", "it", 1)) from None


BATCH_STATE_NAMES = tuple(name for name in STATE_NAMES if name != "retryable")
"""The states a batch can be in (docs/design.md §4: a batch is never `retryable`)."""
PAGE_LIMIT_MAX = 1000
"""The largest page of `items --limit` (the API's `limit` bound)."""


def _batch_state(text: str) -> str:
    """A batch state name, as a flag's type (`batches --state`)."""
    if text == "retryable":
        raise argparse.ArgumentTypeError(
            "retryable is an item state (try `batchcrop items BATCH --state retryable`); "
            f"a batch is {', '.join(BATCH_STATE_NAMES)}"
        )
    if text not in BATCH_STATE_NAMES:
        raise argparse.ArgumentTypeError(
            f"a batch state is one of {', '.join(BATCH_STATE_NAMES)}; not {text!r}"
        )
    return text


def _page_limit(text: str) -> int:
    """A page size, as a flag's type: 1 to `PAGE_LIMIT_MAX`."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= PAGE_LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"a page is 1 to {PAGE_LIMIT_MAX} items, not {text!r}")
    return int(text)


def _scrape_port(text: str) -> int:
    """A port a scraper can be told about: 0 (any free one) would be unknown to it."""
    port = _port(text)
    if port == 0:
        raise argparse.ArgumentTypeError("a metrics port is 1 to 65535: a scraper must know it")
    return port


def _port(text: str) -> int:
    """A TCP port number (0: any free one), as a flag's type: anything else is a usage error."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= PORT_MAX:
        raise argparse.ArgumentTypeError(f"a port is 0 to {PORT_MAX}, not {port}")
    return port


def build_parser() -> argparse.ArgumentParser:  # noqa: PLR0915 -- the CLI table, one command per block
    """The full parser; `--help` on each command documents its flags."""
    parser = _Parser(
        prog="batchcrop",
        description="Smart-crop catalogue images into several aspect ratios, as leased batch work.",
    )
    parser.add_argument("--version", action="version", version=f"batchcrop {__version__}")
    _global_flags(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "run", help="the one-shot job: submit, process with in-process workers, report"
    )
    p.add_argument(
        "sources", nargs="+", metavar="SRC", help="image files, folders or s3:// prefixes"
    )
    p.add_argument(
        "--out", metavar="DIR", help="store derivatives in this folder (same as --store file://DIR)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=CONCURRENCY,
        metavar="N",
        help=f"concurrent items (default {CONCURRENCY})",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _force_flag(p)
    _render_process_flags(p)
    _render_flags(p)
    _json_flag(p, "final status document")
    _database_flags(p)
    _store_flags(p)
    p.set_defaults(handler=commands.run)

    p = sub.add_parser("submit", help="create a batch and print its id")
    p.add_argument(
        "sources", nargs="*", metavar="SRC", help="image files, folders or s3:// prefixes"
    )
    p.add_argument(
        "--items-csv",
        metavar="FILE",
        help="CSV with a source column and optional ref and focus_left,focus_top,focus_right,"
        "focus_bottom columns (one item per row; focus in upright source pixels)",
    )
    p.add_argument(
        "--idempotency-key", metavar="K", help="same key + same request ⇒ the same batch"
    )
    _render_flags(p)
    _json_flag(p, "status document")
    _database_flags(p)
    # The batch records this store: only workers of the same store serve it.
    _store_flags(p)
    _callback_flags(p, with_url=True)
    p.set_defaults(handler=commands.submit)

    p = sub.add_parser("worker", help="long-running worker claiming from every open batch")
    _force_flag(p)
    p.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        metavar="N",
        help=f"items at once (default {CONCURRENCY})",
    )
    p.add_argument(
        "--batch", action="append", dest="batch_ids", metavar="ID", help="only these batches"
    )
    p.add_argument(
        "--metrics-port",
        type=_scrape_port,
        metavar="PORT",
        help="serve Prometheus metrics on this port",
    )
    p.add_argument(
        "--metrics-host",
        default=METRICS_HOST_DEFAULT,
        metavar="HOST",
        help=f"address the metrics endpoint listens on (default {METRICS_HOST_DEFAULT}; "
        "0.0.0.0 or :: for a Prometheus on another host)",
    )
    p.add_argument(
        "--shutdown-grace-seconds",
        type=float,
        default=SHUTDOWN_GRACE_SECONDS,
        metavar="S",
        help="on SIGTERM, time to finish held items before giving them back "
        f"(default {SHUTDOWN_GRACE_SECONDS:g})",
    )
    _render_process_flags(p)
    _migrate_flag(p)
    _database_flags(p)
    _store_flags(p)
    _callback_flags(p, with_url=False)
    p.set_defaults(handler=commands.worker)

    p = sub.add_parser("workers", help="the worker registry: who is alive, what each holds")
    _json_flag(p, "workers")
    _database_flags(p)
    p.set_defaults(handler=commands.workers)

    p = sub.add_parser("reap", help="one reaper pass")
    _database_flags(p)
    p.set_defaults(handler=commands.reap)

    p = sub.add_parser("batches", help="list batches, newest first")
    p.add_argument(
        "--state", type=_batch_state, metavar="STATE", help=f"one of {', '.join(BATCH_STATE_NAMES)}"
    )
    p.add_argument("--label", help="only batches with this label")
    _json_flag(p, "list")
    _database_flags(p)
    p.set_defaults(handler=commands.batches)

    p = sub.add_parser("status", help="a batch's status document")
    p.add_argument("batch")
    p.add_argument("--watch", action="store_true", help="redraw until the batch is terminal")
    _json_flag(p, "status document")
    _database_flags(p)
    p.set_defaults(handler=commands.status)

    p = sub.add_parser("items", help="a batch's items")
    p.add_argument("batch")
    p.add_argument(
        "--state", type=_states, metavar="STATES", help="only items in these states (a,b,...)"
    )
    p.add_argument(
        "--limit",
        type=_page_limit,
        metavar="N",
        help=f"print one page of at most N items (1 to {PAGE_LIMIT_MAX}) and the cursor of the "
        "next one (on stderr; `next_cursor` with --json), instead of every item",
    )
    p.add_argument("--cursor", metavar="C", help="start at this next_cursor of an earlier page")
    _json_flag(p, "items")
    _database_flags(p)
    p.set_defaults(handler=commands.items)

    p = sub.add_parser("events", help="a batch's transition timeline")
    p.add_argument("batch")
    p.add_argument("--item", metavar="ID")
    _json_flag(p, "events")
    _database_flags(p)
    p.set_defaults(handler=commands.events)

    for name, handler, text in (
        ("cancel", commands.cancel, "cancel a batch"),
        ("pause", commands.pause, "claim nothing more from a batch; held items finish"),
        ("resume", commands.resume, "claim a paused batch's items again"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("batch")
        _json_flag(p, "status document")
        _database_flags(p)
        p.set_defaults(handler=handler)

    p = sub.add_parser("priority", help="give a batch a new priority")
    p.add_argument("batch")
    p.add_argument(
        "priority",
        type=_priority,
        metavar="P",
        help=f"{PRIORITY_MIN} to {PRIORITY_MAX}, higher claimed first",
    )
    _json_flag(p, "status document")
    _database_flags(p)
    p.set_defaults(handler=commands.priority)

    p = sub.add_parser("requeue", help="give failed/abandoned items a fresh attempt budget")
    p.add_argument("batch")
    p.add_argument(
        "--state",
        type=_states,
        metavar="STATES",
        default=REQUEUEABLE_NAMES,
        help=f"states to requeue (default {REQUEUEABLE_NAMES})",
    )
    p.add_argument(
        "--item", action="append", dest="item_ids", metavar="ID", help="only these items"
    )
    p.add_argument(
        "--deadline", help="new deadline from now (needed for a cancelled or expired batch)"
    )
    _json_flag(p, "status document")
    _database_flags(p)
    p.set_defaults(handler=commands.requeue)

    p = sub.add_parser(
        "release",
        help="put back in queued the batch's leases held by live workers but by none of their "
        "slots (`workers`: not in flight)",
    )
    p.add_argument("batch")
    p.add_argument("--reason", required=True, help="why, written on each item's event")
    p.add_argument("--by", help="who releases them, written on each event (default: $USER)")
    _json_flag(p, "count")
    _database_flags(p)
    p.set_defaults(handler=commands.release)

    p = sub.add_parser(
        "redeliver", help="deliver a batch's completion callback again (same Idempotency-Key)"
    )
    p.add_argument("batch")
    _json_flag(p, "status document")
    _database_flags(p)
    p.set_defaults(handler=commands.redeliver)

    p = sub.add_parser("recrop", help="render one succeeded or failed item again with a focus box")
    p.add_argument("batch")
    p.add_argument("item", help="the item's id (or a unique prefix of it)")
    p.add_argument(
        "--focus",
        required=True,
        metavar="L,T,R,B",
        help="the focus box: left,top,right,bottom in upright source pixels",
    )
    _json_flag(p, "item document")
    _database_flags(p)
    p.set_defaults(handler=commands.recrop)

    p = sub.add_parser("serve", help="the HTTP API (and the reaper on a timer)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument(
        "--api-token-file",
        metavar="FILE",
        help="BATCHCROP_API_TOKEN_FILE: a file whose first line is the token every request "
        "must bear (Authorization: Bearer); or set BATCHCROP_API_TOKEN. Never on the command "
        "line, where `ps` shows it",
    )
    p.add_argument(
        "--source-roots", metavar="ROOTS", help="BATCHCROP_SOURCE_ROOTS: where API sources may lie"
    )
    p.add_argument(
        "--allowed-hosts",
        metavar="NAMES",
        help="BATCHCROP_ALLOWED_HOSTS: comma-separated Host names to answer besides loopback "
        "(with a token set: the only ones)",
    )
    p.add_argument(
        "--prune-finished-before",
        metavar="D",
        help="BATCHCROP_PRUNE_FINISHED_BEFORE: every hour, prune batches finished at least this "
        "long ago, e.g. 30d (default: never)",
    )
    _migrate_flag(p)
    _database_flags(p)
    _store_flags(p)
    _callback_flags(p, with_url=False)
    p.set_defaults(handler=commands.serve)

    p = sub.add_parser(
        "prune", help="delete the rows of batches finished long ago (never stored objects)"
    )
    p.add_argument(
        "--finished-before",
        metavar="D",
        required=True,
        help="delete batches whose items all ended at least this long ago, e.g. 30d",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the ids of the batches a prune would delete now, oldest first, and delete "
        "nothing",
    )
    _json_flag(p, "result")
    _database_flags(p)
    p.set_defaults(handler=commands.prune)

    p = sub.add_parser("db", help="database maintenance")
    db = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = db.add_parser(
        "upgrade", help="create or migrate the schema (SQLite and PostgreSQL): the deploy step"
    )
    _database_flags(up)
    up.set_defaults(handler=commands.db_upgrade)
    current = db.add_parser(
        "current",
        help="each migration history's revision and this version's head "
        "(exit 0 at head, 1 otherwise)",
    )
    _database_flags(current)
    current.set_defaults(handler=commands.db_current)
    check = db.add_parser(
        "check", help="exit 0 when the schema is at this version's head, else 1 saying what to run"
    )
    _database_flags(check)
    check.set_defaults(handler=commands.db_check)

    p = sub.add_parser(
        "wait", help="wait until a batch is terminal: exit 0 if it succeeded, 1 if not"
    )
    p.add_argument("batch")
    _json_flag(p, "final status document")
    _database_flags(p)
    p.set_defaults(handler=commands.wait)
    _add_global_flags_everywhere(sub)
    return parser


def _global_flags(p: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's copy sets the value only when given, so the flags work before
    # and after the subcommand alike.
    p.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR; BATCHCROP_LOG_LEVEL (default INFO for worker and "
        "serve, WARNING otherwise)",
    )
    p.add_argument(
        "--log-format",
        default=argparse.SUPPRESS,
        metavar="FORMAT",
        help="logfmt (default) or json; BATCHCROP_LOG_FORMAT",
    )


def _add_global_flags_everywhere(sub: argparse._SubParsersAction[_Parser]) -> None:
    """Give every (sub)command the global flags, so `batchcrop worker --log-format json` works."""
    for parser in set(sub.choices.values()):
        _global_flags(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_global_flags_everywhere(action)


def _fail(code: Exit, message: str) -> int:
    print(f"batchcrop: error: {printable(message)}", file=sys.stderr)
    return int(code)


def printable(text: str) -> str:
    """`text` with every control character shown as an escape: an error line quotes what the
    user typed (an id, a path), which must not act on the terminal."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _errors() -> tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], Exit], ...]:
    """Which error means which exit code; imported only once a command failed."""
    # The error classes live with the (heavier) modules that raise them.
    from batchcrop.batches.errors import (  # noqa: PLC0415
        AmbiguousId,
        BadCursor,
        BatchEnded,
        EmptyBatch,
        IdempotencyConflict,
        NeedsNewDeadline,
        NoSuchBatch,
        NothingToRedeliver,
    )
    from batchcrop.batches.recrop import BatchCancelled, RecropConflict  # noqa: PLC0415
    from batchcrop.cli import commands as module  # noqa: PLC0415
    from batchcrop.db.revisions import SchemaBehind  # noqa: PLC0415
    from batchcrop.settings import SettingsError  # noqa: PLC0415
    from leases import DatabaseUnavailable, SchemaMissing  # noqa: PLC0415
    from leases.errors import DatabaseRefused  # noqa: PLC0415
    from storage import (  # noqa: PLC0415
        ConditionalWritesUnsupported,
        ObjectNotFound,
        SourceNotAllowed,
        StorageError,
        StorageUnavailable,
    )

    return (
        (
            (
                SettingsError,
                ValueError,
                EmptyBatch,
                IdempotencyConflict,
                BadCursor,
                AmbiguousId,
                NeedsNewDeadline,
                NothingToRedeliver,
                BatchEnded,
                RecropConflict,
                BatchCancelled,
                SourceNotAllowed,
                module.UsageError,
            ),
            Exit.USAGE,
        ),
        (NoSuchBatch, Exit.NO_SUCH_BATCH),
        (module.StillUnfinished, Exit.BATCH_NOT_SUCCEEDED),
        (
            (DatabaseUnavailable, DatabaseRefused, SchemaMissing, SchemaBehind),
            Exit.DATABASE_UNREACHABLE,
        ),
        (ObjectNotFound, Exit.USAGE),
        ((StorageUnavailable, ConditionalWritesUnsupported, StorageError), Exit.STORE_UNREACHABLE),
    )


def _configure_logs(args: argparse.Namespace) -> None:
    from batchcrop.logs import configure  # noqa: PLC0415  (see the imports)

    default = LOG_LEVEL_LONG_RUNNING if args.command in LONG_RUNNING_COMMANDS else LOG_LEVEL_DEFAULT
    level = getattr(args, "log_level", None) or os.environ.get("BATCHCROP_LOG_LEVEL") or default
    fmt = getattr(args, "log_format", None) or os.environ.get("BATCHCROP_LOG_FORMAT") or "logfmt"
    configure(level, fmt)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `batchcrop` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(_attach_negative_values(sys.argv[1:] if argv is None else argv))
    code = _run(args)
    # Flush here, where a reader that went away (`batchcrop items X | head`) is caught, rather
    # than at interpreter exit, where Python complains on stderr.
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _broken_pipe()
    return code


DURATION_FLAGS = ("--deadline", "--finished-before", "--prune-finished-before")
"""Flags whose value may be mistyped as negative (`--deadline -5m`)."""


def _attach_negative_values(argv: Sequence[str]) -> list[str]:
    """`--deadline -5m` as `--deadline=-5m`: argparse reads a value starting with `-` as a
    flag, and answers "expected one argument" instead of the duration's own message."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in DURATION_FLAGS and arg[:1] == "-" and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _run(args: argparse.Namespace) -> int:
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        _configure_logs(args)
        if args.command in ("run", "worker", "serve"):
            from batchcrop.crop.budget import return_freed_pixels_promptly  # noqa: PLC0415

            return_freed_pixels_promptly()
        _prestart_renders(args)
        try:
            return handler(args)
        finally:
            _discard_prestarted(args)
    except KeyboardInterrupt:
        return _fail(Exit.INTERRUPTED, "interrupted")
    except BrokenPipeError:
        return _broken_pipe()
    except Exception as exc:
        for kinds, code in _errors():
            if isinstance(exc, kinds):
                return _fail(code, _message(exc))
        raise


def _prestart_renders(args: argparse.Namespace) -> None:
    """Start `run`'s and `worker`'s render children before the command imports the database
    layer and migrates: they warm up on the other cores meanwhile (`renders.spawn`). Not when
    a flag the command refuses at once is wrong (the command reports it); those it does not
    use end with the command (`_discard_prestarted`)."""
    if args.command not in ("run", "worker"):
        return
    slots = args.workers if args.command == "run" else args.concurrency
    try:
        processes = render_processes(args, slots)
    except ValueError:
        return
    both_stores = bool(getattr(args, "out", None)) and bool(getattr(args, "store", None))
    if 0 < processes <= slots and not both_stores:
        from batchcrop.renders.spawn import prestart  # noqa: PLC0415  (no engine)

        prestart(processes)


def _discard_prestarted(args: argparse.Namespace) -> None:
    """End the prestarted children the command did not use (`renders.spawn`)."""
    if args.command in ("run", "worker"):
        from batchcrop.renders.spawn import discard_prestarted  # noqa: PLC0415

        discard_prestarted()


def _broken_pipe() -> int:
    # Point stdout at /dev/null: the interpreter's final flush must not fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def flag_message(error: FieldError) -> str:
    """A request field's error as the CLI says it, naming the flags that gave the values:
    `--max-side must be in 16..10000, got -5`, `--ratios: ratio h must be in 1..100, got 0`,
    `--widths and --max-side are two forms of the output size: give one of them`."""
    flag = _flag_of(error.field.split("[", 1)[0])
    # `max_side must …` reads on as `--max-side must …`; `pad_colour: …` and the rest keep ": ".
    joined = error.named.endswith(" ") and not error.named.endswith(": ")
    said = f"{flag} {error.reason}" if joined else f"{flag}: {error.reason}"
    # Other fields named in the message by their snake_case names (no prose word has one).
    return re.sub(
        r"\b[a-z]+(?:_[a-z]+)+\b",
        lambda m: _flag_of(m[0]) if m[0] in RenderSpec.field_names() else m[0],
        said,
    )


def _flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


SCHEMA_MISSING_MESSAGE = (
    "this database has no batchcrop tables: check --database-url (BATCHCROP_DATABASE_URL), "
    "or create them with `batchcrop db upgrade`"
)


def _message(exc: BaseException) -> str:
    from leases import SchemaMissing  # noqa: PLC0415

    if isinstance(exc, SchemaMissing):
        return SCHEMA_MISSING_MESSAGE
    if isinstance(exc, FieldError):
        return flag_message(exc)
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]

"""Log formats and metric names, in process (docs/design.md §7, logs and metrics)."""

from __future__ import annotations

import json
import logging
import platform
import re
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from batchcrop import __version__
from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.logs import LogSettingError, OutageLog, configure, figure, log_event
from batchcrop.metrics import QUEUE_CACHE_SECONDS, Metrics
from batchcrop.worker.worker import WorkerOptions
from leases import DatabaseUnavailable, QueueStats, State
from storage import LocalStore

# A strict logfmt line: key=value pairs, a value bare or a JSON-quoted string.
LOGFMT_PAIR = re.compile(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|[^\s"=]+)(?: |$)')


def parse_logfmt(line: str) -> dict[str, str]:
    """The pairs of one logfmt line; fails on anything that is not strict logfmt."""
    pairs = LOGFMT_PAIR.findall(line)
    assert "".join(f"{k}={v} " for k, v in pairs).rstrip() == line, line
    return {k: json.loads(v) if v.startswith('"') else v for k, v in pairs}


class Stderr:
    """What batchcrop's logs wrote to stderr (pytest's capture of it)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().err


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[Stderr]:
    """batchcrop's logs on pytest's captured stderr, with the handlers put back afterwards."""
    logger = logging.getLogger("batchcrop")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield Stderr(capsys)
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


TRICKY = 'a "quoted" value\nwith a newline, \x1b]0;title\x07 and = signs'


def test_logfmt_lines_are_strict_with_ts_level_msg_first(stderr: Stderr) -> None:
    """`ts=… level=… msg=…` then the fields in order; a value with spaces, quotes, newlines or
    terminal escapes is one quoted, escaped value, so an event is always one line."""
    configure("INFO", "logfmt")
    log_event("claim", item="i-1", batch="b-1", attempt=2, tricky=TRICKY, skipped=None)
    log_event("hidden", level=logging.DEBUG)
    (line,) = stderr.getvalue().splitlines()
    pairs = parse_logfmt(line)
    assert list(pairs) == ["ts", "level", "msg", "item", "batch", "attempt", "tricky"]
    assert (pairs["level"], pairs["msg"], pairs["attempt"], pairs["tricky"]) == (
        "info",
        "claim",
        "2",
        TRICKY,
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", pairs["ts"])
    assert "\x1b" not in line


def test_json_lines_carry_the_same_keys(stderr: Stderr) -> None:
    """`--log-format json`: one object per line with the same keys, values as given."""
    configure("WARNING", "json")
    log_event("outage_started", level=logging.WARNING, dependency="database", reason=TRICKY)
    log_event("not_shown")
    (line,) = stderr.getvalue().splitlines()
    document = json.loads(line)
    assert list(document) == ["ts", "level", "msg", "dependency", "reason"]
    assert (document["level"], document["msg"], document["reason"]) == (
        "warning",
        "outage_started",
        TRICKY,
    )


def test_other_libraries_lines_join_in_the_same_format(stderr: Stderr) -> None:
    """uvicorn's own lines (start, bind errors) come out in batchcrop's format too."""
    configure("INFO", "logfmt")
    logging.getLogger("uvicorn.error").error("[Errno 98] address already in use")
    pairs = parse_logfmt(stderr.getvalue().splitlines()[0])
    assert (pairs["level"], pairs["msg"], pairs["logger"]) == (
        "error",
        "[Errno 98] address already in use",
        "uvicorn.error",
    )


def test_asyncios_repeated_complaints_are_one_strict_line(stderr: Stderr) -> None:
    """asyncio's lines (a server out of descriptors fails each `accept` with a traceback, many
    times a second) are strict lines in our format, one per message per `REPEAT_SECONDS`."""
    configure("INFO", "logfmt")
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        for _ in range(50):
            logging.getLogger("asyncio").error(
                "socket.accept() out of system resource", exc_info=True
            )
    logging.getLogger("asyncio").error("another complaint")
    lines = stderr.getvalue().splitlines()
    assert [parse_logfmt(line)["msg"] for line in lines] == [
        "socket.accept() out of system resource",
        "another complaint",
    ]
    first = parse_logfmt(lines[0])
    assert (first["level"], first["logger"]) == ("error", "asyncio")
    assert "Too many open files" in first["exc"]


def test_the_trace_exporters_complaints_are_our_lines_too(stderr: Stderr) -> None:
    """With tracing on, the OpenTelemetry SDK's export failures are strict log lines naming
    their logger, not raw text among them."""
    configure("INFO", "logfmt")
    exporter = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    logging.getLogger(exporter).error("Failed to export spans batch due to timeout")
    pairs = parse_logfmt(stderr.getvalue().splitlines()[0])
    assert (pairs["level"], pairs["msg"], pairs["logger"]) == (
        "error",
        "Failed to export spans batch due to timeout",
        exporter,
    )


@pytest.mark.parametrize(("level", "fmt"), [("LOUD", "logfmt"), ("INFO", "xml")])
def test_unknown_levels_and_formats_are_refused(level: str, fmt: str) -> None:
    """A mistyped level or format is a setting error that lists the accepted values."""
    with pytest.raises(LogSettingError, match="use "):
        configure(level, fmt)


def scrape(metrics: Metrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the registry by name, parsed with prometheus_client's own parser."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def test_the_registry_has_the_operators_series_and_no_created_ones() -> None:
    """Build info, process and platform collectors, the queue gauges, in-flight, outages and
    put-if-absent hits; no `_created` series."""
    queue = QueueStats(counts={State.QUEUED: 7, State.RETRYABLE: 2}, head_queued_age_seconds=12.5)
    metrics = Metrics(queue=lambda: queue)
    metrics.outages.labels("database").inc()
    metrics.put_if_absent_hits.inc()
    metrics.in_flight.inc()
    samples = scrape(metrics)
    assert samples["batchcrop_build_info"] == {
        (("python", platform.python_version()), ("version", __version__)): 1.0
    }
    assert "python_info" in samples
    assert "process_cpu_seconds_total" in samples
    assert "process_resident_memory_bytes" in samples
    assert samples["batchcrop_queue_items"] == {
        (("state", "queued"),): 7.0,
        (("state", "in_progress"),): 0.0,
        (("state", "retryable"),): 2.0,
    }
    assert samples["batchcrop_queue_oldest_queued_age_seconds"] == {(): 12.5}
    assert samples["batchcrop_items_in_flight"] == {(): 1.0}
    # Every dependency's outage counter and breaker gauge exist from the start, at 0.
    assert samples["batchcrop_outages_total"] == {
        (("dependency", "database"),): 1.0,
        (("dependency", "store"),): 0.0,
        (("dependency", "source"),): 0.0,
    }
    assert samples["batchcrop_circuit_open"] == {
        (("dependency", name),): 0.0 for name in ("database", "store", "source")
    }
    assert samples["batchcrop_put_if_absent_hits_total"] == {(): 1.0}
    assert not [name for name in samples if name.endswith("_created")]


def test_a_failing_queue_read_leaves_the_gauges_out_not_the_page() -> None:
    """While the database is down the queue gauges are missing; every other series stays."""

    def down() -> QueueStats:
        raise RuntimeError("database down")

    samples = scrape(Metrics(queue=down))
    assert "batchcrop_queue_items" not in samples
    assert "batchcrop_claims_total" in samples


def test_the_queue_gauges_read_the_database(make_app: Callable[..., App], tmp_path: str) -> None:
    """`LeaseManager.queue()` on a real database: three queued items of a store a live worker
    serves, waiting since submission."""
    app = make_app()
    request = BatchRequest(
        items=tuple(ItemRequest(source=f"/nowhere/{n}.jpg") for n in range(3)),
        spec=RenderSpec.from_input({}),
        deadline_seconds=3600.0,
        max_attempts=3,
    )
    status, _ = app.batches.submit(request)
    app.leases.worker_seen("w-1", {"store": status["store"], "batch_ids": None})
    samples = scrape(app.metrics)
    assert (
        samples["batchcrop_queue_items"][(("state", "queued"), ("store", status["store"]))] == 3.0
    )
    assert 0.0 <= samples["batchcrop_queue_oldest_queued_age_seconds"][()] < 60.0


def test_a_paused_batch_is_no_work_for_the_autoscaler(
    make_app: Callable[..., App], tmp_path: str
) -> None:
    """A paused batch's queued items leave the items gauge and the head's age (nobody may claim
    them, so a fleet must not grow for them); resumed, they are counted again."""
    app = make_app()
    request = BatchRequest(
        items=tuple(ItemRequest(source=f"/nowhere/{n}.jpg") for n in range(3)),
        spec=RenderSpec.from_input({}),
        deadline_seconds=3600.0,
        max_attempts=3,
    )
    status, _ = app.batches.submit(request)
    app.leases.worker_seen("w-1", {"store": status["store"], "batch_ids": None})
    queued = (("state", "queued"), ("store", status["store"]))
    app.batches.pause(status["id"])
    samples = scrape(app.metrics)
    assert samples["batchcrop_queue_items"][queued] == 0.0
    assert samples["batchcrop_queue_oldest_queued_age_seconds"][()] == 0.0
    assert app.leases.queue().counts.get(State.QUEUED, 0) == 0
    app.batches.resume(status["id"])
    time.sleep(QUEUE_CACHE_SECONDS)  # past the gauges' cache
    samples = scrape(app.metrics)
    assert samples["batchcrop_queue_items"][queued] == 3.0
    assert app.leases.queue().counts[State.QUEUED] == 3


def test_python_warnings_are_one_strict_log_line(stderr: Stderr) -> None:
    """Pillow's DecompressionBombWarning (any Python warning) comes out as one `python_warning`
    line in the configured format: category and first line, no file or source line."""
    with warnings.catch_warnings():  # puts `showwarning` back afterwards
        warnings.simplefilter("always")
        configure("INFO", "logfmt")
        warnings.warn(
            "Image size (99000000 pixels) exceeds limit\nof 89478485 pixels",
            Image.DecompressionBombWarning,
            stacklevel=1,
        )
    (line,) = stderr.getvalue().splitlines()
    pairs = parse_logfmt(line)
    assert (pairs["msg"], pairs["category"], pairs["message"]) == (
        "python_warning",
        "DecompressionBombWarning",
        "Image size (99000000 pixels) exceeds limit",
    )


def test_json_lines_carry_figures_as_numbers(stderr: Stderr) -> None:
    """Seconds and counts are JSON numbers (`figure`), whole ones without a decimal point."""
    configure("INFO", "json")
    log_event("worker_stopping", grace_s=figure(30.0), lease_s=figure(2.5))
    document = json.loads(stderr.getvalue().splitlines()[0])
    assert (document["grace_s"], document["lease_s"]) == (30, 2.5)


def test_an_outage_is_logged_once_with_its_reason_and_its_end_once(stderr: Stderr) -> None:
    """A loop failing every pass logs `database_unavailable` once, with the reason, then
    `database_recovered` once at the first success."""
    configure("INFO", "logfmt")
    outage = OutageLog("deliverer")
    for _ in range(5):
        outage.failed(DatabaseUnavailable("database unreachable: connection refused"))
    outage.succeeded()
    outage.succeeded()
    lines = [parse_logfmt(line) for line in stderr.getvalue().splitlines()]
    assert [(p["msg"], p.get("error")) for p in lines] == [
        ("database_unavailable", "database unreachable: connection refused"),
        ("database_recovered", None),
    ]


def test_the_on_call_series_are_there_from_the_start(
    make_app: Callable[..., App], tmp_path: str
) -> None:
    """A worker's registry exports every labelled counter at 0 before anything happened, the
    worker registry (alive, absent, slots by store), the callback deliveries by stage, the
    reaper's last success and the store and database latency histograms."""
    app = make_app()
    store = LocalStore(Path(tmp_path) / "store")
    app.leases.worker_seen("w-alive", {"store": store.url, "concurrency": 4, "batch_ids": None})
    worker = app.worker(store, WorkerOptions(concurrency=1))
    worker.reap_once()
    samples = scrape(app.metrics)
    assert samples["batchcrop_terminal_failures_total"][(("category", "invalid_image"),)] == 0.0
    assert samples["batchcrop_retryable_failures_total"][(("category", "dependency_timeout"),)] == 0
    assert samples["batchcrop_outages_total"][(("dependency", "source"),)] == 0.0
    assert samples["batchcrop_item_duration_seconds_count"][(("outcome", "lease_lost"),)] == 0.0
    assert samples["batchcrop_workers"] == {(("status", "alive"),): 1.0, (("status", "absent"),): 0}
    assert samples["batchcrop_worker_slots"] == {(("store", store.url),): 4.0}
    assert samples["batchcrop_callback_deliveries"] == {
        (("stage", "pending"),): 0.0,
        (("stage", "retrying"),): 0.0,
        (("stage", "failed"),): 0.0,
    }
    assert samples["batchcrop_reaper_last_success_timestamp_seconds"][()] > 1.7e9
    assert samples["batchcrop_database_statement_seconds_count"][()] > 0
    assert "batchcrop_store_write_seconds_count" in samples

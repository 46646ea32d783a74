"""What tracing costs an attempt: off (the default) against on, in one run.

Run by hand (never by the test suite):

    .venv/bin/python bench/traces.py [--items 40] [--rounds 5] [--calls 20000]

Two measurements, each alternating off and on so that a busy machine slows both alike:

- *calls*: the tracing calls of one attempt alone (`Traces.attempt` with its claim span, the
  five stages with their attributes, one log line through batchcrop's logger), `--calls` times
  over, beside the log line alone (no tracing calls): off is `NO_TRACES`; on is the
  OpenTelemetry SDK with its `BatchSpanProcessor` in front of an exporter that drops every
  batch (what the process pays, not the network's time).
- *attempts*: whole attempts of a real worker (`Worker.process`: claim, read, render of 4
  ratios at 400 px, writes to a local folder, commit on SQLite) over `--items` generated photos
  per round, forced to render, the worker traced or not; the median ms per attempt of each.
"""

from __future__ import annotations

import argparse
import io
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

# The repository first: bench/leases.py would stand for the `leases` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from PIL import Image

from batchcrop.app import App, build
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.logs import LOGGER, LogfmtFormatter, log_event
from batchcrop.settings import Settings
from batchcrop.traces import COMMIT, KNOWN, NO_TRACES, READ, RENDER, WRITE, Traces
from batchcrop.traces.otel import OtelTraces
from batchcrop.worker.worker import WorkerOptions
from leases import Claim


class Dropped(SpanExporter):
    """Takes every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def tracing_on() -> OtelTraces:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return OtelTraces(provider)


def one_attempt(traces: Traces, claim: Claim) -> None:
    """The tracing calls `Worker.process` and `Attempt.run` make for one rendered item."""
    now = time.time_ns()
    with traces.attempt(claim, worker_id="bench", claimed=(now, now + 1000)) as span:
        with traces.stage(READ) as stage:
            stage.set("batchcrop.source.bytes", 123456)
        with traces.stage(KNOWN) as stage:
            stage.set("batchcrop.known", False)
        with traces.stage(RENDER) as stage:
            stage.set("batchcrop.renditions", 4)
        with traces.stage(WRITE) as stage:
            stage.set("batchcrop.objects", 5)
        with traces.stage(COMMIT) as stage:
            stage.set("batchcrop.outcome", "succeeded")
        log_event("transition", item=claim.item_id, corr=claim.correlation_id, outcome="ok")
        span.set("batchcrop.outcome", "succeeded")
        span.set("batchcrop.category", None)


def no_attempt(traces: Traces, claim: Claim) -> None:
    """`one_attempt` without its tracing calls: its log line alone."""
    log_event("transition", item=claim.item_id, corr=claim.correlation_id, outcome="ok")


def calls(traces: Traces | None, n: int) -> float:
    """µs per attempt of `one_attempt` (None: of `no_attempt`), `n` times."""
    claim = Claim("item", "batch", 1, "token", datetime.now(UTC), {}, "corr")
    run = no_attempt if traces is None else one_attempt
    started = time.perf_counter()
    for _ in range(n):
        run(traces or NO_TRACES, claim)
    return (time.perf_counter() - started) / n * 1e6


def photos(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        image = Image.new("RGB", (1200, 900), (i * 5 % 256, 90, 160))
        image.paste((250, 200, 10), (300 + i, 200, 700, 600))
        path = folder / f"p{i}.jpg"
        image.save(path, quality=85)
        paths.append(path)
    return paths


def attempts(app: App, sources: list[Path], traces: Traces) -> float:
    """Median ms of one attempt of a fresh batch of `sources`, the worker traced by `traces`."""
    status, _ = app.batches.submit(
        BatchRequest(
            items=tuple(ItemRequest(source=str(s)) for s in sources),
            spec=RenderSpec.from_input({"ratios": "1:1,4:3,16:9,3:4", "max_side": 400}),
            deadline_seconds=3600,
            max_attempts=1,
        )
    )
    batch_id = str(status["id"])
    worker = app.worker(
        app.open_store(),
        WorkerOptions(concurrency=1, batch_ids=[batch_id], force_render=True),
        deliver=False,
    )
    worker.traces = traces
    took = []
    while True:
        started_ns = time.time_ns()
        claims = app.leases.claim(worker.worker_id, 1, group_ids=[batch_id])
        if not claims:
            break
        started = time.perf_counter()
        worker.process(claims[0], claimed=(started_ns, time.time_ns()))
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=40, help="attempts per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each, alternating")
    parser.add_argument("--calls", type=int, default=20000, help="attempts' calls per round")
    args = parser.parse_args()
    # INFO lines are formatted as a worker's are, into nothing.
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(LogfmtFormatter())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False
    on = tracing_on()
    modes: dict[str, Traces] = {"off": NO_TRACES, "on": on}
    results: dict[str, dict[str, list[float]]] = {"calls": {}, "attempts": {}}
    for _ in range(args.rounds):
        for name, maybe in {"none": None, **modes}.items():
            results["calls"].setdefault(name, []).append(calls(maybe, args.calls))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        app = build(Settings(database_url=f"sqlite:///{root / 'b.db'}", store=f"file://{root}/s"))
        app.upgrade()
        sources = photos(root / "src", args.items)
        attempts(app, sources[:3], NO_TRACES)  # warm-up: imports, the first renders
        for _ in range(args.rounds):
            for name, traces in modes.items():
                results["attempts"][name] = [
                    *results["attempts"].get(name, []),
                    attempts(app, sources, traces),
                ]
        app.close()
    on.close()
    none, off_calls, on_calls = (
        statistics.median(results["calls"][m]) for m in ("none", "off", "on")
    )
    off_ms, on_ms = (statistics.median(results["attempts"][m]) for m in ("off", "on"))
    print("| measurement | no tracing calls | off | on | off − none | on − off |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| an attempt's tracing calls and log line (µs) | {none:.2f} | {off_calls:.2f} | "
        f"{on_calls:.2f} | {off_calls - none:.2f} | {on_calls - off_calls:.2f} |"
    )
    print(
        f"| one attempt of a real worker (ms, median) | | {off_ms:.2f} | {on_ms:.2f} | | "
        f"{on_ms - off_ms:+.2f} |"
    )
    print(f"rounds: {args.rounds}; attempts per round: {args.items}; calls per round: {args.calls}")
    print(
        "per round (attempts, ms): "
        + "; ".join(f"{m}: {', '.join(f'{v:.1f}' for v in results['attempts'][m])}" for m in modes)
    )


if __name__ == "__main__":
    main()

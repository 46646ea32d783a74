"""Traces (docs/design.md §7, traces; ADR 0042): the spans of attempts and deliveries as the
OpenTelemetry SDK records them (its in-memory exporter, a real SDK), the log lines' span ids,
the OTLP/HTTP export to a receiver on loopback, and nothing of OpenTelemetry loaded when off."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from batchcrop.logs import FIELDS_ATTRIBUTE
from batchcrop.traces import ATTEMPT_SPAN, DELIVERY_SPAN, TracesUnavailable, open_traces
from batchcrop.traces.otel import OtelTraces
from batchcrop.worker.processing import Cancelled
from batchcrop.worker.worker import WorkerOptions
from leases import TERMINAL, Claim
from storage import ObjectStore
from tests.images import write_corrupt, write_photos
from tests.receiver import SECRET, receiving

RUN_TIMEOUT_SECONDS = 90.0


@pytest.fixture
def spans() -> Iterator[tuple[OtelTraces, InMemorySpanExporter]]:
    """Tracing on, every span kept in memory as it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traces = OtelTraces(provider)
    yield traces, exporter
    traces.close()


def _submit(app: App, sources: list[Path], *, callback_url: str | None = None) -> str:
    status, _ = app.batches.submit(
        BatchRequest(
            items=tuple(ItemRequest(source=str(s)) for s in sources),
            spec=RenderSpec.from_input({"ratios": "1:1,4:3", "max_side": 96}),
            deadline_seconds=3600,
            max_attempts=1,
            callback_url=callback_url,
        )
    )
    return str(status["id"])


def _run(
    app: App, store: ObjectStore, batch_id: str, traces: OtelTraces, **options: Any
) -> dict[str, Any]:
    """An in-process worker, traced by `traces`, on one batch until it is terminal."""
    worker = app.worker(
        store,
        WorkerOptions(batch_ids=[batch_id], idle_sleep_seconds=0.05, **options),
        deliver=False,
    )
    worker.traces = traces
    worker.start()
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    try:
        while (status := app.batches.status(batch_id))["state"] not in TERMINAL:
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
        return status
    finally:
        worker.stop()
        worker.join(30)


def _attempts(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == ATTEMPT_SPAN]


def _children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    """The parent's child spans in the order they started."""
    assert parent.context is not None
    found = [
        s
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def test_an_attempt_is_one_trace_with_its_stages_as_child_spans(
    app: App, tmp_path: Path, spans: tuple[OtelTraces, InMemorySpanExporter]
) -> None:
    """A succeeding item: one root attempt span with the batch, item, attempt, correlation id
    and outcome, and claim → read → known → render → write → commit as its children, in
    order, within it."""
    traces, exporter = spans
    store = app.open_store()
    batch_id = _submit(app, write_photos(tmp_path / "src", 1))
    assert _run(app, store, batch_id, traces)["state"] == "succeeded"

    (attempt,) = _attempts(exporter)
    ((item, _),) = [(i["id"], i) for i in app.batches.items(batch_id)[0]]
    (ended,) = [
        e for e in app.leases.events(batch_id, item_id=item) if e.to_state.value == "succeeded"
    ]
    assert attempt.parent is None
    assert dict(attempt.attributes or {}) == {
        "batchcrop.batch.id": batch_id,
        "batchcrop.item.id": item,
        "batchcrop.attempt": 1,
        "batchcrop.correlation_id": ended.correlation_id,
        "batchcrop.worker.id": dict(attempt.attributes or {})["batchcrop.worker.id"],
        "batchcrop.outcome": "succeeded",
    }
    assert attempt.status.status_code is StatusCode.UNSET
    children = _children(exporter, attempt)
    assert [c.name for c in children] == [
        "batchcrop.claim",
        "batchcrop.read",
        "batchcrop.known",
        "batchcrop.render",
        "batchcrop.write",
        "batchcrop.commit",
    ]
    assert attempt.start_time == children[0].start_time
    for child in children:
        assert child.context is not None
        assert attempt.context is not None
        assert child.context.trace_id == attempt.context.trace_id
        assert attempt.start_time <= child.start_time <= child.end_time <= attempt.end_time  # type: ignore[operator]
        assert child.status.status_code is StatusCode.UNSET
    by_name = {c.name: dict(c.attributes or {}) for c in children}
    assert by_name["batchcrop.known"] == {"batchcrop.known": False}
    assert by_name["batchcrop.render"] == {"batchcrop.renditions": 2}
    assert by_name["batchcrop.write"] == {"batchcrop.objects": 3}
    assert by_name["batchcrop.commit"] == {"batchcrop.outcome": "succeeded"}


def test_a_failing_item_fails_its_attempt_span_and_the_stage_it_failed_in(
    app: App, tmp_path: Path, spans: tuple[OtelTraces, InMemorySpanExporter]
) -> None:
    """An undecodable source: the render span and the attempt span are errors with the item's
    category (never the decoder's message), the stages before it are not, nothing is written."""
    traces, exporter = spans
    store = app.open_store()
    batch_id = _submit(app, write_corrupt(tmp_path / "src")[:1])
    assert _run(app, store, batch_id, traces)["state"] == "failed"

    (attempt,) = _attempts(exporter)
    assert attempt.status.status_code is StatusCode.ERROR
    assert attempt.status.description == "invalid_image"
    attributes = dict(attempt.attributes or {})
    assert (attributes["batchcrop.outcome"], attributes["batchcrop.category"]) == (
        "failed",
        "invalid_image",
    )
    assert attributes["error.type"] == "invalid_image"
    children = {c.name: c for c in _children(exporter, attempt)}
    assert list(children) == [
        "batchcrop.claim",
        "batchcrop.read",
        "batchcrop.known",
        "batchcrop.render",
        "batchcrop.commit",
    ]
    render = children["batchcrop.render"]
    assert render.status.status_code is StatusCode.ERROR
    assert dict(render.attributes or {}) == {"error.type": "invalid_image"}
    assert render.events == ()  # no exception event: its message may name the source
    assert children["batchcrop.read"].status.status_code is StatusCode.UNSET


def test_a_render_in_a_child_process_is_the_parents_span(
    app: App, tmp_path: Path, spans: tuple[OtelTraces, InMemorySpanExporter]
) -> None:
    """With a render process, the render span is the parent's wait for the child, a child of
    the attempt span like the others."""
    traces, exporter = spans
    store = app.open_store()
    batch_id = _submit(app, write_photos(tmp_path / "src", 1))
    status = _run(app, store, batch_id, traces, concurrency=1, render_processes=1)
    assert status["state"] == "succeeded"

    (attempt,) = _attempts(exporter)
    (render,) = [c for c in _children(exporter, attempt) if c.name == "batchcrop.render"]
    assert dict(render.attributes or {}) == {"batchcrop.renditions": 2}
    assert render.end_time is not None
    assert render.start_time is not None
    assert render.end_time > render.start_time


def test_log_lines_of_an_attempt_carry_its_trace_and_span_ids(
    app: App,
    tmp_path: Path,
    spans: tuple[OtelTraces, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each line logged within the attempt carries the trace id and the id of the span it was
    logged in (a write line the write span's, the transition line the attempt span's, with
    the correlation id beside them)."""
    traces, exporter = spans
    store = app.open_store()
    batch_id = _submit(app, write_photos(tmp_path / "src", 1))
    with caplog.at_level(logging.DEBUG, logger="batchcrop"):
        _run(app, store, batch_id, traces)

    (attempt,) = _attempts(exporter)
    assert attempt.context is not None
    lines = {
        r.batchcrop_event: getattr(r, FIELDS_ATTRIBUTE)  # type: ignore[attr-defined]
        for r in caplog.records
        if hasattr(r, "batchcrop_event") and r.batchcrop_event in ("claim", "write", "transition")
    }
    assert set(lines) == {"claim", "write", "transition"}
    for fields in lines.values():
        assert fields["trace_id"] == f"{attempt.context.trace_id:032x}"
    assert lines["transition"]["span_id"] == f"{attempt.context.span_id:016x}"
    assert lines["transition"]["corr"] == dict(attempt.attributes or {})["batchcrop.correlation_id"]
    (write,) = [c for c in _children(exporter, attempt) if c.name == "batchcrop.write"]
    assert write.context is not None
    assert lines["write"]["span_id"] == f"{write.context.span_id:016x}"
    # The worker's own lines outside any attempt carry none.
    started = [r for r in caplog.records if getattr(r, "batchcrop_event", None) == "worker_started"]
    assert started
    assert "trace_id" not in getattr(started[0], FIELDS_ATTRIBUTE)


def test_a_callback_delivery_is_a_span_and_sends_its_trace_context(
    make_app: Callable[..., App],
    tmp_path: Path,
    spans: tuple[OtelTraces, InMemorySpanExporter],
) -> None:
    """A delivery's attempt is a root span with the delivery, batch, attempt and outcome, its
    status code, and the receiver gets the span as `traceparent`."""
    traces, exporter = spans
    app = make_app(callback_secret=SECRET, callback_hosts=("127.0.0.1:*",))
    store = app.open_store()
    with receiving([503]) as receiver:
        batch_id = _submit(app, write_photos(tmp_path / "src", 1), callback_url=receiver.url)
        _run(app, store, batch_id, traces)
        deliverer = app.deliverer("test-deliverer")
        assert deliverer is not None
        deliverer.traces = traces
        deadline = time.monotonic() + 60
        while not receiver.processed:
            assert time.monotonic() < deadline, receiver.requests
            if not deliverer.deliver_due():
                time.sleep(0.05)

    deliveries = sorted(
        (s for s in exporter.get_finished_spans() if s.name == DELIVERY_SPAN),
        key=lambda s: s.start_time or 0,
    )
    assert [dict(s.attributes or {})["batchcrop.outcome"] for s in deliveries] == [
        "retryable",
        "succeeded",
    ]
    first, second = deliveries
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "http_503"
    assert second.status.status_code is StatusCode.UNSET
    attributes = dict(second.attributes or {})
    assert attributes["batchcrop.batch.id"] == batch_id
    assert attributes["batchcrop.delivery.id"] == receiver.requests[-1].delivery
    assert attributes["batchcrop.attempt"] == 2
    assert attributes["http.response.status_code"] == 204
    assert second.parent is None
    assert second.context is not None
    sent = receiver.requests[-1].traceparent
    assert sent is not None
    assert sent.startswith(f"00-{second.context.trace_id:032x}-{second.context.span_id:016x}-")


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps each POST's path, content type and body."""

    received: list[tuple[str, str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_spans_are_exported_over_otlp_http_to_the_standard_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`open_traces(True)` posts protobuf spans to `OTEL_EXPORTER_OTLP_ENDPOINT`/v1/traces on a
    real socket, as service `batchcrop` with its version (or `OTEL_SERVICE_NAME`), by close."""
    received: list[tuple[str, str, bytes]] = []
    handler = type("Collector", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}"
    )
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    claim = Claim(
        item_id="item-1",
        group_id="batch-1",
        attempt=1,
        lease_token="token",
        lease_expires_at=datetime.now(UTC),
        payload={},
        correlation_id="corr-1",
    )
    try:
        traces = open_traces(True, service_version="9.9.9")
        now = time.time_ns()
        with traces.attempt(claim, worker_id="w", claimed=(now, now + 1000)), traces.stage("read"):
            pass
        traces.close()
    finally:
        server.shutdown()
        server.server_close()

    ((path, content_type, body),) = received
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    request = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = request.resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert (resource["service.name"], resource["service.version"]) == ("batchcrop", "9.9.9")
    names = {s.name: s for scope in resource_spans.scope_spans for s in scope.spans}
    assert set(names) == {"batchcrop.attempt", "batchcrop.claim", "batchcrop.read"}
    attempt = {a.key: a.value for a in names["batchcrop.attempt"].attributes}
    assert attempt["batchcrop.correlation_id"].string_value == "corr-1"
    assert names["batchcrop.read"].parent_span_id == names["batchcrop.attempt"].span_id


def test_tracing_on_without_the_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where OpenTelemetry cannot be imported, turning tracing on is a setting error naming
    the extra; off needs nothing."""
    monkeypatch.delitem(sys.modules, "batchcrop.traces.otel", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # how Python marks a missing module
    with pytest.raises(TracesUnavailable, match=r"batchcrop\[traces\]"):
        open_traces(True, service_version="0")
    assert not open_traces(False, service_version="0").enabled


OFF_PROBE = """
import json, sys
from batchcrop.app import build
from batchcrop.settings import Settings
from batchcrop.worker.worker import WorkerOptions
names = ["BATCHCROP_DATABASE_URL", "BATCHCROP_STORE", "BATCHCROP_CALLBACK_SECRET"]
app = build(Settings.load(env=dict(zip(names, sys.argv[1:], strict=True))))
app.upgrade()
worker = app.worker(app.open_store(), WorkerOptions())
deliverer = app.deliverer("probe")
assert deliverer is not None
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
print(json.dumps([app.traces.enabled, loaded]))
app.close()
"""


def test_tracing_off_imports_no_opentelemetry(tmp_path: Path) -> None:
    """By default a worker (and its deliverer) is built without a module of OpenTelemetry
    loaded: tracing off costs no import."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            OFF_PROBE,
            f"sqlite:///{tmp_path / 'b.db'}",
            f"file://{tmp_path}/s",
            SECRET,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "BATCHCROP_TRACES"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, []]


def test_a_stop_marks_its_stage_and_a_surprise_fails_it_by_its_class(
    spans: tuple[OtelTraces, InMemorySpanExporter],
) -> None:
    """A cancel leaving a stage is no failure (`batchcrop.stopped`); an exception without a
    category fails it with its class name, and never with its message."""
    traces, exporter = spans
    with pytest.raises(Cancelled), traces.stage("render"):
        raise Cancelled
    with pytest.raises(KeyError), traces.stage("write"):
        raise KeyError("/secret/path/of/a/source.jpg")
    render, write = exporter.get_finished_spans()
    assert render.status.status_code is StatusCode.UNSET
    assert dict(render.attributes or {}) == {"batchcrop.stopped": "cancelled"}
    assert write.status.status_code is StatusCode.ERROR
    assert (write.status.description, dict(write.attributes or {})) == (
        "KeyError",
        {"error.type": "KeyError"},
    )
    assert write.events == ()


def test_an_item_whose_outputs_are_known_has_no_render_or_write_span(
    app: App, tmp_path: Path, spans: tuple[OtelTraces, InMemorySpanExporter]
) -> None:
    """A second batch of the same source succeeds from its stored outputs: its attempt's
    children stop at `known` (true), then the commit."""
    traces, exporter = spans
    store = app.open_store()
    sources = write_photos(tmp_path / "src", 1)
    for _ in range(2):
        assert _run(app, store, _submit(app, sources), traces)["state"] == "succeeded"

    second = max(_attempts(exporter), key=lambda s: s.start_time or 0)
    children = _children(exporter, second)
    assert [c.name for c in children] == [
        "batchcrop.claim",
        "batchcrop.read",
        "batchcrop.known",
        "batchcrop.commit",
    ]
    assert dict(children[2].attributes or {}) == {"batchcrop.known": True}

"""Traces: an OpenTelemetry span per attempt, with a child span per stage, and a span per
callback delivery (docs/design.md §7, traces; ADR 0042).

Off by default. `open_traces(False)` (or `NO_TRACES`) is what every process gets unless
`BATCHCROP_TRACES` is on: it never imports opentelemetry, and each span it hands out is one
shared object whose methods do nothing, so an attempt pays a few method calls for it
(`bench/traces.py`). On, `open_traces(True)` loads `batchcrop.traces.otel`, which needs the
`traces` extra (`pip install batchcrop[traces]`) and exports over OTLP/HTTP as the standard
`OTEL_*` variables say (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, ...).

Span names are stable: `ATTEMPT_SPAN` with the children `STAGES` (each `batchcrop.<stage>`), and
`DELIVERY_SPAN`. Attributes carry ids, figures and categories, never source names, URLs or
error messages (the logs' rule, `batchcrop.logs`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from batchcrop.errors import Category
from leases import Claim

ATTEMPT_SPAN = "batchcrop.attempt"
DELIVERY_SPAN = "batchcrop.delivery"
CLAIM = "claim"
READ = "read"
KNOWN = "known"
RENDER = "render"
WRITE = "write"
COMMIT = "commit"
STAGES = (CLAIM, READ, KNOWN, RENDER, WRITE, COMMIT)
"""An attempt's stages, in order; `known` (the stored outputs looked up before a render) is there
only when not forced, and `render` and `write` only when they were not all known."""

NOT_FAILURES = frozenset({Category.INTERRUPTED, Category.CANCELLED, Category.DEADLINE_EXCEEDED})
"""The categories of an attempt told to stop (shutdown, cancel, deadline): a stage span they
leave is not failed, only marked `batchcrop.stopped`."""

Value = str | int | float | bool


class TracesUnavailable(ValueError):
    """Tracing is on but the `traces` extra is not installed: a setting that cannot be used (the
    CLI's usage exit), the message saying what to install."""


class Span(Protocol):
    """What batchcrop does with a span: attributes, and an error status with its category."""

    def set(self, key: str, value: Value | None) -> None:
        """Set attribute `key` (None: left out)."""

    def fail(self, category: str) -> None:
        """Mark the span failed: status ERROR, `error.type` the category (never a message)."""


class Traces(Protocol):
    """Where spans come from; thread-safe. A span is the current one (for its child spans and
    the log lines' `trace_id` and `span_id`) in the thread that entered it, until it exits."""

    enabled: bool

    def attempt(
        self, claim: Claim, *, worker_id: str, claimed: tuple[int, int] | None
    ) -> AbstractContextManager[Span]:
        """The span of one attempt at `claim`, from the start of its claim when `claimed`
        (the claim statement's start and end, `time.time_ns()`) gives it a `claim` child."""

    def stage(self, name: str) -> AbstractContextManager[Span]:
        """A child span of the current one for stage `name` (one of `STAGES`). An exception
        leaving it fails it with the exception's category (or its class name), except an
        interruption's (`NOT_FAILURES`)."""

    def delivery(self, claim: Claim, *, worker_id: str) -> AbstractContextManager[Span]:
        """The span of one callback delivery attempt."""

    def propagation(self) -> dict[str, str]:
        """The current span as HTTP headers (W3C `traceparent`, or what `OTEL_PROPAGATORS`
        names) for a request that continues the trace; empty when off."""

    def close(self) -> None:
        """Export what is buffered and stop (the process is ending)."""


class _NoSpan:
    """A span that records nothing."""

    def set(self, key: str, value: Value | None) -> None:
        pass

    def fail(self, category: str) -> None:
        pass


_NO_SPAN = _NoSpan()


class _NoSpans:
    """A reusable context manager entering `_NO_SPAN`: no generator made per span."""

    def __enter__(self) -> Span:
        return _NO_SPAN

    def __exit__(self, *_: object) -> None:
        return None


_NO_SPANS = _NoSpans()


class NoTraces:
    """Tracing off: every span is `_NO_SPAN`, nothing is imported or exported."""

    enabled = False

    def attempt(
        self, claim: Claim, *, worker_id: str, claimed: tuple[int, int] | None
    ) -> AbstractContextManager[Span]:
        return _NO_SPANS

    def stage(self, name: str) -> AbstractContextManager[Span]:
        return _NO_SPANS

    def delivery(self, claim: Claim, *, worker_id: str) -> AbstractContextManager[Span]:
        return _NO_SPANS

    def propagation(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


NO_TRACES: Traces = NoTraces()


def open_traces(enabled: bool, *, service_version: str) -> Traces:
    """`NO_TRACES`, or (`enabled`) an OTLP/HTTP exporting tracer configured by the `OTEL_*`
    variables, its service `batchcrop` unless `OTEL_SERVICE_NAME` says otherwise. Raises
    `TracesUnavailable` when the `traces` extra is missing."""
    if not enabled:
        return NO_TRACES
    try:
        from batchcrop.traces.otel import OtelTraces  # noqa: PLC0415  (only when on)
    except ImportError as exc:
        raise TracesUnavailable(
            f"BATCHCROP_TRACES is on but OpenTelemetry is not installed ({exc.name}): "
            "pip install 'batchcrop[traces]', or turn BATCHCROP_TRACES off"
        ) from None
    return OtelTraces.exporting(service_version=service_version)

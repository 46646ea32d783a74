"""Tracing on: `Traces` over the OpenTelemetry SDK (imported only from `open_traces(True)`).

The provider is this process's own, not OpenTelemetry's global one: nothing else in the process
is traced through it, and two in one process (tests) do not meet. Spans are batched and exported
over OTLP/HTTP by the SDK's `BatchSpanProcessor`, configured as the SDK reads it from the standard
variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`), `..._HEADERS`,
`..._TIMEOUT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and its
argument, `OTEL_BSP_*`. An export that fails is the SDK's to log and drop: an attempt never
waits for the collector.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from batchcrop.logs import FIELDS_ATTRIBUTE, LOGGER
from batchcrop.traces import (
    ATTEMPT_SPAN,
    CLAIM,
    DELIVERY_SPAN,
    NOT_FAILURES,
    Span,
    Value,
)
from leases import Claim

SERVICE = "batchcrop"
"""The service name spans carry unless `OTEL_SERVICE_NAME` (or the resource attributes) name
another."""
INSTRUMENTATION = "batchcrop"


class _OtelSpan:
    """`batchcrop.traces.Span` over an SDK span."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def set(self, key: str, value: Value | None) -> None:
        if value is not None:
            self.span.set_attribute(key, value)

    def fail(self, category: str) -> None:
        self.span.set_attribute("error.type", category)
        self.span.set_status(trace.StatusCode.ERROR, category)


class _TraceIds(logging.Filter):
    """Adds `trace_id` and `span_id` (W3C hex) to each batchcrop log line written while a span
    is current in the logging thread."""

    def filter(self, record: logging.LogRecord) -> bool:
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            fields = dict(getattr(record, FIELDS_ATTRIBUTE, {}))
            fields["trace_id"] = trace.format_trace_id(span_context.trace_id)
            fields["span_id"] = trace.format_span_id(span_context.span_id)
            setattr(record, FIELDS_ATTRIBUTE, fields)
        return True


def _claim_attributes(claim: Claim, worker_id: str) -> dict[str, Value]:
    return {
        "batchcrop.batch.id": claim.group_id,
        "batchcrop.item.id": claim.item_id,
        "batchcrop.attempt": claim.attempt,
        "batchcrop.correlation_id": claim.correlation_id,
        "batchcrop.worker.id": worker_id,
    }


class OtelTraces:
    """Spans from `provider`; while open, batchcrop's log lines carry the current span's ids."""

    enabled = True

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(INSTRUMENTATION)
        self._ids = _TraceIds()
        LOGGER.addFilter(self._ids)

    @classmethod
    def exporting(cls, *, service_version: str) -> OtelTraces:
        """Spans batched to the OTLP/HTTP endpoint the `OTEL_*` variables name."""
        resource = Resource.create({SERVICE_VERSION: service_version})
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: SERVICE}))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider)

    @contextmanager
    def attempt(
        self, claim: Claim, *, worker_id: str, claimed: tuple[int, int] | None
    ) -> Iterator[Span]:
        # A root span whatever is current: each attempt is a trace of its own.
        span = self.tracer.start_span(
            ATTEMPT_SPAN,
            context=otel_context.Context(),
            start_time=None if claimed is None else claimed[0],
            attributes=_claim_attributes(claim, worker_id),
        )
        if claimed is not None:
            # Measured before the attempt existed: the claim statement brought the claim.
            self.tracer.start_span(
                f"batchcrop.{CLAIM}",
                context=trace.set_span_in_context(span),
                start_time=claimed[0],
            ).end(end_time=claimed[1])
        with trace.use_span(span, end_on_exit=True, record_exception=False):
            yield _OtelSpan(span)

    def stage(self, name: str) -> AbstractContextManager[Span]:
        return self._current(f"batchcrop.{name}", None, root=False)

    def delivery(self, claim: Claim, *, worker_id: str) -> AbstractContextManager[Span]:
        attributes = _claim_attributes(claim, worker_id)
        # A delivery's lease group is the delivery; its batch is in the payload.
        attributes["batchcrop.batch.id"] = str(claim.payload.get("batch_id", ""))
        attributes["batchcrop.delivery.id"] = attributes.pop("batchcrop.item.id")
        return self._current(DELIVERY_SPAN, attributes, root=True)

    @contextmanager
    def _current(
        self, name: str, attributes: dict[str, Value] | None, *, root: bool
    ) -> Iterator[Span]:
        """A span current while entered (a trace of its own when `root`, else a child of the
        current span); an exception leaving it fails it with the exception's category or class
        name (an interruption's only marks it), never its message, which may name a source."""
        with self.tracer.start_as_current_span(
            name,
            context=otel_context.Context() if root else None,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            wrapped = _OtelSpan(span)
            try:
                yield wrapped
            except BaseException as exc:
                category = getattr(exc, "category", None)
                if category in NOT_FAILURES:
                    span.set_attribute("batchcrop.stopped", str(category))
                else:
                    wrapped.fail(type(exc).__name__ if category is None else str(category))
                raise

    def propagation(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        propagate.inject(headers)
        return headers

    def close(self) -> None:
        LOGGER.removeFilter(self._ids)
        self.provider.shutdown()

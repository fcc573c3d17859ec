"""OpenTelemetry traces, off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

One debate is one trace: the gateway's request span → ``parley.job`` (the Celery task, linked through
the message headers) → ``parley.pool`` (and the retriever's request span, linked through the HTTP
headers) and ``parley.round`` → ``parley.llm`` for every call. Spans carry the job id and batch id;
prompt and reply text only when the operator sets ``PARLEY_TRACE_PROMPTS``.

Without a configured provider the OpenTelemetry API hands out no-op spans, so instrumented code costs
next to nothing and needs no ``if``. ``configure_tracing`` sets the process-wide provider once.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from services.observability.settings import ObservabilitySettings

log = logging.getLogger("parley.telemetry")

TRACER_NAME = "parley"
# Requests that would only add noise to every trace backend.
EXCLUDED_URLS = "healthz,metrics"


@dataclass
class _State:
    provider: TracerProvider | None = None
    trace_prompts: bool = False
    service: str = ""
    instrumented: set[int] = field(default_factory=set)


_state = _State()


def configure_tracing(
    settings: ObservabilitySettings,
    service: str,
    *,
    exporter: SpanExporter | None = None,
    batch: bool = True,
) -> bool:
    """Install the process's tracer provider when an endpoint (or, in tests, ``exporter``) is given.

    Returns whether tracing is on. Safe to call again: the first provider stays (OpenTelemetry allows
    one per process).
    """
    if _state.provider is not None:
        if exporter is not None:  # a test's exporter joins the provider already in place
            _state.provider.add_span_processor(SimpleSpanProcessor(exporter))
        return True
    if exporter is None and not settings.otlp_endpoint:
        return False

    if exporter is None:
        # lazy: the OTLP exporter brings protobuf (~30 ms); loaded only when tracing is on
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # The variable names the collector's base URL; traces go to its /v1/traces (OTLP/HTTP).
        assert settings.otlp_endpoint is not None
        exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint.rstrip("/") + "/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    # The batch processor re-creates its export thread in forked Celery children by itself.
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _state.provider = provider
    _state.trace_prompts = settings.trace_prompts
    _state.service = service
    _connect_celery_publish()
    log.info("tracing on: spans of %s go to %s", service, settings.otlp_endpoint or "the given exporter")
    return True


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def flush(timeout_ms: int = 5000) -> None:
    """Export buffered spans now (a Celery child may be recycled before the batch timer fires)."""
    if _state.provider is not None:
        _state.provider.force_flush(timeout_ms)


def instrument_fastapi(app: FastAPI) -> None:
    """Server spans for the app's requests, continuing the caller's trace from its headers."""
    if _state.provider is None or id(app) in _state.instrumented:
        return
    # lazy: pulls in FastAPI and Starlette; only a traced HTTP app needs it (the worker never does)
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # One server span per request; the ASGI receive/send sub-spans would only repeat its timing.
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=_state.provider, excluded_urls=EXCLUDED_URLS, exclude_spans=["receive", "send"]
    )
    _state.instrumented.add(id(app))


# --- propagation -----------------------------------------------------------------------------------
def inject(carrier: dict[str, Any]) -> dict[str, Any]:
    """Write the current trace context into ``carrier`` (``traceparent``, ``tracestate``)."""
    propagate.inject(carrier)
    return carrier


def extract(carrier: Mapping[str, Any]) -> otel_context.Context:
    return propagate.extract({k: v for k, v in carrier.items() if isinstance(v, str)})


def _inject_into_message(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is not None:
        inject(headers)


def _connect_celery_publish() -> None:
    # Every published task carries the publisher's trace context in its message headers; the worker
    # reads it back in ``job_span``. A signal, so the enqueue code needs no tracing knowledge.
    from celery.signals import before_task_publish

    before_task_publish.connect(_inject_into_message, weak=False, dispatch_uid="parley-trace-publish")


class PropagatingTransport(httpx.AsyncBaseTransport):
    """An httpx transport that adds the current trace context to every request it sends."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        request.headers.update(carrier)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def client_transport(verify: ssl.SSLContext | bool = True) -> httpx.AsyncBaseTransport | None:
    """The transport for calls to other Parley services: propagating when tracing is on (checking TLS
    with ``verify``, as the client would without it)."""
    if _state.provider is None:
        return None
    return PropagatingTransport(httpx.AsyncHTTPTransport(verify=verify))


# --- spans of a job ----------------------------------------------------------------------------------
@contextmanager
def job_span(job_id: str, message_headers: Mapping[str, Any] | None = None) -> Iterator[Span]:
    """``parley.job``: the worker's span for one delivery, a child of the publisher's span."""
    parent = extract(message_headers) if message_headers else None
    with tracer().start_as_current_span(
        "parley.job", context=parent, kind=SpanKind.CONSUMER, attributes={"parley.job_id": job_id}
    ) as span:
        yield span
    flush()


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span]:
    """A child span of the current one; ``None`` attributes are left out."""
    attrs = {f"parley.{k}": v for k, v in attributes.items() if v is not None}
    with tracer().start_as_current_span(name, attributes=attrs) as current:
        yield current


class RoundSpans:
    """``parley.round`` spans of one debate and the ``parley.llm`` spans under them.

    Protocols only announce ``round.completed``; a round's span opens with its first call and ends with
    that event. Calls after their round ended (a final summary) hang off the job span instead.
    """

    def __init__(self, job_context: otel_context.Context | None = None) -> None:
        self._parent = job_context if job_context is not None else otel_context.get_current()
        self._open: dict[int, Span] = {}
        self._ended: set[int] = set()

    def _round_context(self, rnd: int) -> otel_context.Context:
        if rnd <= 0 or rnd in self._ended:
            return self._parent
        current = self._open.get(rnd)
        if current is None:
            current = self._open[rnd] = tracer().start_span(
                "parley.round", context=self._parent, attributes={"parley.round": rnd}
            )
        return trace.set_span_in_context(current, self._parent)

    def end_round(self, rnd: int) -> None:
        for r in sorted(r for r in self._open if r <= rnd):
            self._open.pop(r).end()
            self._ended.add(r)

    def abort(self, error: BaseException) -> None:
        """End every open round span as failed (the debate stops with ``error``)."""
        for r, open_span in list(self._open.items()):
            open_span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            open_span.end()
            self._ended.add(r)
        self._open.clear()

    @contextmanager
    def llm_call(
        self,
        rnd: int,
        role: str,
        agent: int | None,
        model: str,
        endpoint: str,
        messages: Sequence[Mapping[str, Any]],
    ) -> Iterator[LLMSpan]:
        attrs: dict[str, Any] = {
            "parley.round": rnd,
            "parley.role": role,
            "gen_ai.request.model": model,
            "parley.endpoint": endpoint,
        }
        if agent is not None:
            attrs["parley.agent"] = agent
        if _state.trace_prompts:
            attrs["parley.prompt"] = json.dumps(list(messages), ensure_ascii=False)
        with tracer().start_as_current_span(
            "parley.llm", context=self._round_context(rnd), kind=SpanKind.CLIENT, attributes=attrs
        ) as current:
            try:
                yield LLMSpan(current)
            except BaseException as exc:
                self.abort(exc)
                raise


@dataclass
class LLMSpan:
    span: Span

    def record(self, *, text: str, prompt_tokens: int, completion_tokens: int, attempts: int) -> None:
        self.span.set_attribute("gen_ai.usage.input_tokens", prompt_tokens)
        self.span.set_attribute("gen_ai.usage.output_tokens", completion_tokens)
        self.span.set_attribute("parley.attempts", attempts)
        if _state.trace_prompts:
            self.span.set_attribute("parley.reply", text)

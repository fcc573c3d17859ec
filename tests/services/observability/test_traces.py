"""Retrieval metrics and the trace of one debate, with the retriever app over HTTP on a small real index.

Traces: the gateway, a Celery worker and the retriever run in this process (the worker as Celery's
in-process test worker on the real Redis broker), all exporting to one in-memory exporter, so the whole
tree of one debate can be checked: the gateway's request → ``parley.job`` (through the Celery message
headers) → ``parley.pool`` → the retriever's request (through the HTTP headers), and
``parley.round`` → ``parley.llm`` for every call of the transcript.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from api.guards import hash_key
from api.settings import ApiSettings
from debate_worker.celery_app import create_worker_app
from debate_worker.tasks import WorkerRuntime
from debate_worker.worker_settings import WorkerSettings
from services.llm.settings import LLMSettings
from services.observability import telemetry
from services.observability.settings import ObservabilitySettings
from services.settings import RetrieverClientSettings
from tests.api.support import (
    SELECT,
    ApiServer,
    RedisServer,
    WorkerProcess,
    running_redis,
    wait_status,
    worker_env,
)
from tests.services.observability.test_metrics_integration import Scrape
from tests.support.scripted_llm import ScriptedLLM, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TITLES = ["Mona Lisa", "Leonardo da Vinci", "Tokyo", "Mount Everest"]
KEY = "trace-test-key"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """Tracing on for this process (before any app is built), exporting to memory."""
    spans = InMemorySpanExporter()
    assert telemetry.configure_tracing(ObservabilitySettings(), "parley-test", exporter=spans, batch=False)
    return spans


@pytest.fixture(scope="module")
def retriever_url(exporter: InMemorySpanExporter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    support = pytest.importorskip("tests.retriever.support")
    from retriever.app import create_app

    settings = support.build_slice_index(tmp_path_factory.mktemp("retriever") / "index", TITLES)
    with support.AppServer(create_app(settings)) as server:
        yield str(server.url).rstrip("/")


def test_pool_cache_miss_then_hit_and_stage_latencies(retriever_url: str) -> None:
    url = f"{retriever_url}/metrics"
    before = Scrape.get(url)
    body = {"question": "who painted the mona lisa", "k_wiki": 2, "k_web": 0}
    first = httpx.post(f"{retriever_url}/v1/pools", json=body, timeout=60)
    second = httpx.post(f"{retriever_url}/v1/pools", json=body, timeout=60)
    assert first.status_code == second.status_code == 200
    assert (first.json()["cached"], second.json()["cached"]) == (False, True)
    bad = httpx.post(f"{retriever_url}/v1/pools", json={"question": ""}, timeout=10)
    assert bad.status_code == 422
    after = Scrape.get(url)

    assert after.delta(before, "parley_pool_requests_total", cache="miss") == 1
    assert after.delta(before, "parley_pool_requests_total", cache="hit") == 1
    # One observation per stage the retriever timed: the build's stages once, the cache lookup
    # once, the total twice.
    timings = [first.json()["timings_ms"], second.json()["timings_ms"]]
    stages = set(timings[0]) | set(timings[1])
    assert {"total_ms", "cache_ms", "dense_ms"} <= stages
    for stage in stages:
        expected = sum(stage in t for t in timings)
        source = stage.removesuffix("_ms")
        assert after.delta(before, "parley_retrieval_seconds_count", source=source) == expected, source
    assert after.delta(before, "parley_http_requests_total", service="retriever", route="/v1/pools") == 3
    assert after.delta(before, "parley_http_requests_total", route="/v1/pools", status="422") == 1


@pytest.fixture(scope="module")
def stack(
    exporter: InMemorySpanExporter, retriever_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ApiServer, ScriptedLLM]]:
    from celery.contrib.testing.worker import start_worker

    redis_gen = running_redis(tmp_path_factory.mktemp("redis"))
    redis: RedisServer = next(redis_gen)
    try:
        with ScriptedLLM(latency_s=0.01) as llm:
            llm.on(SELECT, "The most helpful knowledge is [1].")
            llm.on("respond with [Yes]", "[Yes]")
            llm.on("summarize the final answer", "The final answer is [Leonardo da Vinci].")
            llm.on("Question:", "The answer is [Leonardo da Vinci].")
            settings = WorkerSettings(redis_url=redis.url, worker_pool="solo")
            runtime = WorkerRuntime(
                settings,
                LLMSettings(base_url=llm.base_url, model="scripted", structured_output="off"),
                RetrieverClientSettings(url=retriever_url),
            )
            app = create_worker_app(settings, runtime)
            api_settings = ApiSettings(redis_url=redis.url, keys={"tracer": hash_key(KEY)})
            with (
                ApiServer(api_settings) as api,
                start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30),
            ):
                yield api, llm
    finally:
        next(redis_gen, None)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """A finished span's attributes (the SDK types them as optional)."""
    return dict(span.attributes or {})


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_one_debate_is_one_trace_from_request_to_each_llm_call(
    stack: tuple[ApiServer, ScriptedLLM], exporter: InMemorySpanExporter
) -> None:
    api, _ = stack
    exporter.clear()
    config: dict[str, Any] = {"knowledge": "wikipedia", "k_wiki": 2, "k_web": 0}
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        accepted = client.post(
            "/v1/debates", json={"question": "who painted the mona lisa", "config": config}
        )
        job_id = accepted.json()["job_id"]
        job = wait_status(client, job_id, {"completed", "failed"}, timeout_s=120)
    assert job["status"] == "completed", job
    telemetry.flush()
    spans = list(exporter.get_finished_spans())

    [job_span] = [s for s in spans if s.name == "parley.job" and attrs(s)["parley.job_id"] == job_id]
    trace_spans = [s for s in spans if s.context.trace_id == job_span.context.trace_id]
    by_id = {s.context.span_id: s for s in trace_spans}
    assert job_span.kind == SpanKind.CONSUMER

    # request → job: the gateway's server span published the task.
    assert job_span.parent is not None
    request = by_id[job_span.parent.span_id]
    assert request.kind == SpanKind.SERVER and request.name == "POST /v1/debates"
    assert request.parent is None
    # No ASGI send/receive sub-spans: one span per request.
    assert not [s for s in trace_spans if s.name.endswith(("http send", "http receive"))]

    # job → pool → the retriever's own request span.
    [pool] = [s for s in _children(trace_spans, job_span) if s.name == "parley.pool"]
    assert attrs(pool)["parley.job_id"] == job_id
    retriever_requests = [s for s in _children(trace_spans, pool) if s.kind == SpanKind.SERVER]
    assert [s.name for s in retriever_requests] == ["POST /v1/pools"]

    # job → round → one span per LLM call of the transcript, in that round.
    transcript = job["result"]["transcript"]
    rounds = [s for s in _children(trace_spans, job_span) if s.name == "parley.round"]
    assert sorted(attrs(s)["parley.round"] for s in rounds) == list(range(1, job["result"]["rounds"] + 1))
    llm_spans = [s for s in trace_spans if s.name == "parley.llm"]
    assert len(llm_spans) == len(transcript)
    for s in llm_spans:
        parent = by_id[s.parent.span_id] if s.parent else None
        assert parent is not None and parent.name in ("parley.round", "parley.job")
        if parent.name == "parley.round":
            assert attrs(parent)["parley.round"] == attrs(s)["parley.round"]
        assert attrs(s)["parley.endpoint"] in ("debater", "judge", "summarizer")
        assert attrs(s)["gen_ai.usage.input_tokens"] > 0
        # Prompt text stays out unless the operator turns it on.
        assert "parley.prompt" not in attrs(s) and "parley.reply" not in attrs(s)
    roles_in_round_1 = {
        attrs(s)["parley.role"]
        for r in rounds
        if attrs(r)["parley.round"] == 1
        for s in _children(trace_spans, r)
    }
    assert {"select", "debater", "judge"} <= roles_in_round_1
    assert sorted(str(attrs(s)["parley.role"]) for s in llm_spans) == sorted(r["role"] for r in transcript)


def test_trace_prompts_setting_adds_prompt_and_reply(exporter: InMemorySpanExporter) -> None:
    exporter.clear()
    previous = telemetry._state.trace_prompts
    telemetry._state.trace_prompts = True
    try:
        spans = telemetry.RoundSpans()
        with spans.llm_call(1, "debater", 0, "m", "debater", [{"role": "user", "content": "Q?"}]) as call:
            call.record(text="A.", prompt_tokens=3, completion_tokens=1, attempts=1)
        spans.end_round(1)
    finally:
        telemetry._state.trace_prompts = previous
    [llm] = [s for s in exporter.get_finished_spans() if s.name == "parley.llm"]
    assert attrs(llm)["parley.prompt"] == '[{"role": "user", "content": "Q?"}]'
    assert attrs(llm)["parley.reply"] == "A."


class OtlpReceiver:
    """An OTLP/HTTP trace collector (protobuf), enough to receive what a worker process exports."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                receiver.paths.append(self.path)
                for resource_spans in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope in resource_spans.scope_spans:
                        for span in scope.spans:
                            attrs = {a.key: _any_value(a.value) for a in span.attributes}
                            receiver.spans.append(
                                {
                                    "name": span.name,
                                    "trace_id": span.trace_id.hex(),
                                    "span_id": span.span_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                    "service": service.get("service.name"),
                                    "attributes": attrs,
                                }
                            )
                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def test_prefork_worker_exports_the_job_over_otlp_as_a_child_of_the_request(
    exporter: InMemorySpanExporter, retriever_url: str, tmp_path: Path
) -> None:
    """The production path: a worker process (prefork) with OTEL_EXPORTER_OTLP_ENDPOINT, the trace
    context travelling in a real Celery message and in the worker's HTTP call to the retriever."""
    receiver = OtlpReceiver()
    redis_gen = running_redis(tmp_path / "redis")
    redis: RedisServer = next(redis_gen)
    try:
        with ScriptedLLM(latency_s=0.01) as llm:
            llm.on(SELECT, "The most helpful knowledge is [1].")
            llm.on("respond with [Yes]", "[Yes]")
            llm.on("Question:", "The answer is [Leonardo da Vinci].")
            env = worker_env(
                redis.url,
                llm.base_url,
                retriever_url,
                OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
                PARLEY_WORKER_METRICS_PORT="0",
            )
            api_settings = ApiSettings(redis_url=redis.url, keys={"tracer": hash_key(KEY)})
            with (
                WorkerProcess(env, tmp_path / "worker.log", concurrency=1) as worker,
                ApiServer(api_settings) as api,
                httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c,
            ):
                exporter.clear()
                config = {"knowledge": "wikipedia", "k_wiki": 2, "k_web": 0}
                job_id = c.post(
                    "/v1/debates", json={"question": "who painted the mona lisa", "config": config}
                ).json()["job_id"]
                job = wait_status(c, job_id, {"completed", "failed"}, timeout_s=120)
                assert job["status"] == "completed", (job, worker.log()[-2000:])
                deadline = time.monotonic() + 20
                while not any(s["name"] == "parley.job" for s in receiver.spans):
                    assert time.monotonic() < deadline, worker.log()[-2000:]
                    time.sleep(0.1)
    finally:
        next(redis_gen, None)
        receiver.close()

    assert set(receiver.paths) == {"/v1/traces"}
    [job_span] = [s for s in receiver.spans if s["name"] == "parley.job"]
    assert job_span["attributes"]["parley.job_id"] == job_id and job_span["service"] == "parley-worker"
    local = list(exporter.get_finished_spans())
    [request] = [s for s in local if s.name == "POST /v1/debates"]
    assert job_span["trace_id"] == f"{request.context.trace_id:032x}"
    assert job_span["parent"] == f"{request.context.span_id:016x}"
    [pool] = [s for s in receiver.spans if s["name"] == "parley.pool"]
    assert pool["parent"] == job_span["span_id"]
    [retriever_request] = [s for s in local if s.name == "POST /v1/pools"]
    assert (
        retriever_request.parent is not None and f"{retriever_request.parent.span_id:016x}" == pool["span_id"]
    )
    llm_spans = [s for s in receiver.spans if s["name"] == "parley.llm"]
    assert len(llm_spans) == len(job["result"]["transcript"])
    assert all(s["trace_id"] == job_span["trace_id"] for s in llm_spans)

"""Every Prometheus metric Parley exports, defined once, and the helpers that expose them.

Each process (gateway, retriever, worker) imports this module and observes only what happens in it;
Prometheus joins the three scrapes. All metrics carry labels, so no value exists until the first
observation: that keeps a process's exposition to what it really does, and lets the worker switch
prometheus-client to multiprocess mode (one mmap file per prefork child, summed at scrape time) after
this module was imported.

Label values are bounded: roles, endpoint *names* (``debater``, ``judge``, ``summarizer``; never a URL,
which could carry credentials), model names from the settings, owner names of API keys (never a key).
"""

from __future__ import annotations

import hmac
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import prometheus_client
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from fastapi import FastAPI

# Debates take seconds to many minutes; LLM calls tens of milliseconds to a few minutes.
DEBATE_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)
QUEUE_BUCKETS = (0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
LLM_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)
RETRIEVAL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20)

# --- jobs (worker) -------------------------------------------------------------------------------
JOBS = Counter(
    "parley_jobs",
    "Deliveries of debate jobs by how they ended: completed, failed, cancelled or skipped "
    "(a redelivery of a finished or leased job)",
    ["status", "queue"],
)
JOB_DURATION = Histogram(
    "parley_job_duration_seconds",
    "Wall time of one delivery of a job in the worker, from taking it to its end",
    ["status", "queue"],
    buckets=DEBATE_BUCKETS,
)
JOB_QUEUE_TIME = Histogram(
    "parley_job_queue_seconds",
    "Time from submission to a worker first starting the job",
    ["queue"],
    buckets=QUEUE_BUCKETS,
)
DEBATE_ROUNDS = Histogram(
    "parley_debate_rounds",
    "Rounds a completed debate took",
    ["protocol"],
    buckets=ROUND_BUCKETS,
)
JOB_TOKENS = Counter(
    "parley_job_tokens",
    "Tokens spent by completed jobs, per API key owner (kind: prompt, cached, completion)",
    ["key", "kind"],
)

# --- LLM calls (worker) --------------------------------------------------------------------------
LLM_CALLS = Counter(
    "parley_llm_calls",
    "Chat completions that returned, by role, model and endpoint name",
    ["role", "model", "endpoint"],
)
LLM_LATENCY = Histogram(
    "parley_llm_call_seconds",
    "Latency of one chat completion (the attempt that answered)",
    ["role", "model", "endpoint"],
    buckets=LLM_BUCKETS,
)
LLM_TOKENS = Counter(
    "parley_llm_tokens",
    "Tokens of chat completions by role, model, endpoint name and kind (prompt, cached, completion)",
    ["role", "model", "endpoint", "kind"],
)
LLM_ERRORS = Counter(
    "parley_llm_errors",
    "Chat completions that failed after the client's retries, by error class",
    ["role", "model", "endpoint", "error"],
)
LLM_LATE_SETTLEMENTS = Counter(
    "parley_llm_late_settlements",
    "Calls (and attempts) the debate stopped waiting for, a cancellation or a timeout, settled when "
    "their request ended, by outcome: served (charged what the server reported), refused (nothing "
    "served, given back), worst_case (cut before the server answered: its worst case stays charged)",
    ["role", "model", "endpoint", "outcome"],
)

# --- LLM server replicas (worker): endpoints that list several base URLs ------------------------
# Labels: the endpoint's name (default, debater, judge, summarizer or a named endpoint) and the
# replica's position in its list (0, 1, …), never the URL.
LLM_REPLICA_ATTEMPTS = Counter(
    "parley_llm_replica_attempts",
    "Attempts sent to each replica of an LLM endpoint, by outcome (ok, failed, cancelled)",
    ["endpoint", "replica", "outcome"],
)
LLM_REPLICA_EJECTIONS = Counter(
    "parley_llm_replica_ejections",
    "Times a replica was taken out of its endpoint after a failed attempt (it is probed again later)",
    ["endpoint", "replica"],
)
LLM_REPLICA_IN_FLIGHT = Gauge(
    "parley_llm_replica_in_flight",
    "Attempts in flight (or waiting for the concurrency limit) per replica",
    ["endpoint", "replica"],
    multiprocess_mode="livesum",
)

# --- retrieval (retriever) -----------------------------------------------------------------------
RETRIEVAL_LATENCY = Histogram(
    "parley_retrieval_seconds",
    "Time of each stage of building a knowledge pool, by source (dense, bm25, web, embed, fuse, "
    "dedupe, cache, total)",
    ["source"],
    buckets=RETRIEVAL_BUCKETS,
)
POOL_REQUESTS = Counter(
    "parley_pool_requests", "Knowledge pool requests, by whether the pool cache answered", ["cache"]
)

# --- gateway and retriever HTTP --------------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "parley_http_requests",
    "HTTP requests by service, method, route template and status code",
    ["service", "method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "parley_http_request_seconds",
    "HTTP request latency by service, method and route template",
    ["service", "method", "route"],
    buckets=HTTP_BUCKETS,
)
REFUSALS = Counter(
    "parley_refusals",
    "Requests refused to protect the service, by reason (rate_limit, quota) and API key owner",
    ["reason", "key"],
)

QUEUE_DEPTH_NAME = "parley_queue_depth"

TOKEN_KINDS = ("prompt", "cached", "completion")


def exported_names() -> set[str]:
    """Every sample name this module can export (counters with ``_total``, histograms with their
    series), so dashboards and alert rules can be checked against what the code really exports."""
    names = {QUEUE_DEPTH_NAME}
    for metric in (
        JOBS, JOB_DURATION, JOB_QUEUE_TIME, DEBATE_ROUNDS, JOB_TOKENS, LLM_CALLS, LLM_LATENCY,
        LLM_TOKENS, LLM_ERRORS, LLM_REPLICA_ATTEMPTS, LLM_REPLICA_EJECTIONS, LLM_REPLICA_IN_FLIGHT,
        RETRIEVAL_LATENCY, POOL_REQUESTS, HTTP_REQUESTS, HTTP_LATENCY, REFUSALS,
    ):  # fmt: skip
        for family in metric.describe():
            if family.type == "counter":
                names |= {f"{family.name}_total", f"{family.name}_created"}
            elif family.type == "histogram":
                names |= {f"{family.name}_{s}" for s in ("bucket", "count", "sum", "created")}
            else:
                names.add(family.name)
    return names


# --- observation helpers -------------------------------------------------------------------------
def observe_llm_call(
    role: str,
    model: str,
    endpoint: str,
    *,
    latency_s: float,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int | None,
) -> None:
    """Count one answered chat completion and its tokens."""
    LLM_CALLS.labels(role, model, endpoint).inc()
    LLM_LATENCY.labels(role, model, endpoint).observe(latency_s)
    LLM_TOKENS.labels(role, model, endpoint, "prompt").inc(prompt_tokens)
    LLM_TOKENS.labels(role, model, endpoint, "completion").inc(completion_tokens)
    LLM_TOKENS.labels(role, model, endpoint, "cached").inc(cached_tokens or 0)


def observe_llm_error(role: str, model: str, endpoint: str, error: BaseException) -> None:
    LLM_ERRORS.labels(role, model, endpoint, type(error).__name__).inc()


def observe_late_settlement(
    role: str,
    model: str,
    endpoint: str,
    outcome: str,
    *,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cached_tokens: int | None = None,
) -> None:
    """A call the debate stopped waiting for has ended (``outcome``: served, refused, worst_case); the
    tokens a server served for it count with every other chat completion's."""
    LLM_LATE_SETTLEMENTS.labels(role, model, endpoint, outcome).inc()
    if prompt_tokens or completion_tokens:
        LLM_TOKENS.labels(role, model, endpoint, "prompt").inc(prompt_tokens)
        LLM_TOKENS.labels(role, model, endpoint, "completion").inc(completion_tokens)
        LLM_TOKENS.labels(role, model, endpoint, "cached").inc(cached_tokens or 0)


def job_outcome(status: str) -> str:
    """The ``status`` label for a runner result such as ``completed`` or ``skipped:leased``."""
    if status.startswith("skipped:cancelled") or status == "cancelled":
        return "cancelled"
    if status in ("completed", "failed"):
        return status
    return "skipped"


def observe_job(queue: str, status: str, duration_s: float) -> None:
    """Count one delivery of a job and how long the worker spent on it."""
    outcome = job_outcome(status)
    JOBS.labels(outcome, queue or "unknown").inc()
    JOB_DURATION.labels(outcome, queue or "unknown").observe(duration_s)


def observe_pool(cached: bool, timings_ms: dict[str, float]) -> None:
    """Count one pool request and the time of each stage the retriever reported."""
    POOL_REQUESTS.labels("hit" if cached else "miss").inc()
    for stage, ms in timings_ms.items():
        RETRIEVAL_LATENCY.labels(stage.removesuffix("_ms")).observe(ms / 1000.0)


# --- multiprocess mode (the Celery prefork pool, several uvicorn workers) --------------------------
def enable_multiprocess(directory: Path) -> Path:
    """Switch this process and the processes it forks or spawns to multiprocess metrics in
    ``directory``, which is emptied first (files of a previous run would be summed in)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    # prometheus-client and child processes read this variable; it is the library's only channel.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    # Metric values created from now on live in per-process mmap files. Safe after import because
    # every metric above has labels, so none has a value yet.
    values.ValueClass = values.MultiProcessValue()
    return directory


def worker_metrics_dir() -> Path:
    """A fresh metrics folder for this worker process, ``<tmp>/parley-worker-metrics/<pid>``; the
    folders of worker processes that are gone are removed (they would pile up across restarts)."""
    parent = Path(tempfile.gettempdir()) / "parley-worker-metrics"
    for old in parent.glob("*"):
        if old.name.isdigit() and not _alive(int(old.name)):
            shutil.rmtree(old, ignore_errors=True)
    return parent / str(os.getpid())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") if values.ValueClass is not values.MutexValue else None


def registry_for_scrape(extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """The registry one scrape renders: the process's own, or the sum of all processes' files."""
    path = multiprocess_dir()
    if path is None and not extra:
        return REGISTRY
    registry = CollectorRegistry()
    if path is not None:
        multiprocess.MultiProcessCollector(registry, path=path)
    else:
        registry.register(_Forward(REGISTRY))
    for collector in extra:
        registry.register(collector)
    return registry


class _Forward(Collector):
    """Exposes another registry's metrics inside a per-scrape registry."""

    def __init__(self, source: CollectorRegistry) -> None:
        self._source = source

    def collect(self) -> Iterator[Any]:
        yield from self._source.collect()


def render(extra: Iterable[Collector] = ()) -> bytes:
    return generate_latest(registry_for_scrape(extra))


def serve_metrics(port: int, host: str = "127.0.0.1", extra: Iterable[Collector] = ()) -> Any:
    """Serve ``/metrics`` on ``port`` from a thread: the worker, which has no HTTP app, and the
    gateway's operator port. Loopback by default: metrics name keys and are for the operator only."""
    extra = tuple(extra)
    path = multiprocess_dir()
    registry = registry_for_scrape(extra) if (path is not None or extra) else REGISTRY
    server, _thread = prometheus_client.start_http_server(port, host, registry=registry)
    return server


def serve_operator_metrics(port: int, host: str, extra: Iterable[Collector] = ()) -> Any | None:
    """``serve_metrics`` for a process that may not be the only one on the port (uvicorn workers,
    test gateways): the first to bind serves them all (multiprocess metrics are summed from files);
    the others log it and go on. ``None`` when not served (port 0 or taken)."""
    if not port:
        return None
    try:
        return serve_metrics(port, host, extra)
    except OSError as exc:
        logging.getLogger("parley.metrics").warning(
            "/metrics not served on %s:%d (%s); another process serves it or the port is taken",
            host,
            port,
            exc.strerror,
        )
        return None


# --- Celery queue depth (gateway) ----------------------------------------------------------------
# kombu's Redis transport keeps one list per queue and priority; priority 0 is the bare name.
_PRIORITY_SEP = "\x06\x16"
_PRIORITIES = (0, 3, 6, 9)


class QueueDepthCollector(Collector):
    """``parley_queue_depth{queue}``: messages waiting in each Celery queue, read from Redis at scrape
    time (a gauge set on a timer would be stale, and only the broker knows the truth)."""

    def __init__(self, redis_client: Any, queues: Sequence[str]) -> None:
        self._redis = redis_client
        self._queues = tuple(queues)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(QUEUE_DEPTH_NAME, "Messages waiting in each Celery queue", labels=["queue"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            QUEUE_DEPTH_NAME, "Messages waiting in each Celery queue", labels=["queue"]
        )
        try:
            with self._redis.pipeline(transaction=False) as pipe:
                for queue in self._queues:
                    for pri in _PRIORITIES:
                        pipe.llen(queue if pri == 0 else f"{queue}{_PRIORITY_SEP}{pri}")
                lengths = pipe.execute()
        except Exception:  # a scrape must not fail because the broker blinked; the gap is visible
            return
        for i, queue in enumerate(self._queues):
            n = len(_PRIORITIES)
            family.add_metric([queue], float(sum(int(x) for x in lengths[i * n : (i + 1) * n])))
        yield family


# --- FastAPI apps ---------------------------------------------------------------------------------
def instrument_app(
    app: FastAPI,
    service: str,
    *,
    extra: Callable[[], Iterable[Collector]] | None = None,
    serve: bool = True,
    token: str | None = None,
) -> None:
    """Count the app's requests by route template and status (prometheus-fastapi-instrumentator does
    the ASGI work) and serve ``GET /metrics``; ``extra`` adds scrape-time collectors.

    ``serve=False`` leaves ``/metrics`` off the app (it is served elsewhere, see ``serve_metrics``);
    with ``token`` a scrape must send ``Authorization: Bearer <token>`` (else 401).
    """
    # lazy: FastAPI and the instrumentator load only for an HTTP app (the worker has none)
    from fastapi import Request, Response
    from prometheus_fastapi_instrumentator import Instrumentator
    from prometheus_fastapi_instrumentator.metrics import Info

    def record(info: Info) -> None:
        HTTP_REQUESTS.labels(service, info.method, info.modified_handler, info.modified_status).inc()
        HTTP_LATENCY.labels(service, info.method, info.modified_handler).observe(info.modified_duration)

    # Our own metric functions only: the instrumentator's defaults would register process-global
    # metrics once per app (two apps in one process would fight over them).
    instrumentator = Instrumentator(
        should_group_status_codes=False,
        should_ignore_untemplated=False,
        excluded_handlers=["^/metrics$"],
        registry=CollectorRegistry(),
    )
    instrumentator.add(record).instrument(app)

    def metrics(request: Request) -> Response:
        """Prometheus metrics of this process (text exposition format)."""
        if token is not None:
            presented = request.headers.get("authorization", "")
            if not hmac.compare_digest(presented.encode(), f"Bearer {token}".encode()):
                return Response(
                    b'{"type":"about:blank","title":"Unauthorized","status":401,'
                    b'"detail":"/metrics needs the metrics token: Authorization: Bearer <token>"}',
                    status_code=401,
                    media_type="application/problem+json",
                    headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
                )
        return Response(render(extra() if extra else ()), media_type=CONTENT_TYPE_LATEST)

    # The annotation as a class: this module's annotations are strings FastAPI resolves in its globals.
    metrics.__annotations__["request"] = Request
    if serve:
        app.add_api_route("/metrics", metrics, methods=["GET"], tags=["operations"], include_in_schema=False)


def observe_started(queue: str, waited_s: float) -> None:
    """A job's first start: how long it waited in the queue."""
    JOB_QUEUE_TIME.labels(queue or "unknown").observe(max(0.0, waited_s))


def observe_debate(protocol: str, rounds: int, key: str, tokens: dict[str, int]) -> None:
    """A completed debate: its rounds, and the tokens it cost the API key owner ``key``."""
    DEBATE_ROUNDS.labels(protocol).observe(rounds)
    for kind in TOKEN_KINDS:
        JOB_TOKENS.labels(key, kind).inc(tokens.get(kind, 0))

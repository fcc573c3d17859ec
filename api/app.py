"""The gateway's FastAPI app: ``create_app(settings)``; long-lived clients are built in ``lifespan``."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from api.admission import storage_cap
from api.config_schema import exact_schemas
from api.deps import ApiState, State
from api.enqueue import CeleryEnqueuer, Enqueuer
from api.gate import AuthGateMiddleware
from api.guards import AuthFailureLimiter, BodyLimitMiddleware, Idempotency, KeyRing, RateLimiter
from api.jsonlimits import JsonDepthMiddleware
from api.problems import install_problem_handlers, problem_response, unavailable
from api.routes_batches import router as batches_router
from api.routes_debates import router as debates_router
from api.routes_docs import router as docs_router
from api.routes_listing import router as listing_router
from api.routes_openai import router as openai_router
from api.routes_ui import router as ui_router
from api.routes_usage import router as usage_router
from api.settings import ApiSettings
from api.streams import StreamSlots, request_redis, stream_redis
from services.jobstore import RedisJobStore
from services.jobstore.settings import RetentionSettings
from services.observability import telemetry
from services.observability.metrics import QueueDepthCollector, instrument_app, serve_operator_metrics
from services.observability.settings import ObservabilitySettings
from services.redis_connect import sync_client
from services.task_queue import QUEUE_BATCH, QUEUE_INTERACTIVE, create_publisher

log = logging.getLogger("parley.api")

DESCRIPTION = """Parley queues retrieval-augmented multi-agent debates for Celery workers.

Submit one question (`POST /v1/debates`) or a batch (`POST /v1/batches`), poll the job or batch,
stream progress as Server-Sent Events, and fetch results. Errors are RFC 9457 `application/problem+json`.
Authenticate with `Authorization: Bearer <key>`; `Idempotency-Key` makes POSTs safe to repeat.
"""


def create_app(
    settings: ApiSettings,
    *,
    enqueuer: Enqueuer | None = None,
    observability: ObservabilitySettings | None = None,
    retention: RetentionSettings | None = None,
) -> FastAPI:
    """Build the API; pass ``enqueuer`` to replace Celery publishing (the store is always Redis).

    ``retention`` (``PARLEY_JOB_TTL_S``) is read from the environment unless given: the workers read
    the same variable, so a job is kept as long whichever process wrote it last.
    """
    observability = observability or ObservabilitySettings()
    ttl_s = (retention or RetentionSettings()).job_ttl_s
    telemetry.configure_tracing(observability, "parley-api")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Two pools: requests' short calls time out after redis_timeout_s (then 503), while event
        # streams block in XREAD on a pool of their own, sized to the stream cap, so open streams
        # never starve the requests.
        store = RedisJobStore(
            request_redis(settings),
            prefix=settings.key_prefix,
            ttl_s=ttl_s,
            wait_replicas=settings.redis_wait_replicas,
            wait_timeout_ms=settings.redis_wait_timeout_ms,
        )
        event_store = RedisJobStore(stream_redis(settings), prefix=settings.key_prefix, ttl_s=ttl_s)
        publisher = None
        if enqueuer is None:
            publisher = create_publisher(
                settings.broker_spec(), connection_timeout_s=settings.redis_timeout_s
            )
        keys = KeyRing(settings.keys)
        if keys.open:
            log.warning("PARLEY_API_KEYS is empty: no authentication, every caller is 'public'")
        app.state.parley = ApiState(
            settings=settings,
            store=store,
            enqueuer=enqueuer or CeleryEnqueuer(publisher),  # type: ignore[arg-type]
            keys=keys,
            limiter=RateLimiter(store.redis, settings.key_prefix, settings.rate_limit_per_minute),
            idempotency=Idempotency(
                store.redis,
                settings.key_prefix,
                settings.idempotency_ttl_s,
                pending_ttl_s=settings.idempotency_pending_ttl_s,
            ),
            auth_failures=AuthFailureLimiter(
                store.redis, settings.key_prefix, settings.auth_failures_per_minute
            ),
            event_store=event_store,
            streams=StreamSlots(
                store.redis,
                settings.key_prefix,
                per_key=settings.max_streams_per_key,
                per_process=settings.max_streams_per_process,
                slot_ttl_s=settings.stream_slot_ttl_s,
                retry_after_s=settings.retry_after_s,
            ),
            storage_cap=await storage_cap(store.redis, settings),
        )
        # The operator's /metrics port, loopback by default (metrics name keys).
        metrics_server = serve_operator_metrics(settings.metrics_port, settings.metrics_host, (queue_depth,))
        try:
            yield
        finally:
            if metrics_server is not None:
                metrics_server.shutdown()
            app.state.parley.enqueuer.close()
            await store.aclose()
            await event_store.aclose()

    app = FastAPI(
        title="Parley API",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # api/routes_docs.py serves /docs offline
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    install_problem_handlers(app, settings.retry_after_s)
    _exact_config_schema(app, settings)

    # Malformed JSON is the client's syntax error (400), not a semantic one (422).
    previous = app.exception_handlers[RequestValidationError]

    async def validation(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        if errors and errors[0].get("type") == "json_invalid":
            return problem_response(
                request,
                400,
                f"body is not valid JSON: {errors[0].get('ctx', {}).get('error', 'parse error')}",
                type_="/problems/malformed-json",
            )
        out = previous(request, exc)
        return await out if inspect.isawaitable(out) else out

    app.add_exception_handler(RequestValidationError, validation)
    # Inside the body-size limit (middleware added later wraps what was added before).
    app.add_middleware(JsonDepthMiddleware, limit=settings.max_json_depth)
    app.add_middleware(
        BodyLimitMiddleware,
        limit=settings.max_body_bytes,
        batch_limit=settings.max_batch_bytes,
        timeout_s=settings.body_timeout_s,
    )
    # Outermost: the key, the failed-auth limit and the rate limit before any byte of a body is read.
    app.add_middleware(AuthGateMiddleware)
    app.include_router(debates_router)
    app.include_router(batches_router)
    app.include_router(usage_router)
    app.include_router(listing_router)
    app.include_router(openai_router)
    app.include_router(ui_router)
    app.include_router(docs_router)
    # Queue depth is read from the broker at scrape time; a blocking client is fine there because
    # /metrics runs in the thread pool.
    timeout = settings.redis_timeout_s
    broker = sync_client(settings.broker_spec(), socket_timeout=timeout, socket_connect_timeout=timeout)
    queue_depth = QueueDepthCollector(broker, (QUEUE_INTERACTIVE, QUEUE_BATCH))
    # On the public port only with the metrics token; otherwise on the operator port (lifespan).
    token = settings.metrics_token.get_secret_value() if settings.metrics_token else None
    instrument_app(app, "gateway", extra=lambda: (queue_depth,), serve=token is not None, token=token)
    telemetry.instrument_fastapi(app)

    @app.get("/healthz", tags=["operations"])
    async def healthz(state: State, request: Request) -> JSONResponse:
        """Liveness and readiness in one: 200 when Redis answers, else 503 with ``Retry-After``."""
        try:
            await state.store.ping()
        except Exception:
            return unavailable(request, settings.retry_after_s, "the job store (Redis)")
        return JSONResponse({"status": "ok"})

    return app


def _exact_config_schema(app: FastAPI, settings: ApiSettings) -> None:
    """The OpenAPI document's config and request schemas as this deployment admits them."""
    generate = app.openapi
    done: list[bool] = []

    def openapi() -> dict[str, Any]:
        document = generate()
        if not done:
            exact_schemas(document, settings)
            done.append(True)
        return document

    app.openapi = openapi  # type: ignore[method-assign]

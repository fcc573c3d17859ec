"""The retrieval service's HTTP API (``parley retriever``).

``POST /v1/pools`` builds SKPool(q), ``GET /v1/pools/{id}`` returns a stored pool, ``GET /v1/search``
exposes dense/BM25/hybrid search for inspection, ``GET /healthz`` reports readiness. Errors are RFC 9457
``application/problem+json``: 422 for bad input, 404 for unknown pools, 503 when the index is missing
(the detail says how to build it). The store, model, JVM and web client are opened once in the lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from retriever.jvm import JVMUnavailable
from retriever.manifest import IndexMissing
from retriever.pools import MAX_K, InvalidRequest
from retriever.query_text import clean_text
from retriever.runtime import RetrieverRuntime
from retriever.settings import RetrieverSettings, SearchMode
from retriever.store_port import VectorStoreError
from services.knowledge import KnowledgePool
from services.observability import telemetry
from services.observability.logging_setup import configure_logging
from services.observability.metrics import instrument_app, observe_pool
from services.observability.settings import ObservabilitySettings
from services.problem_details import (
    BM25_UNAVAILABLE,
    INDEX_MISSING,
    INTERNAL,
    INVALID_REQUEST,
    NOT_FOUND,
    STORE_UNAVAILABLE,
    UNAUTHORIZED,
    logged_problem,
    problem_response,
    validation_errors,
)

log = logging.getLogger("parley.retriever")


class PoolRequest(BaseModel):
    question: str = Field(min_length=1, description="the question to build the knowledge pool for")
    k_wiki: int = Field(default=5, ge=0, le=MAX_K)
    k_web: int = Field(default=5, ge=0, le=MAX_K)
    rerank: bool | None = Field(
        default=None,
        description="false skips the deployment's second ranking stage for this pool (cheaper, weaker); "
        "null or true use it when the deployment has one",
    )
    search_text: str | None = Field(
        default=None,
        description="text searched after the question by the Wikipedia searches (dense, BM25, second "
        "stage), e.g. a passage the debate's model wrote (query2doc); web search and the pool's question "
        "keep the question alone. Part of the cache key; at most PARLEY_RETRIEVER_MAX_SEARCH_TEXT_CHARS "
        "(4,000) characters, else 422",
    )


class SearchHit(BaseModel):
    rank: int
    pid: str
    title: str
    text: str
    url: str | None
    score: float


class SearchResponse(BaseModel):
    query: str
    mode: SearchMode
    hits: list[SearchHit]
    timings_ms: dict[str, float]


def _runtime(request: Request) -> RetrieverRuntime:
    rt: RetrieverRuntime = request.app.state.runtime
    return rt


async def _sweeper(rt: RetrieverRuntime, every_s: float) -> None:
    """Delete expired pools periodically; a failed sweep is logged and retried next time."""
    while True:
        try:
            n = await asyncio.to_thread(rt.sweep)
            if n:
                log.info("swept %d expired pool points", n)
        except Exception:  # the sweeper must never die: pools would then grow unbounded
            log.exception("pool sweep failed")
        await asyncio.sleep(every_s)


def create_app(
    settings: RetrieverSettings | None = None, *, observability: ObservabilitySettings | None = None
) -> FastAPI:
    """The retriever app; long-lived resources open in its lifespan (run it under uvicorn)."""
    settings = settings or RetrieverSettings()
    observability = observability or ObservabilitySettings()
    telemetry.configure_tracing(observability, "parley-retriever")
    app = FastAPI(title="Parley retriever", version="0.1.0", lifespan=_lifespan(settings, observability))
    app.state.settings = settings
    install_problem_handlers(app)
    app.include_router(pools_router)
    token = settings.metrics_token.get_secret_value() if settings.metrics_token else None
    instrument_app(app, "retriever", token=token)
    telemetry.instrument_fastapi(app)
    app.include_router(health_router)
    return app


def _settings(request: Request) -> RetrieverSettings:
    s: RetrieverSettings = request.app.state.settings
    return s


def _lifespan(
    settings: RetrieverSettings, observability: ObservabilitySettings
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if observability.log_format == "json":
            # Here, not in create_app: uvicorn has configured its loggers by now, and this routes
            # them through the JSON handler too.
            configure_logging("json", settings.log_level, service="retriever")
        rt = await asyncio.to_thread(RetrieverRuntime.open, settings)
        try:
            if settings.warmup:
                await asyncio.to_thread(rt.warm)
            app.state.runtime = rt
            sweeper = asyncio.create_task(_sweeper(rt, settings.sweep_interval_s))
            try:
                yield
            finally:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
        finally:
            await rt.aclose()

    return lifespan


def _problem(
    status: int, type_: str, title: str, detail: str
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return problem_response(request, status, detail.format(exc=exc), type_=type_, title=title)

    return handler


def install_problem_handlers(app: FastAPI) -> None:
    """Every error as a problem document: 422 bad input, 503 a missing index or store, 500 the rest."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(
            request,
            422,
            "the request failed validation",
            title="Invalid request",
            extra={"errors": validation_errors(exc)},
        )

    # Clients tell these apart by ``type`` (services.retriever_client), never by the title.
    app.add_exception_handler(InvalidRequest, _problem(422, INVALID_REQUEST, "Invalid request", "{exc}"))
    app.add_exception_handler(Unauthorized, _problem(401, UNAUTHORIZED, "Unauthorized", "{exc}"))
    app.add_exception_handler(IndexMissing, _problem(503, INDEX_MISSING, "Index not built", "{exc}"))

    # Its text names the store's URL or folder and the driver's error: the log's, not the caller's.
    store_down = logged_problem(
        log,
        "vector store unavailable",
        503,
        "the vector store is unavailable",
        type_=STORE_UNAVAILABLE,
        title="Store unavailable",
    )
    app.add_exception_handler(VectorStoreError, store_down)

    app.add_exception_handler(
        JVMUnavailable, _problem(503, BM25_UNAVAILABLE, "BM25 unavailable", "{exc}; use mode=dense")
    )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The exception's text stays in the log: it can name hosts, paths or credentials.
        log.exception("unhandled error on %s", request.url.path)
        return problem_response(
            request, 500, "internal error; see the retriever's log", type_=INTERNAL, title="Internal error"
        )


async def _require_token(request: Request) -> None:
    """``PARLEY_RETRIEVER_TOKEN``: when set, the API answers callers that present it only."""
    token = _settings(request).token
    if token is None:
        return
    presented = request.headers.get("authorization", "")
    if not hmac.compare_digest(presented.encode(), f"Bearer {token.get_secret_value()}".encode()):
        raise Unauthorized("this retriever needs its token: Authorization: Bearer <PARLEY_RETRIEVER_TOKEN>")


class Unauthorized(Exception):
    """A call without the retriever's token (401)."""


pools_router = APIRouter(dependencies=[Depends(_require_token)])
health_router = APIRouter()


@pools_router.post("/v1/pools", response_model=KnowledgePool)
async def create_pool(body: PoolRequest, request: Request) -> KnowledgePool:
    """Build (or fetch from cache) SKPool(question)."""
    pool = await _runtime(request).pools.build_pool(
        body.question, body.k_wiki, body.k_web, rerank=body.rerank, search_text=body.search_text
    )
    observe_pool(pool.cached, pool.timings_ms)
    return pool


@pools_router.get("/v1/pools/{pool_id}", response_model=KnowledgePool)
async def get_pool(pool_id: str, request: Request) -> Any:
    pool = await _runtime(request).pools.get_pool(pool_id)
    if pool is None:
        return problem_response(
            request, 404, f"no pool {pool_id!r} (unknown or expired)", type_=NOT_FOUND, title="Pool not found"
        )
    return pool


@pools_router.get("/v1/search", response_model=SearchResponse)
async def search(
    request: Request,
    q: Annotated[str, Query(min_length=1)],
    k: Annotated[int, Query(ge=0, le=MAX_K)] = 10,
    mode: SearchMode | None = None,
    rerank: bool | None = None,
) -> SearchResponse:
    """Inspect Wikipedia retrieval alone: dense, BM25 or hybrid (default: the service's mode)."""
    settings = _settings(request)
    q = clean_text(q)
    if not q.strip():
        raise InvalidRequest("q must not be blank")
    if len(q) > settings.max_question_chars:
        raise InvalidRequest(f"q is longer than {settings.max_question_chars} characters")
    rt = _runtime(request)
    rt.wiki.check_ready()
    used: SearchMode = mode or rt.wiki.default_mode()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    hits = await rt.wiki.search(q, k, used, timings=timings, rerank=rerank)
    timings["total_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    return SearchResponse(
        query=q,
        mode=used,
        hits=[
            SearchHit(rank=i, pid=h.pid, title=h.title, text=h.text, url=h.url, score=h.score)
            for i, h in enumerate(hits, start=1)
        ],
        timings_ms=timings,
    )


@health_router.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    """Liveness plus readiness facts: 200 while the process serves; ``index_ready`` says if pools work."""
    settings = _settings(request)
    rt = _runtime(request)
    passages = await asyncio.to_thread(rt.passages.count)
    return {
        "status": "ok" if passages else "no_index",
        "index_ready": passages > 0,
        "passages": passages,
        "collection": settings.collection,
        "embedding_model": settings.model_name,
        "bm25": rt.wiki.has_bm25,
        "mode": rt.wiki.default_mode(),
        "rerank_model": rt.reranker.name if rt.reranker is not None else None,
        "web_provider": settings.web_provider,
        "store": rt.passages.location,
    }

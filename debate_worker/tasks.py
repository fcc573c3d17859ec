"""The Celery task that runs one debate job, and the ``JobRunner`` that does the work.

A job's life: ``queued`` → ``retrieving`` (pool built by the retriever service) → ``debating`` (the
engine runs, checkpointing every completed round) → ``completed`` | ``failed`` | ``cancelled``.

Exactly one result per job, even with redelivery:

* every status change is a conditional transition in the job store (``completed`` only from
  ``debating``; terminal states are never left), so a second run can never write a second result;
* a lease (renewed while the debate runs) keeps two deliveries of one job from running side by side;
* a redelivered job resumes from the last checkpoint with the same pool instead of starting over;
* Parley counts attempts itself and fails a job that has killed its worker ``max_attempts`` times.

The runner is plain asyncio (one event loop per task, so async clients are created per job); the
Celery task is a thin wrapper, which keeps the runner testable without a broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.exceptions
from celery import Celery
from celery.exceptions import Reject, SoftTimeLimitExceeded
from opentelemetry import trace
from pydantic import ValidationError

from debate_worker.pool_timing import PoolTiming
from debate_worker.worker_settings import WorkerSettings
from engine.config import DebateConfig
from engine.context import RoleModels, Spend
from engine.result import Checkpoint, TranscriptRecord
from engine.runner import run_debate
from engine.search_passage import SearchPassage, prepare_knowledge, write_search_passage
from services.chat_model import (
    LLMContextExceeded,
    LLMEgressRefused,
    LLMError,
    LLMProtocolError,
    LLMRateLimited,
)
from services.jobstore import ACTIVE, JobRecord, JobStore, RedisJobStore
from services.jobstore.settings import RetentionSettings
from services.knowledge import GivenKnowledge, KnowledgePool, PoolBuilder, empty_pool, pool_from_items
from services.llm import LLMSettings, ServedModel
from services.observability import telemetry
from services.observability.logging_setup import job_log_context
from services.observability.metrics import observe_debate, observe_job, observe_started
from services.settings import RetrieverClientSettings
from services.task_queue import TASK_RUN_DEBATE

log = logging.getLogger("parley.worker")

# What a fresh pool is assumed to take before this process has built one (dense + BM25 + web search).
DEFAULT_POOL_S = 2.0


class ClosableRoleModels(RoleModels, Protocol):
    async def aclose(self) -> None: ...


class ClosablePoolBuilder(PoolBuilder, Protocol):
    async def aclose(self) -> None: ...


class JobCancelled(Exception):
    """The job was cancelled (or finished elsewhere) while this worker ran it."""


class PoolUnavailable(Exception):
    """No knowledge pool could be built: the retriever is down or not configured."""


class WorkerDraining(Exception):
    """This worker is shutting down: the job went back to the queue and resumes elsewhere."""


def _default_models(
    llm: LLMSettings, served: ServedModel | None, client_url_networks: list[str]
) -> ClosableRoleModels:
    from services.egress import PublicOnlyTransport
    from services.llm import build_role_models

    # A job's config comes from a client: a URL its team gives reaches public addresses only.
    guard = PublicOnlyTransport(client_url_networks)
    return build_role_models(llm, served=served, client_url_transport=guard)


def _default_pool_builder(retriever: RetrieverClientSettings) -> ClosablePoolBuilder:
    if not retriever.url:
        raise PoolUnavailable("PARLEY_RETRIEVER_URL is not set; workers reach knowledge only through it")
    from services.retriever_client import RetrieverClient

    return RetrieverClient(
        retriever.url,
        timeout_s=retriever.client_timeout_s,
        max_attempts=retriever.client_max_attempts,
        retry_window_s=retriever.client_retry_window_s,
        transport=telemetry.client_transport(),  # carries the job's trace to the retriever
    )


@dataclass
class WorkerRuntime:
    """What a worker process needs to run jobs; factories so that every job gets fresh async clients."""

    settings: WorkerSettings
    llm: LLMSettings
    retriever: RetrieverClientSettings
    # Set by ``parley worker`` when it serves the embedded model itself.
    served: ServedModel | None = None
    llm_base_url: str | None = None
    models_factory: Callable[[], ClosableRoleModels] | None = None
    pool_factory: Callable[[], ClosablePoolBuilder] | None = None
    hostname: str = field(default_factory=socket.gethostname)
    # How long this process's uncached pools take: cached ones are held back that long.
    pool_timing: PoolTiming = field(default_factory=lambda: PoolTiming(DEFAULT_POOL_S))
    # The job store's retention (PARLEY_JOB_TTL_S): the gateway reads the same variable.
    retention: RetentionSettings = field(default_factory=RetentionSettings)

    @classmethod
    def from_env(cls, settings: WorkerSettings | None = None) -> WorkerRuntime:
        return cls(settings or WorkerSettings(), LLMSettings(), RetrieverClientSettings())

    def store(self) -> RedisJobStore:
        return RedisJobStore.from_url(
            self.settings.redis_url, prefix=self.settings.key_prefix, ttl_s=self.retention.job_ttl_s
        )

    def models(self) -> ClosableRoleModels:
        if self.models_factory is not None:
            return self.models_factory()
        if self.served is None and self.llm_base_url and self.llm_base_url != self.llm.base_url:
            # ``parley worker --llm-url``: that server for every role, the configured model name.
            served: ServedModel | None = ServedModel(self.llm_base_url, self.llm.model)
        else:
            served = self.served
        return _default_models(self.llm, served, self.settings.client_url_networks)

    def pool_builder(self) -> ClosablePoolBuilder:
        if self.pool_factory is not None:
            return self.pool_factory()
        return _default_pool_builder(self.retriever)


class JobRunner:
    """Runs one job from the store to a terminal state (or leaves it for redelivery)."""

    def __init__(self, runtime: WorkerRuntime, store: JobStore, node: str | None = None) -> None:
        self.rt = runtime
        self.store = store
        self.token = f"{runtime.hostname}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        # The Celery node running this job: when it shuts down, the job goes back to the queue.
        self.node = node
        self.draining = False

    async def execute(self, job_id: str) -> str:
        """Run ``job_id``; returns the status it ended in (or why it was skipped)."""
        job = await self.store.get_job(job_id)
        if job is None:
            log.warning("job %s not in the store (deleted, expired or never stored); dropping", job_id)
            return "missing"
        # Every line logged while the job runs names it and its batch; the span does the same.
        with job_log_context(job.job_id, job.batch_id):
            if job.batch_id:
                trace.get_current_span().set_attribute("parley.batch_id", job.batch_id)
            started = time.monotonic()
            status = await self._execute(job)
            observe_job(job.queue, status, time.monotonic() - started)
            log.info("job %s ended: %s", job_id, status)
        return status

    async def _execute(self, job: JobRecord) -> str:
        job_id = job.job_id
        if job.status not in ACTIVE:
            # A redelivery of a finished job: the result exists, never produce a second one.
            return f"skipped:{job.status}"
        attempts = await self.store.incr_attempts(job_id)
        if attempts == 0:
            return "missing"  # deleted by its owner (or expired) since it was read
        if attempts > self.rt.settings.max_attempts:
            await self.fail(job_id, f"gave up after {attempts - 1} attempts: the worker was lost each time")
            return "failed"
        if not await self._wait_for_lease(job_id):
            return "skipped:leased"
        try:
            return await self._run(job, attempts)
        finally:
            with contextlib.suppress(Exception):
                await self.store.release_lease(job_id, self.token)

    async def _wait_for_lease(self, job_id: str) -> bool:
        # A previous delivery killed mid-debate leaves its lease behind until it expires; wait that
        # long at most. A live holder keeps renewing it, and then this delivery is the duplicate.
        ttl_ms = int(self.rt.settings.lease_ttl_s * 1000)
        deadline = asyncio.get_running_loop().time() + self.rt.settings.lease_ttl_s + 1.0
        while True:
            if await self.store.acquire_lease(job_id, self.token, ttl_ms):
                return True
            if asyncio.get_running_loop().time() > deadline:
                log.warning("job %s is leased by %s; not running it twice", job_id, "another worker")
                return False
            await asyncio.sleep(min(0.25, self.rt.settings.lease_ttl_s / 4))

    async def _run(self, job: JobRecord, attempts: int) -> str:
        job_id = job.job_id
        try:
            config = DebateConfig.model_validate(job.config)
        except ValidationError as exc:
            await self.fail(job_id, f"invalid config: {exc.errors()[0].get('msg', exc)}")
            return "failed"
        ok = await self.store.transition(
            job_id,
            "retrieving",
            ACTIVE,
            fields={"worker": self.token, "started_at": time.time(), "rounds": config.rounds},
        )
        if not ok:
            return "skipped:cancelled"
        if attempts == 1:
            observe_started(job.queue, time.time() - job.created_at)
        runner = asyncio.current_task()
        assert runner is not None
        watcher = asyncio.create_task(self._watch(job_id, runner))
        try:
            return await self._debate(job, config, attempts)
        except (JobCancelled, asyncio.CancelledError):
            # The watcher may cancel this task once more after the debate already stopped (it saw
            # the same cancellation): stop it and drop its requests before touching the store.
            await _stop(watcher)
            while runner.cancelling():
                runner.uncancel()
            if self.draining:
                await self._requeue_for_shutdown(job_id)
                raise WorkerDraining(job_id) from None
            # Cancelled (or deleted) by the user, or finished elsewhere; the store already says so.
            current = await self.store.get_job(job_id)
            return f"skipped:{current.status if current else 'missing'}"
        except PoolUnavailable as exc:
            await self.fail(job_id, str(exc))
            return "failed"
        except LLMError as exc:
            log.warning("job %s: LLM error %s: %s", job_id, type(exc).__name__, exc.reason)
            await self.fail(job_id, f"LLM error: {type(exc).__name__}: {shown_reason(exc)}")
            return "failed"
        except ValueError as exc:
            await self.fail(job_id, f"invalid job: {exc}")
            return "failed"
        finally:
            await _stop(watcher)

    async def _watch(self, job_id: str, runner: asyncio.Task[Any]) -> None:
        """Renew the lease and stop the debate promptly when the job is cancelled."""
        ttl = self.rt.settings.lease_ttl_s
        interval = min(0.5, ttl / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                job = await self.store.get_job(job_id)
                renewed = await self.store.acquire_lease(job_id, self.token, int(ttl * 1000))
            except Exception:  # Redis blip: keep going, the next tick retries
                log.exception("lease renewal for %s failed", job_id)
                continue
            if job is None or job.status not in ACTIVE or not renewed:
                runner.cancel()
                return
            if self.node is not None and await self._node_draining():
                self.draining = True
                runner.cancel()
                return

    async def _node_draining(self) -> bool:
        try:
            return await self.store.is_draining(self.node or "")
        except Exception:  # a Redis blip is not a shutdown
            return False

    async def _requeue_for_shutdown(self, job_id: str) -> None:
        """Hand the job back: queued again (resuming from its last checkpoint), the attempt not
        counted, so a restarted or another worker picks it up at once instead of waiting for the
        broker's visibility timeout."""
        await self.store.transition(
            job_id,
            "queued",
            ("retrieving", "debating"),
            event="job.requeued",
            data={"reason": "worker shutting down; resumes from the last completed round"},
        )
        await self.store.add_attempts(job_id, -1)
        log.info("job %s handed back to the queue: worker %s is shutting down", job_id, self.node)

    async def _debate(self, job: JobRecord, config: DebateConfig, attempts: int) -> str:
        job_id = job.job_id
        # What an earlier attempt left: the last completed round, the pool, the search passage's call.
        raw_ckpt = await self.store.load_checkpoint(job_id) or {}
        resume = Checkpoint.model_validate(raw_ckpt["checkpoint"]) if raw_ckpt.get("checkpoint") else None
        pool = KnowledgePool.model_validate(raw_ckpt["pool"]) if raw_ckpt.get("pool") else None
        search = TranscriptRecord.model_validate(raw_ckpt["search"]) if raw_ckpt.get("search") else None

        async def on_event(event: str, data: dict[str, Any]) -> None:
            await self._emit(job_id, event, data)
            if event == "round.completed":
                await self.store.set_fields(job_id, {"round": int(data.get("round", 0))})

        async def on_usage(spend: Spend) -> None:
            await self._charge(job_id, spend)

        models = self.rt.models()
        try:
            if pool is None:
                pool, search = await self._pool_and_search(job, config, models, search, on_event, on_usage)
                await self._emit_pool(job_id, pool)
            ok = await self.store.transition(
                job_id, "debating", ("retrieving",), fields={"attempts": attempts}
            )
            if not ok:
                raise JobCancelled(job_id)
            if resume is not None:
                log.info("job %s resumes after round %d (attempt %d)", job_id, resume.round, attempts)
            kept = {
                "pool": pool.model_dump(mode="json"),
                "search": search.model_dump(mode="json") if search is not None else None,
            }

            async def on_checkpoint(ckpt: Checkpoint) -> None:
                await self.store.save_checkpoint(job_id, {"checkpoint": ckpt.model_dump(mode="json"), **kept})

            # Read after the search passage was charged: the debate's budget starts from it.
            spent_calls, spent_tokens = await self.store.spent(job_id)
            result = await run_debate(
                job.question,
                pool,
                config,
                models,
                on_event,
                on_checkpoint=on_checkpoint,
                resume=resume,
                gold=job.answers,
                on_usage=on_usage,
                spent=Spend(spent_tokens, 0, spent_calls),
                search=search,
            )
        finally:
            await models.aclose()
        # The pool's cache flag and timings would tell this key whether another key asked the same
        # question (the retriever's cache is shared), so results carry neither.
        payload = result.model_dump(mode="json", exclude={"pool": {"cached", "timings_ms"}})
        done = await self.store.transition(
            job_id,
            "completed",
            ("debating",),
            event="job.completed",
            data={
                "answer": result.answer,
                "rounds": result.rounds,
                "consensus": result.consensus,
                "usage": result.usage.model_dump(),
            },
            # The tokens were charged to the owner call by call (on_usage), not here.
            fields={"result": payload, "round": result.rounds},
        )
        if done:
            usage = result.usage
            tokens = {
                "prompt": usage.prompt_tokens,
                "completion": usage.completion_tokens,
                "cached": usage.cached_tokens,
            }
            observe_debate(config.protocol, result.rounds, job.owner, tokens)
        return "completed" if done else "skipped:finished-elsewhere"

    async def _emit_pool(self, job_id: str, pool: KnowledgePool) -> None:
        await self._emit(
            job_id,
            "pool.ready",
            {
                "pool_id": pool.pool_id,
                "items": len(pool.items),
                # No "cached" or retrieval timings: a cache hit would tell this key that another
                # key asked the same question (the retriever's pool cache is shared).
                "warnings": pool.warnings,
                # The cards a live view shows; snippets only, the result carries whole texts.
                "pool": [
                    {
                        "n": it.n,
                        "source": it.source,
                        "title": it.title,
                        "text": it.text[:300],
                        "url": it.url,
                    }
                    for it in pool.items
                ],
            },
        )

    async def _pool_and_search(
        self,
        job: JobRecord,
        config: DebateConfig,
        models: RoleModels,
        search: TranscriptRecord | None,
        on_event: Callable[[str, dict[str, Any]], Awaitable[None]],
        on_usage: Callable[[Spend], Awaitable[None]],
    ) -> tuple[KnowledgePool, TranscriptRecord | None]:
        """The job's pool and, with ``search_query="passage"``, the call that wrote the passage it was
        searched with. A passage an earlier attempt wrote (``search``, from the checkpoint) is used
        again, never written or charged twice; a new one is checkpointed before the pool is built."""
        if not config.writes_search_passage or job.pool is not None:
            return await self._build_pool(job, config), None
        if config.search_query not in self.rt.settings.search_query_modes:
            raise ValueError(
                f"search_query {config.search_query!r} is not enabled on this worker "
                f"(PARLEY_WORKER_SEARCH_QUERY_MODES: {', '.join(self.rt.settings.search_query_modes)})"
            )
        if search is not None:
            passage = SearchPassage.from_record(search)
        else:
            spent_calls, spent_tokens = await self.store.spent(job.job_id)
            passage = await write_search_passage(
                job.question,
                config,
                models,
                on_event,
                on_usage=on_usage,
                spent=Spend(spent_tokens, 0, spent_calls),
            )
            if passage.record is not None:
                # Checkpointed before the pool is built: a redelivered job uses it again.
                record = passage.record.model_dump(mode="json")
                await self.store.save_checkpoint(
                    job.job_id, {"checkpoint": None, "pool": None, "search": record}
                )

        async def build_pool(search_text: str | None) -> KnowledgePool:
            return await self._build_pool(job, config, search_text=search_text)

        return await prepare_knowledge(job.question, config, models, build_pool, written=passage)

    async def _build_pool(
        self, job: JobRecord, config: DebateConfig, *, search_text: str | None = None
    ) -> KnowledgePool:
        if not config.needs_pool:
            return empty_pool(job.question)
        if job.pool is not None:
            # The client brought the pool (a benchmark's precomputed one): no retrieval, and no search
            # passage either.
            given = [GivenKnowledge.model_validate(item) for item in job.pool]
            pool, dropped = pool_from_items(job.question, given, pool_id=f"given-{job.job_id}")
            pool = pool.limited(config.k_wiki, config.k_web)
            if dropped:
                pool.warnings.append(f"{dropped} given knowledge item(s) had no text and were dropped")
            return pool
        try:
            builder = self.rt.pool_builder()
        except ImportError as exc:
            raise PoolUnavailable(f"retriever client not available: {exc}") from exc
        try:
            async with asyncio.timeout(self.rt.settings.pool_timeout_s):
                with telemetry.span("parley.pool", job_id=job.job_id, k_wiki=config.k_wiki):
                    started = time.monotonic()
                    pool = await builder.build_pool(
                        job.question, k_wiki=config.k_wiki, k_web=config.k_web, search_text=search_text
                    )
                    elapsed = time.monotonic() - started
                    if pool.cached:
                        # Shared cache: a hit must arrive when a fresh pool would (pool_timing).
                        await asyncio.sleep(self.rt.pool_timing.hold_back(elapsed))
                    else:
                        self.rt.pool_timing.record(elapsed)
                    return pool
        except TimeoutError as exc:
            raise PoolUnavailable(
                f"retriever did not build a pool within {self.rt.settings.pool_timeout_s:.0f}s"
            ) from exc
        except (LLMError, JobCancelled, asyncio.CancelledError):
            raise
        except Exception as exc:
            # RetrieverUnavailable (after the client's bounded retries) and any retriever HTTP error.
            raise PoolUnavailable(f"retriever unavailable: {type(exc).__name__}: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await builder.aclose()

    async def _charge(self, job_id: str, spend: Spend) -> None:
        """Charge a call's cost to the job and its owner, through a restart of the store: a charge
        that fails because Redis is unreachable is owed all the same (a settlement lost there would
        leave the call at its worst case, a refund lost would charge a refused call), so it is tried
        again, backing off, for up to ``charge_retry_s``; after that the error stops the attempt."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.rt.settings.charge_retry_s
        delay = 0.1
        while True:
            try:
                await self.store.charge(job_id, spend.prompt_tokens, spend.completion_tokens, spend.calls)
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                if loop.time() + delay > deadline:
                    raise
                log.warning("job %s: the store is unreachable; charging again in %.1fs", job_id, delay)
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)

    async def _emit(self, job_id: str, event: str, data: dict[str, Any]) -> None:
        if await self.store.emit(job_id, event, data) is None:
            raise JobCancelled(job_id)

    async def fail(self, job_id: str, reason: str) -> bool:
        """End the job as failed. The client sees the reason without internal addresses."""
        log.warning("job %s failed: %s", job_id, reason)
        shown = client_safe(reason)
        return await self.store.transition(
            job_id, "failed", ACTIVE, event="job.failed", data={"error": shown}, fields={"error": shown}
        )


async def _stop(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended (idempotent)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def shown_reason(exc: LLMError) -> str:
    """What a client is told of an LLM failure: never the server's reply body, which a client URL
    pointed at an internal service would otherwise read back (the log keeps the whole reason)."""
    if isinstance(exc, LLMContextExceeded | LLMEgressRefused):
        return exc.reason  # Parley's own words: token counts, or the host the client gave
    if isinstance(exc, LLMProtocolError):
        return "the server's reply is not a chat completion"
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return f"HTTP {status} from the LLM server"
    if isinstance(exc, LLMRateLimited):
        return "rate limited (HTTP 429) by the LLM server"
    return exc.reason


_ADDRESS = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")


def client_safe(reason: str) -> str:
    """A failure reason fit for the API's clients: URLs (and any credential in them) replaced."""
    return _ADDRESS.sub("<internal address>", reason)[:1000]


async def _with_store(runtime: WorkerRuntime, fn: Callable[[RedisJobStore], Awaitable[str]]) -> str:
    store = runtime.store()
    try:
        return await fn(store)
    finally:
        await store.aclose()


def run_job(runtime: WorkerRuntime, job_id: str, node: str | None = None) -> str:
    """Run one job to completion in a fresh event loop (what the Celery task does)."""
    return asyncio.run(_with_store(runtime, lambda store: JobRunner(runtime, store, node).execute(job_id)))


def fail_job(runtime: WorkerRuntime, job_id: str, reason: str) -> None:
    async def _fail(store: RedisJobStore) -> str:
        await JobRunner(runtime, store).fail(job_id, reason)
        return "failed"

    asyncio.run(_with_store(runtime, _fail))


def register_tasks(app: Celery, runtime: WorkerRuntime) -> None:
    """Register ``parley.run_debate`` on ``app``; the task only hands the job id to the runner."""
    settings = runtime.settings

    @app.task(
        name=TASK_RUN_DEBATE,
        acks_late=settings.task_acks_late,
        reject_on_worker_lost=settings.task_reject_on_worker_lost,
        ignore_result=True,
    )
    def run_debate_task(job_id: str) -> str:
        try:
            # The span continues the trace the publisher put into the message headers.
            with telemetry.job_span(job_id, vars(run_debate_task.request)):
                return run_job(runtime, job_id, run_debate_task.request.hostname)
        except WorkerDraining as exc:
            raise Reject("worker shutting down; the job resumes elsewhere", requeue=True) from exc
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            # The job store is unreachable, so the job's state cannot be trusted or written: put the
            # message back (a failed task would be acked and the job left "debating" forever).
            log.warning("job store unavailable while running %s; requeueing: %s", job_id, exc)
            raise Reject(f"job store unavailable: {exc}", requeue=True) from exc
        except SoftTimeLimitExceeded:
            fail_job(
                runtime,
                job_id,
                f"time limit exceeded: the debate ran longer than {settings.task_soft_time_limit:.0f}s",
            )
            return "failed"
        except Exception as exc:
            # Anything else (a bug, an invalid URL, a Redis error reply): the job must still end, or it
            # would stay "debating", its stream open, its batch unfinished and its quota slot taken.
            log.exception("job %s raised %s", job_id, type(exc).__name__)
            try:
                fail_job(runtime, job_id, f"internal error: {type(exc).__name__}: {exc}")
            except redis.exceptions.RedisError as store_exc:
                # The store refuses writes too (out of memory, down): try again later, not in a hot loop.
                time.sleep(settings.store_retry_delay_s)
                raise Reject(f"job store error: {store_exc}", requeue=True) from exc
            return "failed"

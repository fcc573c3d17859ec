"""The debate of one leased job: its pool (built, brought by the client, or restored with the search
passage from the last checkpoint), the engine run checkpointing every completed round, each call
charged to the owner as it is made, and the one ``completed`` transition that stores the result."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis.exceptions

from debate_worker.job_errors import JobCancelled, PoolUnavailable
from debate_worker.runtime import WorkerRuntime
from engine.config import DebateConfig
from engine.context import RoleModels, Spend
from engine.result import Checkpoint, TranscriptRecord
from engine.runner import run_debate
from engine.search_passage import SearchPassage, prepare_knowledge, write_search_passage
from services.chat_model import LLMError
from services.jobstore import JobRecord, JobStore
from services.knowledge import GivenKnowledge, KnowledgePool, empty_pool, pool_from_items
from services.observability import telemetry
from services.observability.metrics import observe_debate

log = logging.getLogger("parley.worker")


class _JobSearches:
    """The retrieval a job's debaters search with during the debate (``DebateConfig.debate_search``):
    the worker's retriever client, one per search, bounded by the pool timeout. Its errors reach the
    engine, which ends the searching with a note and goes on with the pool it has."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        self.rt = runtime

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        builder = self.rt.pool_builder()
        try:
            async with asyncio.timeout(self.rt.settings.pool_timeout_s):
                with telemetry.span("parley.pool_search", k_wiki=k_wiki):
                    return await builder.build_pool(
                        question, k_wiki=k_wiki, k_web=k_web, search_text=search_text
                    )
        finally:
            with contextlib.suppress(Exception):
                await builder.aclose()


class JobDebate:
    """Runs a job's debate (its lease held, its status ``retrieving``) to ``completed``; cancellation
    by the user surfaces as ``JobCancelled``, a missing retriever as ``PoolUnavailable``."""

    def __init__(self, runtime: WorkerRuntime, store: JobStore) -> None:
        self.rt = runtime
        self.store = store

    async def run(self, job: JobRecord, config: DebateConfig, attempts: int) -> str:
        """Debate ``job`` from its last checkpoint (or from the start); returns ``completed``, or
        ``skipped:finished-elsewhere`` when another delivery stored the result first."""
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

        models, cache_client = self.rt.cached_models(self.rt.models(), job.owner)
        try:
            if pool is None:
                pool, search = await self._pool_and_search(job, config, models, search, on_event, on_usage)
                await self._emit_pool(job_id, pool)
            ok = await self.store.transition(
                # From debating too: a job written back after a failover (``restore_job``) is.
                job_id,
                "debating",
                ("retrieving", "debating"),
                fields={"attempts": attempts},
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
                # A pool the client brought is the knowledge it chose: its debate searches nothing.
                searcher=_JobSearches(self.rt) if job.pool is None else None,
            )
        finally:
            await models.aclose()
            if cache_client is not None:
                await cache_client.aclose()
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
        again, backing off, for up to ``charge_retry_s``, under one charge id so that a try Redis
        applied before the connection broke is not applied twice; after that the error stops the
        attempt."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.rt.settings.charge_retry_s
        delay = 0.1
        # One id for every try: Redis may have applied a try whose reply the restart cut off. Redis
        # remembers it a minute past the last retry.
        charge_id = uuid.uuid4().hex
        remember_s = int(self.rt.settings.charge_retry_s) + 60
        while True:
            try:
                await self.store.charge(
                    job_id,
                    spend.prompt_tokens,
                    spend.completion_tokens,
                    spend.calls,
                    charge_id=charge_id,
                    charge_id_ttl_s=remember_s,
                )
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

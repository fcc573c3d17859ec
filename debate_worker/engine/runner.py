"""``run_debate``: the engine's one entry point. Pure: no Celery, no HTTP server, no global state."""

from __future__ import annotations

import time

from debate_worker.engine.config import DebateConfig, validate_question
from debate_worker.engine.context import DebateContext, EventSink, RoleModels
from debate_worker.engine.outcome import CheckpointSink, ProtocolRun
from debate_worker.engine.registry import KNOWLEDGE_FREE, PROTOCOLS
from debate_worker.engine.result import Checkpoint, DebateResult
from services.knowledge import KnowledgePool, empty_pool


def pool_for(config: DebateConfig, pool: KnowledgePool) -> KnowledgePool:
    """The part of the shared pool this configuration may use, renumbered from 1."""
    if config.protocol in KNOWLEDGE_FREE or not config.uses_knowledge:
        return empty_pool(pool.question).model_copy(update={"warnings": pool.warnings})
    return pool.restricted(config.knowledge_sources())


async def run_debate(
    question: str,
    pool: KnowledgePool,
    config: DebateConfig,
    llm: RoleModels,
    on_event: EventSink | None = None,
    *,
    on_checkpoint: CheckpointSink | None = None,
    resume: Checkpoint | None = None,
    gold: list[str] | None = None,
) -> DebateResult:
    """Debate ``question`` over ``pool`` with ``config.protocol`` and return the full record.

    ``on_event`` receives ``turn.completed``/``judge.verdict``/``round.completed``; ``on_checkpoint``
    receives the state after each completed round, and ``resume`` continues from such a state.
    ``gold`` is only for evaluation-only settings that need the reference answer.
    """
    question = validate_question(question)
    started = time.perf_counter()
    used_pool = pool_for(config, pool)
    ctx = DebateContext(
        question, used_pool, config, llm, on_event, transcript=resume.transcript if resume else ()
    )
    protocol = PROTOCOLS[config.protocol]
    outcome = await protocol(ctx, ProtocolRun(on_checkpoint, resume, gold))
    usage, by_role = ctx.usage()
    return DebateResult(
        question=question,
        protocol=config.protocol,
        answer=outcome.answer,
        answer_source=outcome.answer_source,
        rounds=outcome.rounds,
        consensus=outcome.consensus,
        pool=used_pool,
        transcript=ctx.ordered_transcript(),
        usage=usage,
        usage_by_role=by_role,
        final_answers=outcome.final_answers,
        wall_ms=round((time.perf_counter() - started) * 1000, 1),
        config=config.model_dump(),
    )

"""``run_debate``: the engine's one entry point. Pure: no Celery, no HTTP server, no global state."""

from __future__ import annotations

import time

from engine.answers import majority_vote
from engine.config import DebateConfig, as_question, require_gold
from engine.context import (
    BudgetExhausted,
    DebateContext,
    EventSink,
    RoleModels,
    Spend,
    UsageSink,
)
from engine.models import with_team
from engine.outcome import CheckpointSink, Outcome, ProtocolRun
from engine.pool_search import DebateSearches
from engine.registry import SEARCH_ROLE, spec_for
from engine.result import Checkpoint, DebateResult, TranscriptRecord
from services.knowledge import KnowledgePool, PoolBuilder, empty_pool

# How long a stopped debate waits for its calls in flight to end so they are charged what they served;
# below the worker's lease (15 s by default), so a worker handing a job back still holds it meanwhile.
LATE_SETTLEMENT_S = 10.0


def pool_for(config: DebateConfig, pool: KnowledgePool) -> KnowledgePool:
    """The part of the shared pool this configuration may use, renumbered from 1."""
    if not config.needs_pool:
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
    on_usage: UsageSink | None = None,
    spent: Spend | None = None,
    search: TranscriptRecord | None = None,
    searcher: PoolBuilder | None = None,
) -> DebateResult:
    """Debate ``question`` over ``pool`` with ``config.protocol`` and return the full record.

    ``on_event`` receives ``turn.completed``/``judge.verdict``/``round.completed``; ``on_checkpoint``
    receives the state after each completed round, and ``resume`` continues from such a state.
    ``gold`` is only for evaluation-only settings that need the reference answer. ``on_usage`` is
    told what each LLM call cost as it ends; ``spent`` is what the job was charged before (a resumed
    job), which its budget starts from. ``search`` is the call that wrote the passage the pool was
    searched with (``engine.search_passage``): the transcript starts with it, and the usage and the
    budget count it; a resumed debate's checkpoint holds it already, so it is taken only without one.
    A ``Question`` (validated where it entered) is taken as it is; a plain ``str`` is validated here.
    ``searcher`` is the retrieval the pool was built with, for the searches the debaters write during
    the debate (``config.debate_search``; ``engine.pool_search``); a resumed debate's checkpoint holds
    the items they added so far.
    """
    question = as_question(question)
    started = time.perf_counter()
    used_pool = pool_for(config, pool)
    if resume is not None and resume.pool_added:
        used_pool = used_pool.model_copy(update={"items": [*used_pool.items, *resume.pool_added]})
    # The debate's own warnings list: a pool shared by several debates (an evaluation's) stays as it was.
    used_pool = used_pool.model_copy(update={"warnings": list(used_pool.warnings)})
    ctx = DebateContext(
        question,
        used_pool,
        config,
        llm,
        on_event,
        transcript=resume.transcript if resume else ((search,) if search is not None else ()),
        on_usage=on_usage,
        spent=spent,
    )
    if config.debate_search.enabled:
        ctx.searches = DebateSearches.resumed(searcher, config.k_wiki, config.k_web, ctx.transcript)
    # Set-up every protocol shares, done once here so no protocol can skip it.
    require_gold(config, gold)
    ctx.models = with_team(ctx.models, config.team)
    protocol = spec_for(config.protocol).load_runner()
    try:
        outcome = await protocol(ctx, ProtocolRun(on_checkpoint, resume, gold))
    except BudgetExhausted as exc:
        outcome = answer_within_budget(ctx, exc)
    finally:
        # A cancelled (or failed) debate's calls in flight are charged what the server served, not
        # their worst case: wait for them, bounded, before the caller closes the LLM clients.
        await ctx.settle_late_calls(LATE_SETTLEMENT_S)
    usage, by_role = ctx.usage()
    return DebateResult(
        question=question,
        protocol=config.protocol,
        answer=outcome.answer,
        answer_source=outcome.answer_source,
        rounds=outcome.rounds,
        consensus=outcome.consensus,
        pool=ctx.pool,
        transcript=_search_first(ctx.ordered_transcript()),
        usage=usage,
        usage_by_role=by_role,
        final_answers=outcome.final_answers,
        wall_ms=round((time.perf_counter() - started) * 1000, 1),
        config=config.model_dump(),
    )


def _search_first(transcript: list[TranscriptRecord]) -> list[TranscriptRecord]:
    """The transcript in call order for a reader: the search passage, written before the pool, first."""
    return [r for r in transcript if r.role == SEARCH_ROLE] + [r for r in transcript if r.role != SEARCH_ROLE]


def answer_within_budget(ctx: DebateContext, exc: BudgetExhausted) -> Outcome:
    """The answer of a debate stopped by its budget: the majority of each agent's latest answer."""
    # Only roles whose parsed answer is an agent's own answer to the question (not a vote or verdict).
    answer_roles = spec_for(ctx.config.protocol).answer_roles
    latest: dict[int, tuple[int, str | None]] = {}
    for rec in ctx.transcript:
        agent = rec.agent
        if rec.role not in answer_roles or agent is None or not rec.answer:
            continue
        if agent not in latest or rec.round >= latest[agent][0]:
            latest[agent] = (rec.round, rec.answer)
    finals = [latest[a][1] for a in sorted(latest)]
    answer, votes = majority_vote(finals)
    rounds = max((r.round for r in ctx.transcript), default=0)
    if answer is None:
        source = f"budget exhausted ({exc.what}) before any agent gave a usable answer"
    else:
        source = f"budget exhausted ({exc.what}): majority of the agents' latest answers ({votes} votes)"
    return Outcome(answer=answer, answer_source=source, rounds=rounds, consensus=False, final_answers=finals)

"""``society``: Du et al. (2023), the "MAD" baseline of the MADKE paper.

N agents answer alone, then for a fixed number of rounds each sees the other agents' previous-round
answers (in the configured ``ordering``) and updates its own; the final answer is the majority vote
of the last round. Parley adds what the paper lacks: adaptive knowledge selection before each agent
speaks (MADKE Prompt 3.1), confidence statements (Wu et al.) and per-agent models/temperatures.
"""

from __future__ import annotations

import functools

from engine.answers import answers_agree, majority_vote
from engine.context import DebateContext
from engine.outcome import Outcome, ProtocolRun
from engine.pool_search import search_after_round, search_before_first
from engine.prompts import get_prompts
from engine.protocols.common import (
    answer_parser,
    order_views,
    parse_confidence,
    persona,
    select_knowledge,
    speaking_order,
    view_seed,
)
from engine.protocols.society import prompts_for
from engine.protocols.society.prompts import View
from engine.protocols.society.state import SocietyState
from engine.result import TranscriptRecord


def views_for(
    ctx: DebateContext,
    run: ProtocolRun,
    agent: int,
    round: int,
    texts: list[str],
    answers: list[str | None],
    confidences: list[int | None],
) -> list[View]:
    """The other agents' round answers in the order this agent sees them (Zhang et al.)."""
    others = [j for j in range(len(texts)) if j != agent]
    order = order_views(
        others, answers, ctx.config.ordering, seed=view_seed(ctx.config, round, agent), gold=run.gold
    )
    return [View(texts[j], confidences[j]) for j in order]


async def run_society(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    cfg = ctx.config
    style = get_prompts(cfg.prompt_style)
    prompts = prompts_for(cfg.prompt_style)
    parse_answer = answer_parser(style)
    responses: list[list[str]] = []
    answers: list[list[str | None]] = []
    confidences: list[list[int | None]] = []
    state = run.resume_state(SocietyState)
    if state is not None:
        responses = [list(r) for r in state["responses"]]
        answers = [list(a) for a in state["answers"]]
        confidences = [list(c) for c in state["confidences"]]

    async def speak(r: int, i: int) -> TranscriptRecord:
        own = [h[i] for h in responses]
        knowledge = await select_knowledge(ctx, style, r, i, own[-1] if own else None)
        if r == 1 and not knowledge and await search_before_first(ctx, i):
            knowledge = await select_knowledge(ctx, style, r, i, None)
        others_by_round = [
            views_for(ctx, run, i, k + 1, responses[k], answers[k], confidences[k])
            for k in range(len(responses))
        ]
        messages = prompts.messages(
            ctx.question,
            knowledge,
            others_by_round,
            own,
            confidence=cfg.confidence,
            persona=persona(cfg, i),
        )
        record = await ctx.call(
            round=r,
            role="debater",
            agent=i,
            messages=messages,
            parse=parse_answer,
            temperature=cfg.agent_temperature(i),
            json_schema=prompts.CONFIDENCE_SCHEMA if cfg.confidence else prompts.ANSWER_SCHEMA,
            knowledge=[k.n for k in knowledge],
        )
        if cfg.confidence:
            record.extra["confidence"] = parse_confidence(record.text)
        return record

    r = len(responses)
    while r < cfg.rounds:
        r += 1
        order = speaking_order(cfg.agents, cfg.speaking_order, seed=view_seed(cfg, r, -1))
        records = await ctx.gather([functools.partial(speak, r, i) for i in order])
        by_agent = {rec.agent: rec for rec in records}
        recs = [by_agent[i] for i in range(cfg.agents)]
        responses.append([rec.text for rec in recs])
        answers.append([rec.answer for rec in recs])
        confidences.append([rec.extra.get("confidence") for rec in recs])
        await ctx.emit(
            "round.completed", {"round": r, "answers": answers[-1], "consensus": answers_agree(answers[-1])}
        )
        if r < cfg.rounds:
            await search_after_round(ctx, r, answers[-1])
        await run.checkpoint(ctx, r, {"responses": responses, "answers": answers, "confidences": confidences})
    final = answers[-1] if answers else []
    answer, votes = majority_vote(final)
    source = f"majority vote of {len(final)} agents ({votes} votes)" if answer else "no parseable answer"
    return Outcome(answer, source, r, answers_agree(final), list(final))

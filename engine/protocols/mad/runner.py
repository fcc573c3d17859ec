"""``mad``: Liang et al. (2024), Multi-Agent Debate with divergent thinking.

An affirmative and a negative debater argue in "tit for tat" (level 0-3), the negative answering the
affirmative within each round; after every round a moderator gives a JSON verdict and, with adaptive
break, a clear preference ends the debate with its answer. At the round limit a two-step extractive
judge (candidates, then the final answer) decides. Verdicts are read with the engine's JSON
extractor and a tolerant regular-expression fallback, never ``eval``; unreadable verdicts are re-asked
a bounded number of times, then recorded as abstentions (the debate continues, or the fallback answers).
"""

from __future__ import annotations

import functools
from typing import Any

from engine.answers import answers_agree
from engine.context import DebateContext
from engine.outcome import Outcome, ProtocolRun
from engine.pool_search import search_after_round, search_before_first
from engine.prompts import get_prompts
from engine.protocols.common import answer_parser, call_with_reasks, select_knowledge
from engine.protocols.mad import prompts_for
from engine.protocols.mad.prompts import conversation
from engine.protocols.mad.settings import MadSettings
from engine.protocols.mad.state import MadState
from engine.protocols.mad.verdict import verdict_parser


async def run_mad(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    cfg = ctx.config
    style = get_prompts(cfg.prompt_style)
    prompts = prompts_for(cfg.prompt_style)
    parse_answer = answer_parser(style)
    settings = cfg.protocol_settings(MadSettings)
    level = settings.tit_for_tat
    aff_agent, neg_agent = (1, 0) if settings.swap_sides else (0, 1)
    aff_turns: list[list[str]] = []  # [user, assistant] pairs
    neg_turns: list[list[str]] = []
    mod_turns: list[list[str]] = []
    answers: list[list[str | None]] = []
    verdict_state: dict[str, Any] | None = None
    st = run.resume_state(MadState)
    if st is not None:
        aff_turns, neg_turns, mod_turns = st["aff"], st["neg"], st["mod"]
        answers = [list(a) for a in st["answers"]]
        verdict_state = st.get("verdict")

    async def debater(r: int, side: str, agent: int, user_for: Any, turns: list[list[str]]) -> Any:
        previous = turns[-1][1] if turns else None
        knowledge = await select_knowledge(ctx, style, r, agent, previous)
        if r == 1 and not knowledge and await search_before_first(ctx, agent):
            knowledge = await select_knowledge(ctx, style, r, agent, previous)
        user = user_for(knowledge)
        record = await ctx.call(
            round=r,
            role=side,
            agent=agent,
            messages=conversation(
                prompts.debater_system(ctx.question, level, side), [*((u, a) for u, a in turns), (user, "")]
            ),
            parse=parse_answer,
            temperature=cfg.agent_temperature(agent),
            knowledge=[k.n for k in knowledge],
            # The robust style asks for JSON: without the schema a small model stops mid-object or
            # wraps it in a fence (8 of 39 affirmative turns unparseable on the 1.5B).
            json_schema=prompts.ANSWER_SCHEMA,
        )
        turns.append([user, record.text])
        return record

    r = len(aff_turns)
    ended = verdict_state is not None and bool(verdict_state.get("preference")) and settings.adaptive_break
    while not ended and r < cfg.rounds:
        r += 1
        if r == 1:
            aff = await debater(
                r, "affirmative", aff_agent, lambda k: prompts.opening(ctx.question, k), aff_turns
            )
            neg = await debater(
                r, "negative", neg_agent, lambda k: prompts.rebut_first(aff_turns[-1][1], k), neg_turns
            )
        else:
            last_neg = neg_turns[-1][1]
            aff = await debater(
                r, "affirmative", aff_agent, functools.partial(prompts.respond, last_neg), aff_turns
            )
            neg = await debater(
                r, "negative", neg_agent, lambda k: prompts.respond(aff_turns[-1][1], k), neg_turns
            )
        answers.append([aff.answer, neg.answer] if aff_agent == 0 else [neg.answer, aff.answer])
        user = prompts.moderator(r, aff.text, neg.text)
        record, readable = await call_with_reasks(
            ctx,
            round=r,
            role="moderator",
            agent=None,
            messages=conversation(
                prompts.moderator_system(ctx.question), [*((u, a) for u, a in mod_turns), (user, "")]
            ),
            parse=verdict_parser(True, (aff.text, neg.text)),
            readable=lambda rec: rec.verdict is not None,
            temperature=0.0,
            json_schema=prompts.VERDICT_SCHEMA,
        )
        mod_turns.append([user, record.text])
        verdict_state = {
            "preference": bool(record.verdict) if readable else False,
            "answer": record.answer,
            "side": record.extra.get("supported_side"),
            "abstained": not readable,
            "aff_answer": aff.answer,
            "neg_answer": neg.answer,
        }
        await ctx.emit(
            "judge.verdict",
            {
                "round": r,
                "consensus": verdict_state["preference"],
                "mode": "mad-moderator",
                "abstained": not readable,
            },
        )
        ended = bool(verdict_state["preference"]) and settings.adaptive_break
        await ctx.emit("round.completed", {"round": r, "answers": answers[-1], "consensus": ended})
        if not ended and r < cfg.rounds:
            await search_after_round(ctx, r, answers[-1])
        await run.checkpoint(
            ctx,
            r,
            {
                "aff": aff_turns,
                "neg": neg_turns,
                "mod": mod_turns,
                "answers": answers,
                "verdict": verdict_state,
            },
        )

    final = answers[-1] if answers else []
    vs = verdict_state or {}
    if vs.get("preference"):
        answer = vs.get("answer")
        side = vs.get("side")
        source = f"moderator (round {r}, supported side: {side or 'unstated'})"
        if not answer and side in ("affirmative", "negative"):
            answer = vs.get("aff_answer") if side == "affirmative" else vs.get("neg_answer")
            source = f"{side} side's answer (moderator's preference, round {r}; its verdict gave no answer)"
        if answer:
            return Outcome(answer, source, r, True, final)
    # Round limit (or a preference without an answer): the two-step extractive judge.
    aff_last = aff_turns[-1][1] if aff_turns else ""
    neg_last = neg_turns[-1][1] if neg_turns else ""
    return await extractive_judge(ctx, r, aff_last, neg_last, final, vs)


async def extractive_judge(
    ctx: DebateContext, r: int, aff_last: str, neg_last: str, final: list[str | None], vs: dict[str, Any]
) -> Outcome:
    """The paper's two-step judge (candidates, then the final answer); if its verdict stays
    unreadable, a side's last answer (the negative's first), else no answer."""
    prompts = prompts_for(ctx.config.prompt_style)
    system = prompts.moderator_system(ctx.question)
    step1 = prompts.judge_candidates(aff_last, neg_last)
    cand = await ctx.call(
        round=r,
        role="judge",
        agent=None,
        messages=conversation(system, [(step1, "")]),
        parse=lambda c: {"extra": {"step": "candidates"}},
        temperature=0.0,
    )
    step2 = prompts.judge_final(ctx.question)
    record, readable = await call_with_reasks(
        ctx,
        round=r,
        role="judge",
        agent=None,
        messages=conversation(system, [(step1, cand.text), (step2, "")]),
        parse=verdict_parser(False, (aff_last, neg_last)),
        readable=lambda rec: rec.answer is not None,
        temperature=0.0,
        json_schema=prompts.FINAL_SCHEMA,
    )
    if readable and record.answer:
        return Outcome(record.answer, "extractive judge (round limit)", r, answers_agree(final), final)
    neg_answer = vs.get("neg_answer")
    aff_answer = vs.get("aff_answer")
    if neg_answer or aff_answer:
        chosen, who = (neg_answer, "negative") if neg_answer else (aff_answer, "affirmative")
        return Outcome(
            chosen, f"{who} side's last answer (judge verdict unreadable, abstained)", r, False, final
        )
    return Outcome(None, "no answer: judge abstained and no side gave a parseable answer", r, False, final)

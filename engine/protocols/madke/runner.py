"""MADKE: knowledge-enhanced multi-agent debate (the paper's Algorithm 1, Eq. 1-6).

Round 1 is simultaneous talk (Prompt 3.2), later rounds orderly talk (Prompt 3.3); before speaking
each debater picks up to three pool items (Prompt 3.1, Eq. 2). Because every debater in round r
depends only on round r-1 (Eq. 4), the debaters of a round run concurrently; the judge (Prompt 3.4)
then decides whether to stop, and the summarizer (Prompt 3.5) gives the answer.
"""

from __future__ import annotations

import functools
from typing import Any

from engine.answers import answers_agree, majority_vote
from engine.context import DebateContext
from engine.outcome import Outcome, ProtocolRun
from engine.parsing import parse_verdict_json
from engine.pool_search import search_after_round, search_before_first
from engine.prompts import get_prompts
from engine.protocols.common import (
    answer_parser,
    order_views,
    persona,
    select_knowledge,
    view_seed,
    with_persona,
)
from engine.protocols.madke import prompts_for
from engine.protocols.madke.prompts import MadkePrompts
from engine.protocols.madke.state import MadkeState
from engine.result import TranscriptRecord
from services.chat_model import ChatCompletion


async def judge_round(
    ctx: DebateContext, prompts: MadkePrompts, round: int, responses: list[str], answers: list[str | None]
) -> bool:
    """Eq. 5 with Parley's rule check: ``judge=llm|rule|both`` (both stops only when the rule agrees)."""
    rule = answers_agree(answers)
    mode = ctx.config.judge_mode
    llm_verdict: bool | None = None
    if mode in ("llm", "both"):

        def parse(c: ChatCompletion) -> dict[str, Any]:
            v = parse_verdict_json(c.text) if c.output_mode == "schema" else prompts.parse_judge(c.text)
            return {"verdict": v.verdict, "parse_error": v.parse_error, "extra": {"rule_verdict": rule}}

        record = await ctx.call(
            round=round,
            role="judge",
            agent=None,
            messages=prompts.judge(ctx.question, responses),
            parse=parse,
            json_schema=prompts.JUDGE_SCHEMA,
        )
        # An unreadable verdict never ends the debate: continuing costs a round, stopping could
        # freeze a disagreement into the answer.
        if record.verdict is None:
            record.degraded = record.degraded or "the judge's reply was unreadable: no consensus was assumed"
        llm_verdict = bool(record.verdict)
    consensus = rule if mode == "rule" else (llm_verdict and rule if mode == "both" else bool(llm_verdict))
    await ctx.emit(
        "judge.verdict",
        {"round": round, "consensus": consensus, "llm": llm_verdict, "rule": rule, "mode": mode},
    )
    return bool(consensus)


async def summarize(
    ctx: DebateContext, prompts: MadkePrompts, round: int, responses: list[str], answers: list[str | None]
) -> tuple[str | None, str]:
    """Eq. 6; if the summary cannot be parsed, the debaters' majority answer is used and said so."""
    record = await ctx.call(
        round=round,
        role="summarizer",
        agent=None,
        messages=prompts.summary(ctx.question, responses),
        parse=answer_parser(prompts),
        temperature=0.0,
        json_schema=prompts.ANSWER_SCHEMA,
    )
    if record.answer:
        if record.parse_error:
            record.degraded = (
                record.degraded or f"the summary was not in the answer format ({record.parse_error})"
            )
        return record.answer, "summarizer"
    record.degraded = record.degraded or "the summary was unreadable: the majority of the final answers"
    vote, _ = majority_vote(answers)
    return vote, "majority of final answers (summary unparseable)"


def needs_summary(prompts: MadkePrompts, answers: list[str | None]) -> bool:
    """Whether the final round's answers go to the summarizer.

    The robust style takes the debaters' agreed answer as it is: small summarizers replaced a
    unanimous answer with another one (the 0.5B turned "4,100 BC", "4,100 BC" into "Isle of Wight").
    """
    return prompts.SUMMARIZE_AGREEMENT or not answers_agree(answers)


async def final_answer(
    ctx: DebateContext, prompts: MadkePrompts, round: int, responses: list[str], answers: list[str | None]
) -> tuple[str | None, str]:
    """MADKE's last step: the final round's agreed answer, or the summarizer's (``summarize``)."""
    if not needs_summary(prompts, answers):
        return answers[0], "the debaters' agreed final answer (no summary needed)"
    return await summarize(ctx, prompts, round, responses, answers)


async def run_madke(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    cfg = ctx.config
    style = get_prompts(cfg.prompt_style)
    prompts = prompts_for(cfg.prompt_style)
    responses: list[list[str]] = []
    answers: list[list[str | None]] = []
    consensus = False
    state = run.resume_state(MadkeState)
    if state is not None:
        responses = [list(r) for r in state["responses"]]
        answers = [list(a) for a in state["answers"]]
        consensus = bool(state["consensus"])
    parse_answer = answer_parser(prompts)

    async def speak(r: int, i: int) -> TranscriptRecord:
        previous = responses[-1][i] if r > 1 else None
        knowledge = await select_knowledge(ctx, style, r, i, previous)
        if r == 1 and not knowledge and await search_before_first(ctx, i):
            knowledge = await select_knowledge(ctx, style, r, i, previous)
        if r == 1:
            messages = prompts.simultaneous(ctx.question, knowledge)
        else:
            # The other agents' previous answers in the configured order (Zhang et al.'s factor).
            order = order_views(
                [j for j in range(cfg.agents) if j != i],
                answers[-1],
                cfg.ordering,
                seed=view_seed(cfg, r, i),
                gold=run.gold,
            )
            others = [responses[-1][j] for j in order]
            messages = prompts.orderly(ctx.question, knowledge, others, [h[i] for h in responses])
        return await ctx.call(
            round=r,
            role="debater",
            agent=i,
            messages=with_persona(messages, persona(cfg, i)),
            parse=parse_answer,
            temperature=cfg.agent_temperature(i),
            json_schema=prompts.ANSWER_SCHEMA,
            knowledge=[k.n for k in knowledge],
        )

    r = len(responses)
    while not consensus and r < cfg.rounds:
        r += 1
        records = await ctx.gather([functools.partial(speak, r, i) for i in range(cfg.agents)])
        responses.append([rec.text for rec in records])
        answers.append([rec.answer for rec in records])
        consensus = await judge_round(ctx, prompts, r, responses[-1], answers[-1])
        await ctx.emit("round.completed", {"round": r, "answers": answers[-1], "consensus": consensus})
        if not consensus and r < cfg.rounds:
            await search_after_round(ctx, r, answers[-1])
        await run.checkpoint(ctx, r, {"responses": responses, "answers": answers, "consensus": consensus})
    answer, source = await final_answer(ctx, prompts, r, responses[-1], answers[-1])
    return Outcome(
        answer=answer, answer_source=source, rounds=r, consensus=consensus, final_answers=answers[-1]
    )

"""Single-agent baselines with MADKE's prompts, parsing and accounting (paper §4.2).

``single`` is standard prompting with a one-shot demonstration, ``cot`` adds "let's think step by
step" and a CoT demonstration, ``self_consistency`` samples several CoT paths and takes the majority
answer, ``rag`` gives one agent the whole knowledge pool.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from engine.answers import majority_vote
from engine.context import DebateContext
from engine.outcome import Outcome, ProtocolRun
from engine.protocols.baselines import prompts_for
from engine.protocols.baselines.prompts import BaselinePrompts
from engine.protocols.common import answer_parser
from engine.result import TranscriptRecord
from services.chat_model import ChatMessage


async def _answer_once(
    ctx: DebateContext, prompts: BaselinePrompts, messages: list[ChatMessage], knowledge: Sequence[int] = ()
) -> Outcome:
    """One agent, one call: the shared shape of ``single``, ``cot`` and ``rag``."""
    rec = await ctx.call(
        round=1,
        role="answer",
        agent=0,
        messages=messages,
        parse=answer_parser(prompts),
        json_schema=prompts.ANSWER_SCHEMA,
        knowledge=knowledge,
    )
    return Outcome(rec.answer, "single answer", 1, True, [rec.answer])


async def run_single(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    prompts = prompts_for(ctx.config.prompt_style)
    return await _answer_once(ctx, prompts, prompts.standard(ctx.question))


async def run_cot(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    prompts = prompts_for(ctx.config.prompt_style)
    return await _answer_once(ctx, prompts, prompts.chain_of_thought(ctx.question))


async def run_rag(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    prompts = prompts_for(ctx.config.prompt_style)
    items = ctx.pool.items
    return await _answer_once(ctx, prompts, prompts.rag(ctx.question, items), [k.n for k in items])


async def run_self_consistency(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    prompts = prompts_for(ctx.config.prompt_style)
    parse = answer_parser(prompts)
    messages = prompts.chain_of_thought(ctx.question)

    async def sample(i: int) -> TranscriptRecord:
        return await ctx.call(
            round=1, role="sample", agent=i, messages=messages, parse=parse, json_schema=prompts.ANSWER_SCHEMA
        )

    records = await ctx.gather([functools.partial(sample, i) for i in range(ctx.config.samples)])
    answers = [r.answer for r in records]
    answer, votes = majority_vote(answers)
    return Outcome(
        answer, f"majority of {len(records)} samples ({votes} votes)", 1, votes == len(records), answers
    )

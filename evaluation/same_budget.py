"""The same-budget vote (Choi et al.'s "Debate or Vote" control): self-consistency given, question
by question, the tokens its debate used, so a debate that is no better than voting shows it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from engine.answers import answers_agree, majority_vote
from engine.config import DebateConfig
from engine.context import RoleModels
from engine.result import DebateResult, TranscriptRecord, Usage
from engine.runner import run_debate
from evaluation.items import Item
from evaluation.judge import AnswerJudge
from evaluation.run_loop import SKIP, EvalOptions, Produced, RunTally, describe_error, run_items
from evaluation.store import RunSpec, Workspace
from services.knowledge import empty_pool


def max_samples() -> int:
    """The most samples ``self_consistency`` accepts (``DebateConfig.samples``' bound)."""
    bound = DebateConfig.model_json_schema()["properties"]["samples"].get("maximum", 20)
    return int(bound)


def budget_label(debate_label: str) -> str:
    return f"vote-budget-{debate_label}"


def vote_config(debate: dict[str, Any]) -> dict[str, Any]:
    """The vote baseline's configuration: self-consistency with the debate's sampling settings
    (temperature, prompt style, token cap, seed); the sample count is set per question."""
    keep = ("temperature", "prompt_style", "max_tokens", "seed")
    return DebateConfig.model_validate(
        {"protocol": "self_consistency", **{k: debate[k] for k in keep if k in debate}}
    ).model_dump(mode="json")


def merge_votes(
    question: str, parts: Sequence[DebateResult], config: dict[str, Any], budget: int
) -> DebateResult:
    """One self-consistency result from a pilot sample and the samples bought with the rest of the
    budget: all transcripts (samples renumbered), usage summed, majority vote over every sample."""
    transcript: list[TranscriptRecord] = []
    for part in parts:
        for rec in part.transcript:
            transcript.append(rec.model_copy(update={"agent": len(transcript)}))
    answers = [r.answer for r in transcript if r.role == "sample"]
    answer, votes = majority_vote(answers)
    usage = Usage()
    by_role: dict[str, Usage] = {}
    for rec in transcript:
        usage.add(rec)
        by_role.setdefault(rec.role, Usage()).add(rec)
    used = usage.prompt_tokens + usage.completion_tokens
    return DebateResult(
        question=question,
        protocol="self_consistency",
        answer=answer,
        answer_source=f"majority of {len(answers)} samples ({votes} votes), {used} of the debate's "
        f"{budget} tokens",
        rounds=1,
        consensus=answers_agree(answers),
        pool=parts[0].pool,
        transcript=transcript,
        usage=usage,
        usage_by_role=by_role,
        final_answers=answers,
        wall_ms=sum(p.wall_ms for p in parts),
        config={**config, "samples": len(answers)},
    )


async def run_same_budget(
    ws: Workspace,
    items: Sequence[Item],
    spec: RunSpec,
    models: RoleModels,
    judge: AnswerJudge | None,
    opts: EvalOptions,
) -> RunTally:
    """Self-consistency given, question by question, the tokens its debate used (Choi et al.'s
    "Debate or Vote" control): one pilot sample measures what a sample costs on this question, then
    as many more as fit in the rest of the debate's prompt + completion tokens are drawn at once
    (capped at ``max_samples``), and the majority of all of them answers. A question whose debate has
    not finished yet is left pending; it runs when the debate has a result."""
    assert spec.budget_of is not None
    debate_results = ws.load_results(spec.budget_of)
    base = DebateConfig.model_validate(spec.config)
    cap = max_samples()

    async def vote(item: Item) -> Produced:
        reference = debate_results.get(item.id)
        if reference is None or reference.status != "ok":
            return None, SKIP, {}
        budget = reference.prompt_tokens + reference.completion_tokens
        pool = empty_pool(item.question)
        try:
            pilot_cfg = base.model_copy(update={"samples": 1})
            pilot = await run_debate(item.question, pool, pilot_cfg, models, gold=item.answers)
            cost = max(1, pilot.usage.prompt_tokens + pilot.usage.completion_tokens)
            total = max(1, min(cap, math.floor(budget / cost)))
            parts = [pilot]
            if total > 1:
                rest_cfg = base.model_copy(update={"samples": total - 1})
                parts.append(await run_debate(item.question, pool, rest_cfg, models, gold=item.answers))
        except Exception as exc:  # recorded with its reason and retried on resume
            return None, describe_error(exc), {}
        merged = merge_votes(item.question, parts, spec.config, budget)
        return merged, None, {"budget_tokens": budget, "samples": len(merged.final_answers)}

    return await run_items(ws, items, spec, vote, judge, opts)

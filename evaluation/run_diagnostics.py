"""What a run's transcripts show besides its accuracy: the failure modes of small models' answers,
how knowledge selection behaved, which replies could not be parsed, and accuracy round by round.

``report`` puts these numbers in ``metrics.json``; the suite and the benchmarks reuse some of them.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from engine.prompts import PromptSet, get_prompts, paper
from engine.registry import answer_roles
from engine.result import DebateResult, TranscriptRecord
from evaluation import metrics
from evaluation.items import Item
from evaluation.scoring import PrimaryMetric, is_correct
from services.knowledge import KnowledgePool

# Roles whose records carry an agent's own answer to the question (not a selection, verdict or vote),
# as the protocol registry declares them: a role no protocol declares is not counted as an answer.
ANSWER_ROLES = answer_roles()


def _style(style: str) -> PromptSet:
    """The style's prompt set; the paper's for a style this version does not know (an old report)."""
    try:
        return get_prompts(style)
    except ValueError:
        return paper


def knowledge_label(style: str) -> re.Pattern[str]:
    """How an answer that is only a knowledge item's label looks in ``style``."""
    return _style(style).KNOWLEDGE_LABEL


def example_answers(style: str) -> tuple[str, ...]:
    """The example answers ``style``'s prompts show (an answer copying one is flagged)."""
    return tuple(str(a) for a in _style(style).EXAMPLE_ANSWERS)


def _share(flags: Iterable[bool]) -> float | None:
    vals = list(flags)
    return sum(vals) / len(vals) if vals else None


def answer_shares(
    answers: Sequence[str | None],
    examples: Sequence[str],
    pool_sizes: Sequence[int | None] | None = None,
    label: re.Pattern[str] = paper.KNOWLEDGE_LABEL,
) -> dict[str, float | None]:
    """Shares of bare-number, example-copy and placeholder answers: the failure modes of small models.

    ``pool_sizes`` (one per answer) lets a bare number count only when it names a pool item."""
    sizes = list(pool_sizes) if pool_sizes is not None else [None] * len(answers)
    return {
        "bare_number": _share(
            metrics.is_bare_number(a, s, label) for a, s in zip(answers, sizes, strict=True)
        ),
        "example_copy": _share(metrics.is_example_copy(a, examples) for a in answers),
        "placeholder": _share(metrics.is_placeholder(a) for a in answers),
        # The part of "placeholder" where the parser found no answer at all (None).
        "no_answer": _share(a is None for a in answers),
    }


def agent_answers_by_round(transcript: Sequence[TranscriptRecord]) -> dict[int, dict[int, str | None]]:
    """round → agent → that agent's (last) answer in the round."""
    out: dict[int, dict[int, str | None]] = defaultdict(dict)
    for rec in transcript:
        if rec.role not in ANSWER_ROLES or rec.agent is None or rec.round < 1:
            continue
        out[rec.round][rec.agent] = rec.answer
    return dict(out)


def accuracy_by_round(
    items: dict[str, Item], transcripts: dict[str, DebateResult], primary: PrimaryMetric
) -> list[float]:
    """Mean share of agents with a correct answer after each round.

    A debate that stopped early keeps its last round's answers for the later rounds (its answer is
    final), so every point averages over the same questions.
    """
    per_item: list[list[float]] = []
    for item_id, result in transcripts.items():
        item = items.get(item_id)
        if item is None:
            continue
        rounds = agent_answers_by_round(result.transcript)
        if not rounds:
            continue
        curve = []
        for r in sorted(rounds):
            answers = list(rounds[r].values())
            curve.append(sum(is_correct(item, a, primary) for a in answers) / len(answers))
        per_item.append(curve)
    if not per_item:
        return []
    depth = max(len(c) for c in per_item)
    padded = [c + [c[-1]] * (depth - len(c)) for c in per_item]
    return [sum(c[r] for c in padded) / len(padded) for r in range(depth)]


def answer_passages(pool: KnowledgePool, gold: Sequence[str]) -> set[int]:
    """Numbers of the pool's passages that hold a gold answer string (a normalised alias on word
    boundaries, as ``contains`` scores an answer)."""
    return {it.n for it in pool.items if metrics.contains_match(it.text, gold)}


def selection_hits(transcripts: dict[str, DebateResult], gold: dict[str, list[str]]) -> dict[str, Any]:
    """How often a selection step picked a passage that holds a gold answer string, over the steps
    whose pool holds one (a normalised alias on word boundaries, as ``contains`` scores): the share of
    the answer that selection lets through to the agent, whatever the agent then makes of it."""
    steps = hits = 0
    for item_id, result in transcripts.items():
        holding = answer_passages(result.pool, gold.get(item_id, []))
        if not holding:
            continue
        for rec in result.transcript:
            if rec.role == "select":
                steps += 1
                hits += bool(holding.intersection(rec.selected or []))
    return {"steps": steps, "share": hits / steps if steps else None}


def selection_stats(transcripts: Iterable[DebateResult]) -> dict[str, Any]:
    """Selection behaviour: [No Found] share, items chosen per agent and round, sources chosen."""
    steps = 0
    no_found = 0
    valid = 0
    per_slot: dict[str, list[int]] = defaultdict(list)
    sources: Counter[str] = Counter()
    for result in transcripts:
        by_n = result.pool.by_number()
        for rec in result.transcript:
            if rec.role != "select":
                continue
            steps += 1
            no_found += bool(rec.no_found)
            valid += rec.parse_error is None
            chosen = rec.selected or []
            per_slot[f"r{rec.round}a{rec.agent if rec.agent is not None else 0}"].append(len(chosen))
            for n in chosen:
                item = by_n.get(n)
                sources[item.source if item is not None else "unknown"] += 1
    return {
        "steps": steps,
        "no_found_share": no_found / steps if steps else None,
        "valid_selection_share": valid / steps if steps else None,
        "mean_selected": {k: sum(v) / len(v) for k, v in sorted(per_slot.items())},
        "sources": dict(sources),
    }


def parse_error_rates(transcripts: Iterable[DebateResult]) -> dict[str, dict[str, float]]:
    """Per role: records, records with a parse_error, and their ratio."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for result in transcripts:
        for rec in result.transcript:
            counts[rec.role][0] += 1
            counts[rec.role][1] += rec.parse_error is not None
    return {
        role: {"records": n, "errors": e, "rate": e / n if n else 0.0}
        for role, (n, e) in sorted(counts.items())
    }


def judge_rule_agreement(transcripts: Iterable[DebateResult]) -> dict[str, Any]:
    """How often the LLM judge's verdict equals the rule check (all answers agree after normalisation)."""
    n = agree = 0
    for result in transcripts:
        for rec in result.transcript:
            if rec.role != "judge" or "rule_verdict" not in rec.extra:
                continue
            n += 1
            agree += rec.extra["rule_verdict"] == rec.verdict
    return {"verdicts": n, "agreement": agree / n if n else None}


# A run with more of its replies unreadable than this measures the prompt format more than the
# protocol: the report says so above its tables.
UNPARSEABLE_WARN = 0.05


def unparseable_share(rates: dict[str, dict[str, float]]) -> float | None:
    """Share of a run's LLM replies (every role: answers, selections, verdicts, votes) that could not
    be parsed; None without transcripts."""
    records = sum(v["records"] for v in rates.values())
    return sum(v["errors"] for v in rates.values()) / records if records else None

"""Score one answer against one item, by the item's kind.

Every kind gets EM/F1/contains (they are cheap and make runs comparable across kinds); ``correct`` is
the kind's own accuracy: the chosen primary metric for generative QA (the strict contains of
``evaluation.strict_contains`` by default, or EM, or the plain contains, or the LLM judge), the label
for FEVER, the option for multiple choice, Strict for KKS, and numeric equivalence for arithmetic
(``math``: ``3/2``, ``1.5`` and ``1.5 m/s`` are one answer).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel

from evaluation import metrics
from evaluation.equivalence import numeric_match
from evaluation.items import Item
from evaluation.kks import score_kks
from evaluation.strict_contains import strict_contains

PrimaryMetric = Literal["em", "contains", "strict_contains", "judge"]
PRIMARY_METRICS: tuple[PrimaryMetric, ...] = get_args(PrimaryMetric)
# Generative QA is scored by the strict contains unless a run asks otherwise: EM misses right answers
# worded in a sentence, and the plain contains credits lists of candidates and echoes of the question.
DEFAULT_PRIMARY: PrimaryMetric = "strict_contains"


class Scores(BaseModel):
    em: float
    f1: float
    contains: float
    correct: float
    # Absent from results scored before the metric existed; ``score_answer`` always sets it.
    strict_contains: float | None = None
    label: str | None = None
    choice: str | None = None
    strict: float | None = None
    smooth: float | None = None
    judge: bool | None = None
    numeric: float | None = None


def score_answer(
    item: Item, answer: str | None, *, primary: PrimaryMetric = DEFAULT_PRIMARY, judge: bool | None = None
) -> Scores:
    """All metrics for ``answer``; ``judge`` is the LLM judge's verdict when one was asked for."""
    gold = item.answers
    em = metrics.exact_match(answer, gold)
    f1 = metrics.f1_score(answer, gold)
    contains = metrics.contains_match(answer, gold)
    if item.kind == "fever":
        label = metrics.fever_label(answer)
        return Scores(em=em, f1=f1, contains=contains, correct=float(label == gold[0]), label=label)
    if item.kind == "mc":
        choices = list(item.meta.get("choices", []))
        idx = metrics.mc_choice(answer, choices)
        letter = None if idx is None else metrics.CHOICE_LETTERS[idx]
        return Scores(em=em, f1=f1, contains=contains, correct=float(letter == gold[0]), choice=letter)
    if item.kind == "math":
        numeric = numeric_match(answer, gold)
        return Scores(em=em, f1=f1, contains=contains, correct=max(numeric, em), numeric=numeric)
    if item.kind == "kks":
        solution: dict[str, str] = dict(item.meta.get("solution", {}))
        strict, smooth = score_kks(answer, solution)
        return Scores(em=em, f1=f1, contains=contains, correct=strict, strict=strict, smooth=smooth)
    if primary == "judge":
        correct = float(bool(judge))
    elif primary == "contains":
        correct = contains
    else:
        correct = em
    # Generative QA only: the other kinds have their own accuracy.
    strict_hit = strict_contains(answer, gold, item.question)
    if primary == "strict_contains":
        correct = strict_hit
    return Scores(em=em, f1=f1, contains=contains, strict_contains=strict_hit, correct=correct, judge=judge)


def is_correct(item: Item, answer: str | None, primary: PrimaryMetric = DEFAULT_PRIMARY) -> bool:
    """Rule-based correctness of an intermediate answer (per-round curves, Co2); the judge is not
    called for every round, so ``judge`` falls back to contains there."""
    rule: PrimaryMetric = "contains" if primary == "judge" else primary
    return score_answer(item, answer, primary=rule).correct >= 1.0

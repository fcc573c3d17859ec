"""Metric functions: pure, small, and checked against hand-computed cases in the tests.

Text answers are compared after SQuAD normalisation (``engine.answers.normalize_answer``), best over
the gold aliases, so "The Beatles" and "beatles" match. Co2/Cons follow the MADKE paper (Eq. 7–8),
Strict/Smooth the KKS paper (Wu et al., App. B). ``paired_bootstrap`` says whether the accuracy
difference between two runs over the same questions is larger than resampling noise.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.answers import answer_key, answers_agree, normalize_answer
from engine.prompts import paper, robust
from evaluation.items import CHOICE_LETTERS

# --------------------------------------------------------------------------------------------- text


def exact_match(prediction: str | None, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold alias (an empty one never matches)."""
    pred = normalize_answer(prediction or "")
    return float(bool(pred) and any(pred == normalize_answer(g) for g in golds))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golds: Sequence[str]) -> float:
    """SQuAD token F1, best over aliases."""
    pred = normalize_answer(prediction or "").split()
    if not pred:
        return 0.0
    return max((_f1(pred, normalize_answer(g).split()) for g in golds), default=0.0)


def contains_match(prediction: str | None, golds: Sequence[str]) -> float:
    """1.0 when a normalised gold alias occurs, on word boundaries, in the normalised prediction.

    More lenient than EM for small models that answer in sentences ("It was Bridget Driscoll").
    Word boundaries keep "one" from matching inside "someone".
    """
    pred = normalize_answer(prediction or "")
    if not pred:
        return 0.0
    padded = f" {pred} "
    return float(any(g_n and f" {g_n} " in padded for g_n in (normalize_answer(g) for g in golds)))


# Empty, the answer slots' wording in the formats and agreement replies in the slot, compared by key.
PLACEHOLDERS = frozenset(
    answer_key(x) for x in ("", "your answer", *robust.PLACEHOLDER_ANSWERS, *robust.AGREEMENT_REPLIES)
)


def is_bare_number(
    answer: str | None, pool_size: int | None = None, label: re.Pattern[str] = paper.KNOWLEDGE_LABEL
) -> bool:
    """The answer is a knowledge item's label taken for the answer, as the style's ``label`` pattern
    writes labels (``prompts.<style>.KNOWLEDGE_LABEL``).

    The paper style labels items ``[n]``, so there the label is a bare number (or a list of them):
    with ``pool_size`` known, numbers outside ``1..pool_size`` are real answers ("1703", "8 seasons" →
    "8" with a 5-item pool); without a pool no number can be a reference. The robust style labels items
    ``(Kn)`` precisely so that a plain number ("1" season) stays an answer: there only ``K3``-like
    answers are labels."""
    if not answer or not label.match(answer):
        return False
    if pool_size is None:
        return True
    return pool_size > 0 and all(1 <= int(n) <= pool_size for n in re.findall(r"\d+", answer))


def is_placeholder(answer: str | None) -> bool:
    """The answer is empty, filler ("...") or the format's placeholder ("answer", "the short answer")
    copied literally; a symbol such as "@" is an answer (``engine.answers.answer_key``)."""
    return answer_key(answer or "") in PLACEHOLDERS


def is_example_copy(answer: str | None, example_answers: Iterable[str]) -> bool:
    """The answer equals a one-shot example's answer: the model copied the demonstration."""
    pred = normalize_answer(answer or "")
    return bool(pred) and any(pred == normalize_answer(e) for e in example_answers)


# ------------------------------------------------------------------------------- labels and choices

_FEVER_SYNONYMS = {
    "SUPPORTS": ("supports", "supported", "support", "true", "correct"),
    "REFUTES": ("refutes", "refuted", "refute", "false", "incorrect"),
    "NOT ENOUGH INFO": ("not enough info", "not enough information", "nei", "insufficient information"),
}


def fever_label(answer: str | None) -> str | None:
    """The FEVER label an answer names, or None. The longest label phrase wins ("not enough info")."""
    text = normalize_answer(answer or "")
    if not text:
        return None
    for label in ("NOT ENOUGH INFO", "SUPPORTS", "REFUTES"):  # NEI first: it may contain "support"
        for phrase in _FEVER_SYNONYMS[label]:
            if text == phrase or re.search(rf"\b{re.escape(phrase)}\b", text):
                return label
    return None


def mc_choice(answer: str | None, choices: Sequence[str]) -> int | None:
    """The option index an answer names: a letter ("B", "(B)", "B. Paris") or an option's exact text."""
    text = (answer or "").strip()
    if not text:
        return None
    letters = CHOICE_LETTERS[: len(choices)]
    m = re.fullmatch(rf"\(?([{letters}{letters.lower()}])\)?(?:[.:)]\s*.*)?", text, re.DOTALL)
    if m:
        return letters.index(m.group(1).upper())
    norm = normalize_answer(text)
    for i, choice in enumerate(choices):
        if norm and norm == normalize_answer(choice):
            return i
    m = re.search(rf"\b(?:option|answer(?: is)?)\s*\(?([{letters}])\)?\b", text, re.IGNORECASE)
    if m:
        return letters.index(m.group(1).upper())
    return None


# ---------------------------------------------------------------------------------------- Co2/Cons


def is_consistent(final_answers: Sequence[str | None]) -> bool:
    """The agents' final-round answers all exist and agree after normalisation (one agent: it exists)."""
    return answers_agree(final_answers)


def co2_cons(outcomes: Sequence[tuple[bool, bool]]) -> tuple[float, float]:
    """MADKE Eq. 7–8 over (consistent, correct) pairs.

    Co2 = #(consistent and correct) / N, Cons = #consistent / N.
    """
    n = len(outcomes)
    if n == 0:
        return 0.0, 0.0
    co2 = sum(1 for c, ok in outcomes if c and ok) / n
    cons = sum(1 for c, _ in outcomes if c) / n
    return co2, cons


# --------------------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class BootstrapCI:
    """Difference of means ``b - a`` with a percentile CI; ``significant`` when the CI excludes 0."""

    diff: float
    low: float
    high: float
    n: int
    samples: int
    level: float

    @property
    def significant(self) -> bool:
        return self.n > 0 and (self.low > 0 or self.high < 0)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, samples: int = 10_000, seed: int = 0, level: float = 0.95
) -> BootstrapCI:
    """Percentile paired bootstrap of mean(b) − mean(a) over the same items.

    Items are resampled with replacement as pairs (one index draw serves both runs), so per-question
    difficulty cancels; with a fixed ``seed`` the interval is reproducible.
    """
    if len(a) != len(b):
        raise ValueError(f"paired bootstrap needs equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return BootstrapCI(0.0, 0.0, 0.0, 0, samples, level)
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(samples, n))
    means = d[idx].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return BootstrapCI(float(d.mean()), float(low), float(high), n, samples, level)


def mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0

"""Answer normalisation and voting shared by every protocol and the evaluation harness."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation and articles, squeeze whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answers_agree(answers: Sequence[str | None]) -> bool:
    """True when every answer is present and all normalise to the same non-empty string."""
    normed = [normalize_answer(a) for a in answers if a is not None]
    return len(normed) == len(answers) and len(normed) > 0 and normed[0] != "" and len(set(normed)) == 1


def majority_vote(answers: Sequence[str | None]) -> tuple[str | None, int]:
    """The most common answer by normalised form and its vote count.

    Ties go to the answer given first, so the result is deterministic; missing answers never win.
    Returns the first original spelling of the winning normalised form.
    """
    present = [(normalize_answer(a), a) for a in answers if a is not None and normalize_answer(a)]
    if not present:
        return None, 0
    counts = Counter(n for n, _ in present)
    best = max(counts.values())
    for norm, original in present:
        if counts[norm] == best:
            return original, best
    return None, 0  # pragma: no cover - unreachable

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


# What models write in place of an answer ("...", "—", "?"). Any other character is content: "@" is a
# real (if wrong) answer to "is there a name for the at symbol", though SQuAD normalisation erases it.
_FILLER = frozenset(".…-–—_?!,;:'\"`()[]{}/\\|~*") | frozenset(string.whitespace)


def has_content(answer: str) -> bool:
    """The answer says something: it is not empty and not made only of filler punctuation."""
    return any(ch not in _FILLER for ch in answer)


def answer_key(answer: str) -> str:
    """The form answers are compared in: SQuAD-normalised, or, when normalisation leaves nothing of an
    answer with content (a symbol such as "@"), its whitespace-squeezed text. Empty means no answer."""
    if not has_content(answer):
        return ""
    return normalize_answer(answer) or " ".join(answer.split())


def answers_agree(answers: Sequence[str | None]) -> bool:
    """True when every answer is present and all have the same non-empty comparison key."""
    normed = [answer_key(a) for a in answers if a is not None]
    return len(normed) == len(answers) and len(normed) > 0 and normed[0] != "" and len(set(normed)) == 1


def majority_vote(answers: Sequence[str | None]) -> tuple[str | None, int]:
    """The most common answer by comparison key (``answer_key``) and its vote count.

    Ties go to the answer given first, so the result is deterministic; missing answers never win.
    Returns the first original spelling of the winning key.
    """
    keyed = [(answer_key(a), a) for a in answers if a is not None]
    present = [(key, a) for key, a in keyed if key]
    if not present:
        return None, 0
    counts = Counter(n for n, _ in present)
    best = max(counts.values())
    for norm, original in present:
        if counts[norm] == best:
            return original, best
    return None, 0  # pragma: no cover - unreachable

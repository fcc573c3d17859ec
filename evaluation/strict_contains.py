"""A strict ``contains``: credit for an answer that names the gold, not for one that lists candidates
or only repeats the question.

``contains`` credits any answer in which a gold alias occurs. Read against stored evidence-suite
answers, that also credits lists of candidates of which one matches ("Paris, Lyon, Marseille") and
answers that only repeat the question's own words. This scorer keeps ``contains``'s leniency for a
short answer written as a sentence ("It was Bridget Driscoll") and refuses those two:

- **Normalised alike.** Answers, golds and the question go through the same normalisation: Unicode
  compatibility forms (NFKC: no-break and other Unicode spaces, full-width letters), lower case,
  every Unicode punctuation mark and symbol dropped (as SQuAD drops ASCII punctuation), English
  articles; matched on word boundaries.
- **One candidate.** The answer is cut at list separators (``,``, ``;``, ``/``, ``|``, line breaks,
  and the words "or" and "and") once each gold alias in it is set aside, so an alias that holds such a
  separator ("Lewis and Clark", "Washington, D.C.") stays whole. A piece that names something besides
  the gold (more than a filler word such as "both" or "it was") is another candidate: no credit.
- **Not an echo.** An answer whose words all stand in the question earns nothing, unless the question
  offers the choice itself ("… X or Y?"), where naming one option is the answer.

``contains`` stays available by its name; this one is ``strict_contains``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

_ARTICLES = frozenset({"a", "an", "the"})
# Words that carry no candidate of their own around a list or a sentence answer.
_FILLER = frozenset(
    {"it", "is", "was", "were", "are", "be", "answer", "its", "both", "either", "also", "etc", "possibly",
     "probably", "maybe", "perhaps", "likely", "i", "think", "believe", "that", "this", "final"}
)  # fmt: skip
_SEPARATOR_CHARS = ",;/|\n"
_SEPARATOR_WORDS = ("or", "and")
_GOLD = "\x00"  # where a gold alias stood, once set aside


def _words(text: str, *, keep_separators: bool = False) -> list[str]:
    """NFKC, lower case, punctuation and symbols dropped as SQuAD does ("U.S.A." is "usa"), list
    separators kept as their own tokens when asked, articles dropped."""
    out: list[str] = []
    for ch in unicodedata.normalize("NFKC", text).lower():
        if keep_separators and ch in _SEPARATOR_CHARS:
            out.append(f" {ch} ")
        elif unicodedata.category(ch).startswith(("P", "S")):
            continue
        elif ch.isspace():
            out.append(" ")
        else:
            out.append(ch)
    return [w for w in "".join(out).split() if w not in _ARTICLES]


def normalize_strict(text: str | None) -> str:
    """The form answers, golds and questions are compared in."""
    return " ".join(_words(text or ""))


def _set_aside(tokens: list[str], alias: list[str]) -> tuple[list[str], bool]:
    """``tokens`` with each occurrence of ``alias`` (separators inside it ignored) replaced by one marker."""
    out: list[str] = []
    found = False
    i = 0
    while i < len(tokens):
        j, k = i, 0
        while j < len(tokens) and k < len(alias):
            if tokens[j] in _SEPARATOR_CHARS and tokens[j] != alias[k]:
                j += 1  # "washington , d c" holds the alias "washington d c"
                continue
            if tokens[j] != alias[k]:
                break
            j, k = j + 1, k + 1
        if k == len(alias) and alias:
            out.append(_GOLD)
            found = True
            i = j
        else:
            out.append(tokens[i])
            i += 1
    return out, found


def _pieces(tokens: list[str]) -> list[list[str]]:
    """The answer cut at list separators (characters and the words "or", "and")."""
    pieces: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATOR_CHARS or token in _SEPARATOR_WORDS:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return [p for p in pieces if p]


def offers_choice(question: str) -> bool:
    """The question names its own options ("… X or Y?"), so an answer may repeat its words."""
    return "or" in _words(question)


def strict_contains(prediction: str | None, golds: Sequence[str], question: str = "") -> float:
    """1.0 when the answer names a gold alias and no other candidate, and says more than the question."""
    answer = _words(prediction or "", keep_separators=True)
    content = [t for t in answer if t not in _SEPARATOR_CHARS]
    if not content:
        return 0.0
    aliases = [a for a in (_words(g) for g in golds) if a]
    question_words = set(_words(question))
    if question_words and set(content) <= question_words and not offers_choice(question):
        return 0.0  # an echo of the question
    for alias in sorted(aliases, key=len, reverse=True):
        marked, found = _set_aside(answer, alias)
        if not found:
            continue
        others = [p for p in _pieces(marked) if _GOLD not in p and any(w not in _FILLER for w in p)]
        if not others:
            return 1.0
    return 0.0

"""Parsing of LLM replies: bracketed answers, knowledge selections and judge verdicts.

Small models rarely follow the format. Every parser returns what it could recover *and* a
``parse_error`` saying which fallback was used, so the transcript shows exactly how each value was
obtained instead of silently guessing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_BRACKETS = re.compile(r"\[([^\[\]\n]{1,300})\]")
_NUMBER_LIST = re.compile(r"^\s*\d+(\s*,\s*\d+)*\s*$")
_NO_FOUND = re.compile(r"\[\s*no\s*found\s*\]", re.IGNORECASE)
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:)\s*[:\-]?\s*\"?([^\n\"]{1,200}?)\"?\s*(?:[.\n]|$)",
    re.IGNORECASE,
)
_PLACEHOLDERS = frozenset({"answer", "your answer", "final answer", "...", "…", "x", "n/a", "none"})


@dataclass(frozen=True)
class ParsedAnswer:
    answer: str | None
    parse_error: str | None = None


@dataclass(frozen=True)
class ParsedSelection:
    selected: list[int]
    no_found: bool
    ignored: list[int] = field(default_factory=list)
    parse_error: str | None = None


@dataclass(frozen=True)
class ParsedVerdict:
    verdict: bool | None
    parse_error: str | None = None


def _clean(span: str) -> str:
    return span.strip().strip("\"'*`[]").strip().rstrip(".").strip()


def parse_bracket_answer(text: str, *, reject_numbers: bool = False) -> ParsedAnswer:
    """The answer in ``[answer]`` form: the last bracketed span that is a real answer.

    Fallbacks, each recorded: "the answer is X" phrasing, then the last non-empty line. With
    ``reject_numbers`` a bare ``[3]`` is taken for a knowledge reference, not an answer.
    """
    if not text or not text.strip():
        return ParsedAnswer(None, "empty reply")
    spans = [_clean(s) for s in _BRACKETS.findall(text)]
    candidates = [
        s for s in spans if s and s.lower() not in _PLACEHOLDERS and not _NO_FOUND.fullmatch(f"[{s}]")
    ]
    if reject_numbers:
        candidates = [s for s in candidates if not _NUMBER_LIST.match(s)]
    if candidates:
        return ParsedAnswer(candidates[-1])
    reason = "only placeholder or knowledge-number brackets" if spans else "no bracketed answer"
    matches = _ANSWER_IS.findall(text)
    if matches:
        candidate = _clean(matches[-1])
        if candidate and candidate.lower() not in _PLACEHOLDERS:
            return ParsedAnswer(candidate, f"{reason}; used 'answer is' phrasing")
    if spans:  # the reply used the bracket form, only with nothing usable inside: no guessing
        return ParsedAnswer(None, reason)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    last = _clean(lines[-1]) if lines else ""
    if last and last.lower() not in _PLACEHOLDERS:
        return ParsedAnswer(last[:200], f"{reason}; used last line")
    return ParsedAnswer(None, reason)


def parse_selection(text: str, pool_size: int, max_selected: int = 3) -> ParsedSelection:
    """Knowledge numbers from a Prompt 3.1 reply: ``[3]``, ``[3], [12]`` or ``[3, 12]``; ``[No Found]``.

    Numbers outside ``1..pool_size`` are ignored and reported; duplicates are dropped; at most
    ``max_selected`` are kept in the order given. ``[No Found]`` with no valid number means no
    knowledge; with valid numbers too, the numbers win (the agent did name something useful).
    """
    if not text or not text.strip():
        return ParsedSelection([], False, parse_error="empty reply")
    no_found = bool(_NO_FOUND.search(text))
    numbers: list[int] = []
    for span in _BRACKETS.findall(text):
        if _NUMBER_LIST.match(span):
            numbers.extend(int(x) for x in span.split(","))
    return _select(
        numbers,
        no_found,
        pool_size,
        max_selected,
        None if (numbers or no_found) else "no bracketed selection or [No Found]",
    )


def parse_selection_json(text: str, pool_size: int, max_selected: int = 3) -> ParsedSelection:
    """A schema-constrained selection ``{"selected": [3, 7]}``; falls back to text parsing."""
    try:
        data = json.loads(text)
        raw = data["selected"]
        if not isinstance(raw, list) or not all(isinstance(x, int) for x in raw):
            raise TypeError("selected is not a list of integers")
    except (ValueError, KeyError, TypeError) as exc:
        fallback = parse_selection(text, pool_size, max_selected)
        return ParsedSelection(
            fallback.selected,
            fallback.no_found,
            fallback.ignored,
            f"invalid JSON selection ({exc.__class__.__name__}); parsed as text",
        )
    return _select(list(raw), not raw, pool_size, max_selected, None)


def _select(
    numbers: list[int], no_found: bool, pool_size: int, max_selected: int, parse_error: str | None
) -> ParsedSelection:
    valid: list[int] = []
    ignored: list[int] = []
    for n in numbers:
        if 1 <= n <= pool_size:
            if n not in valid:
                valid.append(n)
        elif n not in ignored:
            ignored.append(n)
    if len(valid) > max_selected:
        valid = valid[:max_selected]
    return ParsedSelection(valid, no_found and not valid, ignored, parse_error)


def parse_verdict(text: str) -> ParsedVerdict:
    """A judge's ``[Yes]``/``[No]``; the last bracketed verdict wins. Falls back to a bare yes/no word."""
    if not text or not text.strip():
        return ParsedVerdict(None, "empty reply")
    found = re.findall(r"\[\s*(yes|no)\s*\]", text, re.IGNORECASE)
    if found:
        return ParsedVerdict(found[-1].lower() == "yes")
    words = re.findall(r"\b(yes|no|consistent|inconsistent)\b", text, re.IGNORECASE)
    if words:
        last = words[-1].lower()
        return ParsedVerdict(last in ("yes", "consistent"), "no [Yes]/[No]; used last yes/no word")
    return ParsedVerdict(None, "no verdict found")


def parse_verdict_json(text: str) -> ParsedVerdict:
    """A schema-constrained verdict ``{"consensus": true}``; falls back to text parsing."""
    try:
        data = json.loads(text)
        value = data["consensus"]
        if not isinstance(value, bool):
            raise TypeError("consensus is not a boolean")
        return ParsedVerdict(value)
    except (ValueError, KeyError, TypeError) as exc:
        fallback = parse_verdict(text)
        return ParsedVerdict(
            fallback.verdict,
            f"invalid JSON verdict ({exc.__class__.__name__}); {fallback.parse_error or 'parsed as text'}",
        )


def cut_at_word(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at its last word boundary (a single word: cut)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut

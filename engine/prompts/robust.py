"""Parley's robust prompt style, for small local models.

What the paper style gets wrong with 0.5-1.5B models (measured on the dev sets) and what this style does:
- knowledge numbered ``[3]`` collides with ``[answer]``: items are ``(K3)`` and the answer is asked for
  once, as JSON ``{"reason": ..., "answer": ...}`` (``ANSWER_SCHEMA``), so a bare number is never read as
  an answer; free text replies that still end ``Final answer: [...]`` are read too;
- the one-shot example's answer got copied: the example is from another domain and marked as such, and
  its answer is rejected by the parser if it comes back (``EXAMPLE_ANSWERS``);
- answers, selections and verdicts are asked for as JSON with a schema (``ANSWER_SCHEMA``,
  ``SELECT_SCHEMA``, ``JUDGE_SCHEMA``), so a backend with schema-constrained decoding can neither answer
  the question instead of choosing nor leave out the answer (free-text debater replies without an answer
  line were 34% of debater turns on the 1.5B before);
- the judge sees the debaters' extracted short answers, not their whole replies;
- role prompts are one sentence;
- a unanimous final answer is taken as it is; the summarizer only chooses between differing answers.

This module is the style's shared vocabulary (role line, format example, answer form, knowledge
rendering and parsers); each protocol's robust prompts build on it (MADKE's judge and summarizer are
in ``protocols/madke/robust.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from engine.answers import answer_key
from engine.jsontext import first_json_object
from engine.parsing import (
    ParsedAnswer,
    ParsedSelection,
    ParsedVerdict,
    parse_bracket_answer,
    parse_selection_json,
    parse_verdict,
    parse_verdict_json,
)
from engine.prompts.compose import join_blocks, system_user
from engine.prompts.search import search_passage as search_passage
from engine.prompts.untrusted import knowledge_block
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

STYLE = "robust"

DEBATER_ROLE = "You answer factual questions accurately and briefly, using the knowledge given when it helps."

# The answer is asked for as JSON: with schema-constrained decoding (llama.cpp, vLLM) the reply cannot
# miss the answer field, which is where free-text replies failed most (a sentence and no answer line).
# The field descriptions stay outside the JSON template: a 1.5B model copied them into "answer".
ANSWER_RULES = (
    "reason: one short sentence. answer: only the name, date, number or few words that answer the "
    "question (never a knowledge number)."
)
ANSWER_INSTRUCTION = 'Reply with JSON only: {"reason": "...", "answer": "..."}\n' + ANSWER_RULES
EXAMPLE = (
    "=== FORMAT EXAMPLE (a different question from another domain; never reuse its answer) ===\n"
    "Question: Which gas do plants take from the air to make sugar?\n"
    '{"reason": "Plants take in carbon dioxide during photosynthesis.", "answer": "carbon dioxide"}\n'
    "=== END OF EXAMPLE ==="
)
EXAMPLE_ANSWERS = ("carbon dioxide",)

SELECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"selected": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
    "required": ["selected"],
    "additionalProperties": False,
}
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "maxLength": 200},
        "answer": {"type": "string", "minLength": 1, "maxLength": 100},
    },
    "required": ["reason", "answer"],
    "additionalProperties": False,
}


def answer_schema_with(field: str, schema: dict[str, Any], *, first: bool = False) -> dict[str, Any]:
    """``ANSWER_SCHEMA`` with one more required field, ahead of reason and answer (``first``: a
    decision the answer follows, such as agreement) or after them (a rating of the answer)."""
    props = ANSWER_SCHEMA["properties"]
    properties = {field: schema, **props} if first else {**props, field: schema}
    return {**ANSWER_SCHEMA, "properties": properties, "required": list(properties)}


_FINAL = re.compile(r"final answer\s*[:：]\s*(.+)", re.IGNORECASE)
_KNUM = re.compile(r"\(?\bK\s*(\d{1,3})\b\)?", re.IGNORECASE)
# An explicit knowledge reference ("K3", "(K3)", "K2, K5") is never an answer; a plain number can be
# ("1703", "8") — the items are numbered K1…Kn precisely so that the two cannot be confused.
KNOWLEDGE_LABEL = re.compile(r"^[\s(\[]*K\s*\d+[\s)\]]*([,;]\s*[\s(\[]*K\s*\d+[\s)\]]*)*$", re.IGNORECASE)
# The 0.5B summarizer answered "Debater 1" (the label it was shown) instead of that debater's answer.
_SPEAKER_LABEL = re.compile(r"^(debater|agent)\s*\d+$", re.IGNORECASE)
_LEADS = re.compile(r"^(the\s+)?((final|short)\s+)?answer\s*(is\b|:)\s*", re.IGNORECASE)
MAX_ANSWER_WORDS = 12
# ``judge=auto``: the LLM judge checked by the rule (what measured better with small models).
AUTO_JUDGE = "both"


def render_knowledge(items: Sequence[KnowledgeItem]) -> str:
    """The items as quoted data in a delimited block (``prompts.untrusted``)."""
    return knowledge_block(items, "(K{n})")


def select(question: str, pool: Sequence[KnowledgeItem], previous_answer: str | None) -> list[ChatMessage]:
    """Choose up to three items; JSON so the reply cannot be mistaken for an answer."""
    prev = (
        f"Your answer so far: {short_answer(previous_answer) or previous_answer}" if previous_answer else ""
    )
    instruction = (
        f"Question: {question}\n"
        "Which knowledge items above contain facts that help answer this question? Do not answer the "
        "question. Reply with JSON only, listing at most 3 item numbers, for example "
        '{"selected": [2, 5]}, or {"selected": []} if none helps.'
    )
    return system_user(DEBATER_ROLE, join_blocks(render_knowledge(pool), prev, instruction))


REASON_LIMIT = 400  # characters of another agent's reason that the others are shown


def reason_as_shown(text: str, limit: int = REASON_LIMIT) -> str:
    """A reply's reason as the other agents are shown it: the JSON ``reason``, or the text before its
    ``Final answer:`` line, cut at ``limit`` characters."""
    reason = _reason(text)
    return reason[:limit] + (" …" if len(reason) > limit else "")


def _reason(text: str) -> str:
    data = _json_reply(text)
    if data is not None:
        return str(data.get("reason") or "").strip()
    return _FINAL.split(text)[0].strip() if text else ""


def copies_a_reason(answer: str | None, replies: Sequence[str]) -> bool:
    """Whether an answer is one of the shown replies' reasons copied into the answer slot, alone or
    with the "[answer] because:" it was shown with: a verdict that does so argues instead of answering
    (a third of MAD's moderator verdicts on the 1.5B gave a debater's reason, such as "The other side
    is correct. …", as the debate's answer)."""
    if not answer:
        return False
    key = answer_key(answer)
    if not key:
        return False
    for reply in replies:
        reason = _reason(reply)
        # the whole reason, the cut the verdict was shown (without its ellipsis), or the quoted line
        shown = (reason, reason[:REASON_LIMIT], answer_with_reason(reply))
        if key in {answer_key(s) for s in shown}:
            return True
    return False


def answer_with_reason(text: str, limit: int = REASON_LIMIT) -> str:
    """Another agent's reply as the others are shown it: its short answer and reason, not the raw JSON."""
    ans = short_answer(text)
    reason = reason_as_shown(text, limit)
    if ans and reason:
        return f"[{ans}] because: {reason}"
    # An unusable reply is not quoted: its text can carry the format example's answer, which the 0.5B
    # summarizer then returned ("carbon dioxide" for a question about rib vaults).
    return f"[{ans}]" if ans else "(no usable answer)"


def shorten(answer: str) -> str:
    """Normalise an answer to a short span: no lead-in, no trailing sentence, at most 12 words."""
    a = answer.strip().strip("[]").strip().strip("\"'*`").strip()
    a = _LEADS.sub("", a)
    a = re.split(r"(?<=[a-z0-9)])\.\s", a, maxsplit=1)[0]
    a = a.rstrip(" .;:,")
    words = a.split()
    return " ".join(words[:MAX_ANSWER_WORDS])


# Answer-slot wording a small model copies back verbatim instead of answering: the field names, and
# the descriptions mad's verdict formats once put inside their JSON templates (12 of 71 MAD answers on
# the 1.5B were "the short answer"; the templates now hold "..." and describe the fields after them).
PLACEHOLDER_ANSWERS = (
    "answer",
    "short answer",
    "your short answer",
    "the short answer you think is correct, or empty",
    "the short answer",
)

# Replies to a debate turn's "Do you agree?" put in the answer slot, in the words of the prompt that
# quotes "the other side" (9 of 410 MAD debater answers on the 1.5B were "The other side is correct").
# (Compared by ``answer_key``, which drops the articles: "other side is correct" is the same reply.)
AGREEMENT_REPLIES = (
    *(f"the other side is {verdict}" for verdict in ("correct", "incorrect", "right", "wrong")),
    "i agree",
    "i disagree",
    "agree",
    "disagree",
)

# Answers a model copies from the format instead of answering (compared by ``answer_key``; filler
# such as "..." has an empty key and is refused before this set is consulted).
_NOT_ANSWERS = frozenset(answer_key(x) for x in (*EXAMPLE_ANSWERS, *PLACEHOLDER_ANSWERS, *AGREEMENT_REPLIES))


def is_answer(answer: str) -> bool:
    """Whether a parsed span answers at all: not empty, not a knowledge number or speaker label, not
    the format's example or placeholder copied back."""
    key = answer_key(answer)
    return (
        bool(key)
        and key not in _NOT_ANSWERS
        and not KNOWLEDGE_LABEL.match(answer)
        and not _SPEAKER_LABEL.match(answer.strip())
    )


def _json_reply(text: str | None) -> dict[str, Any] | None:
    """The reply's ``{"reason": ..., "answer": ...}`` object, also when text surrounds it; else None."""
    return first_json_object(text, key="answer")


def parse_answer(text: str) -> ParsedAnswer:
    """The JSON reply's ``answer`` or a ``Final answer: [X]`` line (both unambiguous); fallbacks are
    recorded and reject knowledge numbers and the example's answer."""
    if not text or not text.strip():
        return ParsedAnswer(None, "empty reply")
    data = _json_reply(text)
    if data is not None:
        raw = data.get("answer")
        candidate = shorten(raw) if isinstance(raw, str) else ""
        if is_answer(candidate):
            return ParsedAnswer(candidate)
        reason = (
            "empty"
            if not candidate
            else "a knowledge number, speaker label, placeholder or the example's answer"
        )
        return ParsedAnswer(None, f"JSON answer is {reason}: {raw!r}"[:200])
    for match in reversed(_FINAL.findall(text)):
        candidate = match.strip()
        bracket = re.search(r"\[([^\[\]]+)\]", candidate)
        candidate = shorten(bracket.group(1) if bracket else candidate)
        if is_answer(candidate):
            return ParsedAnswer(candidate)
    fallback = parse_bracket_answer(text, reject_numbers=True)
    if fallback.answer and is_answer(shorten(fallback.answer)):
        return ParsedAnswer(
            shorten(fallback.answer),
            f"no valid 'Final answer:' line; {fallback.parse_error or 'used bracketed answer'}",
        )
    return ParsedAnswer(None, "no valid 'Final answer:' line or usable fallback")


def short_answer(text: str | None) -> str | None:
    """The parsed short answer of a reply, or None (for quoting other agents concisely)."""
    return parse_answer(text).answer if text else None


def parse_select(text: str, pool_size: int, max_selected: int) -> ParsedSelection:
    """JSON first; then ``K3``/``(K3)`` mentions; "none"/empty list means no knowledge."""
    stripped = (text or "").strip()
    data = first_json_object(stripped, key="selected")
    if data is not None:
        parsed = parse_selection_json(json.dumps(data), pool_size, max_selected)
        if parsed.parse_error is None:
            return parsed
    numbers = [int(n) for n in _KNUM.findall(stripped)]
    if numbers:
        valid = [n for n in dict.fromkeys(numbers) if 1 <= n <= pool_size][:max_selected]
        ignored = [n for n in dict.fromkeys(numbers) if not 1 <= n <= pool_size]
        return ParsedSelection(valid, not valid, ignored, "no JSON selection; used K-number mentions")
    if re.search(r"\b(none|no item|nothing)\b", stripped, re.IGNORECASE):
        return ParsedSelection([], True, [], "no JSON selection; reply says none")
    return ParsedSelection([], False, [], "no JSON selection or K-number found")


def parse_judge(text: str) -> ParsedVerdict:
    stripped = (text or "").strip()
    data = first_json_object(stripped, key="consensus")
    if data is not None:
        verdict = parse_verdict_json(json.dumps(data))
        if verdict.parse_error is None:
            return verdict
    lowered = stripped.lower()
    if re.search(r"\btrue\b", lowered) and not re.search(r"\bfalse\b", lowered):
        return ParsedVerdict(True, "no JSON verdict; used 'true'")
    if re.search(r"\bfalse\b", lowered) and not re.search(r"\btrue\b", lowered):
        return ParsedVerdict(False, "no JSON verdict; used 'false'")
    return parse_verdict(stripped)

"""Reading ``mad``'s verdicts: the paper's JSON keys or the robust style's, never ``eval``.

The engine's JSON extractor first, then a tolerant regular-expression fallback for replies that are
not quite JSON.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.context import Parser
from engine.jsontext import first_json_object
from engine.prompts import robust
from services.chat_model import ChatCompletion


@dataclass(frozen=True)
class MadVerdict:
    preference: bool | None
    side: str | None
    answer: str | None
    reason: str | None = None
    parse_error: str | None = None


def _norm_key(key: str) -> str:
    return re.sub(r"[^a-z]", "", key.lower())


def _truthy(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("yes", "true", "y"):
            return True
        if v in ("no", "false", "n"):
            return False
    return None


_PREF_RE = re.compile(r"preference\"?\s*:\s*\"?(yes|no|true|false)", re.I)
_SIDE_RE = re.compile(r"side\"?\s*:\s*\"?(affirmative|negative|none)", re.I)
_ANSWER_RE = re.compile(r"debate_answer\"?\s*:\s*\"([^\"]*)\"", re.I)


def parse_mad_verdict(text: str, *, require_preference: bool = True) -> MadVerdict:
    """A moderator/judge verdict from the paper's JSON keys or the robust style's keys.

    ``require_preference=False`` reads the extractive judge's ``{"Reason", "debate_answer"}``.
    """
    obj = first_json_object(text)
    error = None
    if obj is not None:
        fields = {_norm_key(k): v for k, v in obj.items()}
        pref = _truthy(fields.get("whetherthereisapreference", fields.get("preference")))
        side_raw = fields.get("supportedside")
        side = str(side_raw).strip().lower() if isinstance(side_raw, str) and side_raw.strip() else None
        ans_raw = fields.get("debateanswer")
        answer = (
            str(ans_raw).strip() if isinstance(ans_raw, str | int | float) and str(ans_raw).strip() else None
        )
        reason = fields.get("reason")
        reason_s = str(reason) if reason is not None else None
    else:
        error = "no JSON object; used key patterns"
        m_pref = _PREF_RE.search(text or "")
        m_side = _SIDE_RE.search(text or "")
        m_ans = _ANSWER_RE.search(text or "")
        pref = _truthy(m_pref.group(1)) if m_pref else None
        side = m_side.group(1).lower() if m_side else None
        answer = m_ans.group(1).strip() or None if m_ans else None
        reason_s = None
    if side not in ("affirmative", "negative"):
        side = None
    if require_preference and pref is None:
        return MadVerdict(
            None,
            side,
            answer,
            reason_s,
            (error or "") + "; no preference stated" if error else "no preference stated",
        )
    if not require_preference and answer is None:
        return MadVerdict(None, side, None, reason_s, error or "no debate_answer")
    return MadVerdict(pref if require_preference else True, side, answer, reason_s, error)


def short(answer: str | None) -> str | None:
    """A verdict's answer as a short span (the moderator may answer in a sentence); None where it is
    no answer: the format's placeholder or example copied back, a knowledge number, a speaker label."""
    if not answer:
        return None
    bracket = re.search(r"\[([^\[\]]+)\]", answer)
    span = robust.shorten(bracket.group(1) if bracket else answer)
    return span if robust.is_answer(span) else None


def verdict_parser(require_preference: bool, replies: Sequence[str] = ()) -> Parser:
    """A transcript parser for the moderator's verdicts (or, without a preference, the judge's) on the
    debaters' ``replies``: a verdict whose answer is one of their reasons copied back has no answer."""

    def parse(c: ChatCompletion) -> dict[str, Any]:
        v = parse_mad_verdict(c.text, require_preference=require_preference)
        copied = robust.copies_a_reason(v.answer, replies)
        return {
            "verdict": v.preference,
            "answer": None if copied else short(v.answer),
            "parse_error": v.parse_error,
            "extra": {"supported_side": v.side, "reason": v.reason, "copied_reason": copied},
        }

    return parse

"""``mad``: Liang et al. (2024), Multi-Agent Debate with divergent thinking.

An affirmative and a negative debater argue in "tit for tat" (level 0-3), the negative answering the
affirmative within each round; after every round a moderator gives a JSON verdict and, with adaptive
break, a clear preference ends the debate with its answer. At the round limit a two-step extractive
judge (candidates, then the final answer) decides. Verdicts are read with the engine's JSON
extractor and a tolerant regular-expression fallback, never ``eval``; unreadable verdicts are re-asked
a bounded number of times, then recorded as abstentions (the debate continues, or the fallback answers).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from debate_worker.engine.answers import answers_agree
from debate_worker.engine.context import DebateContext
from debate_worker.engine.jsontext import first_json_object
from debate_worker.engine.madke import answer_parser, select_knowledge
from debate_worker.engine.outcome import Outcome, ProtocolRun
from debate_worker.engine.prompts import get_prompts, robust
from debate_worker.engine.protocols import mad_prompts as mp
from debate_worker.engine.protocols.common import call_with_reasks
from services.llm import ChatCompletion


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
    """A verdict's answer as a short span (the moderator may answer in a sentence)."""
    if not answer:
        return None
    bracket = re.search(r"\[([^\[\]]+)\]", answer)
    return robust.shorten(bracket.group(1) if bracket else answer) or None


def verdict_parser(require_preference: bool) -> Any:
    """A transcript parser for the moderator's verdicts (or, without a preference, the judge's)."""

    def parse(c: ChatCompletion) -> dict[str, Any]:
        v = parse_mad_verdict(c.text, require_preference=require_preference)
        return {
            "verdict": v.preference,
            "answer": short(v.answer),
            "parse_error": v.parse_error,
            "extra": {"supported_side": v.side, "reason": v.reason},
        }

    return parse


async def run_mad(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    cfg = ctx.config
    style = cfg.prompt_style
    prompts = get_prompts(style)
    parse_answer = answer_parser(prompts)
    level = cfg.mad.tit_for_tat
    aff_agent, neg_agent = (1, 0) if cfg.mad.swap_sides else (0, 1)
    aff_turns: list[list[str]] = []  # [user, assistant] pairs
    neg_turns: list[list[str]] = []
    mod_turns: list[list[str]] = []
    answers: list[list[str | None]] = []
    verdict_state: dict[str, Any] | None = None
    if run.resume is not None:
        st = run.resume.state
        aff_turns, neg_turns, mod_turns = st["aff"], st["neg"], st["mod"]
        answers = [list(a) for a in st["answers"]]
        verdict_state = st.get("verdict")

    async def debater(r: int, side: str, agent: int, user_for: Any, turns: list[list[str]]) -> Any:
        previous = turns[-1][1] if turns else None
        knowledge = await select_knowledge(ctx, prompts, r, agent, previous)
        user = user_for(knowledge)
        record = await ctx.call(
            round=r,
            role=side,
            agent=agent,
            messages=mp.conversation(
                mp.debater_system(style, ctx.question, level, side), [*((u, a) for u, a in turns), (user, "")]
            ),
            parse=parse_answer,
            temperature=cfg.agent_temperature(agent),
            knowledge=[k.n for k in knowledge],
        )
        turns.append([user, record.text])
        return record

    r = len(aff_turns)
    ended = verdict_state is not None and bool(verdict_state.get("preference")) and cfg.mad.adaptive_break
    while not ended and r < cfg.rounds:
        r += 1
        if r == 1:
            aff = await debater(
                r, "affirmative", aff_agent, lambda k: mp.opening(style, ctx.question, k), aff_turns
            )
            neg = await debater(
                r, "negative", neg_agent, lambda k: mp.rebut_first(style, aff_turns[-1][1], k), neg_turns
            )
        else:
            last_neg = neg_turns[-1][1]
            aff = await debater(
                r, "affirmative", aff_agent, functools.partial(mp.respond, style, last_neg), aff_turns
            )
            neg = await debater(
                r, "negative", neg_agent, lambda k: mp.respond(style, aff_turns[-1][1], k), neg_turns
            )
        answers.append([aff.answer, neg.answer] if aff_agent == 0 else [neg.answer, aff.answer])
        user = mp.moderator(style, r, aff.text, neg.text)
        record, readable = await call_with_reasks(
            ctx,
            round=r,
            role="moderator",
            agent=None,
            messages=mp.conversation(
                mp.moderator_system(style, ctx.question), [*((u, a) for u, a in mod_turns), (user, "")]
            ),
            parse=verdict_parser(True),
            readable=lambda rec: rec.verdict is not None,
            temperature=0.0,
            json_schema=mp.VERDICT_SCHEMA if style == "robust" else None,
        )
        mod_turns.append([user, record.text])
        verdict_state = {
            "preference": bool(record.verdict) if readable else False,
            "answer": record.answer,
            "side": record.extra.get("supported_side"),
            "abstained": not readable,
            "aff_answer": aff.answer,
            "neg_answer": neg.answer,
        }
        await ctx.emit(
            "judge.verdict",
            {
                "round": r,
                "consensus": verdict_state["preference"],
                "mode": "mad-moderator",
                "abstained": not readable,
            },
        )
        ended = bool(verdict_state["preference"]) and cfg.mad.adaptive_break
        await ctx.emit("round.completed", {"round": r, "answers": answers[-1], "consensus": ended})
        await run.checkpoint(
            ctx,
            r,
            {
                "aff": aff_turns,
                "neg": neg_turns,
                "mod": mod_turns,
                "answers": answers,
                "verdict": verdict_state,
            },
        )

    final = answers[-1] if answers else []
    vs = verdict_state or {}
    if vs.get("preference"):
        answer = vs.get("answer")
        side = vs.get("side")
        if not answer and side in ("affirmative", "negative"):
            answer = vs.get("aff_answer") if side == "affirmative" else vs.get("neg_answer")
        if answer:
            return Outcome(
                answer, f"moderator (round {r}, supported side: {side or 'unstated'})", r, True, final
            )
    # Round limit (or a preference without an answer): the two-step extractive judge.
    aff_last = aff_turns[-1][1] if aff_turns else ""
    neg_last = neg_turns[-1][1] if neg_turns else ""
    return await extractive_judge(ctx, r, aff_last, neg_last, final, vs)


async def extractive_judge(
    ctx: DebateContext, r: int, aff_last: str, neg_last: str, final: list[str | None], vs: dict[str, Any]
) -> Outcome:
    """The paper's two-step judge (candidates, then the final answer); if its verdict stays
    unreadable, a side's last answer (the negative's first), else no answer."""
    style = ctx.config.prompt_style
    system = mp.moderator_system(style, ctx.question)
    step1 = mp.judge_candidates(style, aff_last, neg_last)
    cand = await ctx.call(
        round=r,
        role="judge",
        agent=None,
        messages=mp.conversation(system, [(step1, "")]),
        parse=lambda c: {"extra": {"step": "candidates"}},
        temperature=0.0,
    )
    step2 = mp.judge_final(style, ctx.question)
    record, readable = await call_with_reasks(
        ctx,
        round=r,
        role="judge",
        agent=None,
        messages=mp.conversation(system, [(step1, cand.text), (step2, "")]),
        parse=verdict_parser(False),
        readable=lambda rec: rec.answer is not None,
        temperature=0.0,
        json_schema=mp.FINAL_SCHEMA if style == "robust" else None,
    )
    if readable and record.answer:
        return Outcome(record.answer, "extractive judge (round limit)", r, answers_agree(final), final)
    neg_answer = vs.get("neg_answer")
    aff_answer = vs.get("aff_answer")
    if neg_answer or aff_answer:
        chosen, who = (neg_answer, "negative") if neg_answer else (aff_answer, "affirmative")
        return Outcome(
            chosen, f"{who} side's last answer (judge verdict unreadable, abstained)", r, False, final
        )
    return Outcome(None, "no answer: judge abstained and no side gave a parseable answer", r, False, final)

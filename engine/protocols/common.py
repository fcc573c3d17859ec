"""What the protocols share: knowledge selection and answer parsing, view ordering, speaking order,
agents' personas, confidence statements and bounded re-asks for unreadable votes and verdicts.

Everything here is either a pure function (tested on its own) or a thin layer over
``DebateContext.call``, so every protocol keeps the engine's uniform accounting.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from engine.answers import normalize_answer
from engine.config import DebateConfig, GoldRequired
from engine.context import DebateContext, Parser
from engine.parsing import ParsedAnswer, parse_selection_json
from engine.prompts import PromptSet
from engine.result import TranscriptRecord
from services.chat_model import ChatCompletion, ChatMessage
from services.knowledge import KnowledgeItem

UNPARSED_KEY = "\x00unparsed"


# ------------------------------------------------------------------------- knowledge and answers
async def select_knowledge(
    ctx: DebateContext, style: PromptSet, round: int, agent: int, previous_answer: str | None
) -> list[KnowledgeItem]:
    """MADKE Eq. 2: the items this agent sees before speaking (none, all, or its own selection)."""
    items = ctx.pool.items
    if not items:
        return []
    if not ctx.config.selection:
        return list(items)
    size, cap = len(items), ctx.config.max_selected

    def parse(c: ChatCompletion) -> dict[str, Any]:
        if c.output_mode == "schema":
            sel = parse_selection_json(c.text, size, cap)
        else:
            sel = style.parse_select(c.text, size, cap)
        return {
            "selected": sel.selected,
            "no_found": sel.no_found,
            "ignored_selection": sel.ignored,
            "parse_error": sel.parse_error,
        }

    record = await ctx.call(
        round=round,
        role="select",
        agent=agent,
        messages=with_persona(style.select(ctx.question, items, previous_answer), persona(ctx.config, agent)),
        parse=parse,
        temperature=ctx.config.agent_temperature(agent),
        json_schema=style.SELECT_SCHEMA,
    )
    by_n = ctx.pool.by_number()
    return [by_n[n] for n in record.selected or []]


class AnswerReader(Protocol):
    """Any prompt set that reads an answer from a reply in its style."""

    def parse_answer(self, text: str) -> ParsedAnswer: ...


def answer_parser(prompts: AnswerReader) -> Parser:
    """A transcript parser that records the reply's answer (or why there is none)."""

    def parse(c: ChatCompletion) -> dict[str, Any]:
        parsed = prompts.parse_answer(c.text)
        return {"answer": parsed.answer, "parse_error": parsed.parse_error}

    return parse


# --------------------------------------------------------------------------------------- ordering
def answer_key(answer: str | None, agent: int) -> str:
    """The key answers are compared by. An unparseable answer gets a key of its own (never dropped,
    never counted as agreeing with another unparseable answer)."""
    norm = normalize_answer(answer) if answer else ""
    return norm if norm else f"{UNPARSED_KEY}:{agent}"


def path_consistency(answers: Sequence[str | None]) -> list[int]:
    """Zhang et al. Eq. 2 with a deterministic count: for each agent, how many *other* agents reached
    the same (normalised) answer in this round."""
    keys = [answer_key(a, i) for i, a in enumerate(answers)]
    counts = Counter(keys)
    return [counts[k] - 1 for k in keys]


def matches_gold(answer: str | None, gold: Sequence[str]) -> bool:
    """Exact match after normalisation, or a gold alias contained in the answer (short QA answers)."""
    if not answer:
        return False
    norm = normalize_answer(answer)
    if not norm:
        return False
    for g in gold:
        ng = normalize_answer(g)
        if ng and (ng == norm or f" {ng} " in f" {norm} "):
            return True
    return False


def order_views(
    others: Sequence[int],
    answers: Sequence[str | None],
    ordering: str,
    *,
    seed: int = 0,
    gold: Sequence[str] | None = None,
) -> list[int]:
    """The order in which an agent sees the other agents' answers (agent indices).

    ``fixed``: agent index order. ``random``: a seeded shuffle (``seed`` should differ per round and
    viewer so the order is not the same permutation everywhere). ``madc``: ascending path consistency,
    the most consistent view last (ties keep index order). ``truth_last``: agents whose answer matches
    the gold answer last (needs ``gold``).
    """
    base = list(others)
    if ordering == "fixed":
        return base
    if ordering == "random":
        rng = random.Random(seed)
        rng.shuffle(base)
        return base
    if ordering == "madc":
        consistency = path_consistency(answers)
        return sorted(base, key=lambda i: (consistency[i], i))
    if ordering == "truth_last":
        if not gold:
            raise GoldRequired("ordering: 'truth_last' needs the gold answer (evaluation only)")
        return sorted(base, key=lambda i: (matches_gold(answers[i], gold), i))
    raise ValueError(f"ordering: unknown value {ordering!r}")


def speaking_order(n: int, mode: str, *, seed: int = 0) -> list[int]:
    """Who speaks first in a sequential turn (Wu et al.'s debate order factor)."""
    order = list(range(n))
    if mode == "reverse":
        return order[::-1]
    if mode == "random":
        random.Random(seed).shuffle(order)
    return order


def view_seed(config: DebateConfig, round: int, agent: int) -> int:
    return (config.seed or 0) * 1_000_003 + round * 101 + agent


# ------------------------------------------------------------------------------------------ teams
def persona(config: DebateConfig, agent: int) -> str | None:
    if config.team is not None and 0 <= agent < len(config.team):
        return config.team[agent].persona
    return None


def with_persona(messages: list[ChatMessage], role: str | None) -> list[ChatMessage]:
    """The messages with the agent's persona added to its system prompt (one sanitised line)."""
    if not role:
        return messages
    line = f"Your role: {role}."
    if messages and messages[0]["role"] == "system":
        first: ChatMessage = {"role": "system", "content": f"{messages[0]['content']} {line}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": line}, *messages]


# ------------------------------------------------------------------------------------- confidence
_CONFIDENCE = re.compile(r"confidence\"?\s*(?:score|level)?\s*[:=]?\s*\(?\s*(\d{1,2})\s*(?:/\s*10)?", re.I)


def parse_confidence(text: str | None) -> int | None:
    """The last ``Confidence: N`` (1-10) in a reply; out-of-range or missing gives None."""
    if not text:
        return None
    found = _CONFIDENCE.findall(text)
    for raw in reversed(found):
        value = int(raw)
        if 1 <= value <= 10:
            return value
    return None


CONFIDENCE_INSTRUCTION = (
    "Also state how confident you are in your answer on a scale from 1 to 10 on its own line, "
    "as: Confidence: N"
)


# ---------------------------------------------------------------------------------------- re-asks
REASK_NOTE = (
    "Your previous reply could not be read. Reply again, following the requested format exactly "
    "and adding nothing else."
)


async def call_with_reasks(
    ctx: DebateContext,
    *,
    round: int,
    role: str,
    agent: int | None,
    messages: list[ChatMessage],
    parse: Callable[[ChatCompletion], dict[str, Any]],
    readable: Callable[[TranscriptRecord], bool],
    temperature: float | None = None,
    json_schema: dict[str, Any] | None = None,
    knowledge: Sequence[int] = (),
) -> tuple[TranscriptRecord, bool]:
    """One call plus at most ``config.reasks`` re-asks while the reply is unreadable.

    Returns the last record and whether it was readable. An unreadable last reply is marked
    ``extra.abstained`` in the transcript, so the abstention is visible, never silent.
    """
    convo = list(messages)
    attempts = 1 + ctx.config.reasks
    record: TranscriptRecord | None = None
    for attempt in range(attempts):
        record = await ctx.call(
            round=round,
            role=role,
            agent=agent,
            messages=convo,
            parse=parse,
            temperature=temperature,
            json_schema=json_schema,
            knowledge=knowledge,
        )
        record.extra["attempt"] = attempt + 1
        if readable(record):
            return record, True
        convo = [
            *convo,
            {"role": "assistant", "content": record.text},
            {"role": "user", "content": REASK_NOTE},
        ]
    assert record is not None
    record.extra["abstained"] = True
    return record, False

"""The search passage: what the pool's Wikipedia searches look for with ``search_query="passage"``.

Before the pool is built, the debate's model writes two or three sentences that answer the question as
an encyclopaedia would (query2doc / HyDE); the retriever then searches for the question followed by
them. On 100 dev questions with the embedded Qwen2.5-Coder-1.5B this put the answer into more pools
(answer-in-pool@5 0.340 → 0.430, paired bootstrap 95 % CI of the difference [+0.020, +0.160]) for
about 65 prompt + 27 completion tokens per question (``reports/query-rewrite/bench.md``). RAG's answers on
200 dev questions moved the same way but within noise (+0.040, 95 % CI [-0.015, +0.095],
``reports/rag-passage``), so ``question`` stays the default.

The call is one of the debate's own: it goes through a ``DebateContext`` (over an empty pool), so it
is checked against the debate's call and token budget, charged to ``on_usage`` as it is sent and
settled with what the server reported, and recorded as a transcript record (role ``search``, round 0)
that the debate's transcript then starts with (``run_debate(search=...)``), counted in ``usage`` and
``usage_by_role``. It runs at temperature 0 with the config's seed (0 when it has none), so a
question's passage, and with it its pool, is the same every time for the same model. A failed call
never fails the debate: the pool is then searched with the question alone, and the warning says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from engine.config import DebateConfig, as_question
from engine.context import BudgetExhausted, DebateContext, EventSink, RoleModels, Spend, UsageSink
from engine.parsing import cut_at_word
from engine.prompts import get_prompts
from engine.registry import SEARCH_ROLE
from engine.result import TranscriptRecord
from engine.runner import LATE_SETTLEMENT_S
from services.chat_model import ChatCompletion, LLMError
from services.knowledge import KnowledgePool, empty_pool

# The passage's reply limit (what was measured); the config's max_tokens is for the debate's turns.
SEARCH_MAX_TOKENS = 96
# What is searched of it at most: 96 tokens are rarely 600 characters, and the retriever takes 4,000.
SEARCH_TEXT_MAX_CHARS = 1000
_LABELS = ("passage:", "answer:")
_FALLBACK = "the pool was searched with the question alone"

__all__ = [
    "SEARCH_MAX_TOKENS",
    "SEARCH_ROLE",
    "SEARCH_TEXT_MAX_CHARS",
    "SearchPassage",
    "clean_passage",
    "prepare_knowledge",
    "search_key",
    "write_search_passage",
]


@dataclass(frozen=True)
class SearchPassage:
    """What the pool is searched with, besides the question.

    ``text`` None means the question alone; ``record`` is the call (None when none was made or it
    failed); ``warning`` says why the question alone is searched when a passage was asked for."""

    text: str | None = None
    record: TranscriptRecord | None = None
    warning: str | None = None

    @classmethod
    def from_record(cls, record: TranscriptRecord) -> SearchPassage:
        """The passage a recorded call wrote (a resumed job's, kept with its checkpoint)."""
        text = record.extra.get("search_text") or None
        if text is None:
            return cls(record=record, warning=f"the model wrote an empty search passage: {_FALLBACK}")
        return cls(text=str(text), record=record)


def search_key(config: DebateConfig) -> str:
    """Which debates may share a pool: ``question`` for every configuration that searches for the
    question alone, else ``passage-<digest>`` of what decides the passage besides the question and the
    model (the style's prompt, the seed, the reply limit). ``parley eval`` builds one pool per item and
    key, for all the runs with that key."""
    if not config.writes_search_passage:
        return "question"
    prompt = get_prompts(config.prompt_style).search_passage("{question}")
    decided = json.dumps([prompt, _seed(config), SEARCH_MAX_TOKENS], sort_keys=True)
    return f"passage-{hashlib.sha256(decided.encode()).hexdigest()[:12]}"


def _seed(config: DebateConfig) -> int:
    return config.seed if config.seed is not None else 0


def clean_passage(text: str) -> str:
    """The reply as searched: one line, a leading ``Passage:`` label dropped, cut at a word boundary."""
    flat = " ".join(text.split())
    for label in _LABELS:
        if flat.lower().startswith(label):
            flat = flat[len(label) :].lstrip()
    return cut_at_word(flat, SEARCH_TEXT_MAX_CHARS)


def _parse(completion: ChatCompletion) -> dict[str, Any]:
    passage = clean_passage(completion.text)
    return {
        "parse_error": None if passage else "the reply is empty: the question alone is searched",
        "extra": {"search_text": passage},
    }


async def write_search_passage(
    question: str,
    config: DebateConfig,
    llm: RoleModels,
    on_event: EventSink | None = None,
    *,
    on_usage: UsageSink | None = None,
    spent: Spend | None = None,
) -> SearchPassage:
    """Have the debate's model write the search passage, when ``config`` asks for one.

    ``on_usage`` and ``spent`` are the debate's (the job's charges so far), so the call counts against
    its budget and is charged like every other; ``on_event`` receives its ``turn.completed``. Never
    raises for the model: an LLM error, a spent budget or an empty reply leave ``text`` None with a
    warning for the pool. A ``Question`` (validated where it entered) is taken as it is; a plain ``str``
    is validated here."""
    if not config.writes_search_passage:
        return SearchPassage()
    question = as_question(question)
    settings = config.model_copy(update={"max_tokens": SEARCH_MAX_TOKENS, "seed": _seed(config)})
    ctx = DebateContext(
        question, empty_pool(question), settings, llm, on_event, on_usage=on_usage, spent=spent
    )
    prompts = get_prompts(config.prompt_style)
    try:
        record = await ctx.call(
            round=0,
            role=SEARCH_ROLE,
            agent=None,
            messages=prompts.search_passage(question),
            parse=_parse,
            temperature=0.0,
        )
    except BudgetExhausted as exc:
        return SearchPassage(warning=f"no search passage was written ({exc.what}): {_FALLBACK}")
    except LLMError as exc:
        # The error's own text can quote the server's reply: the pool's warning names its kind only.
        return SearchPassage(warning=f"the search passage failed ({type(exc).__name__}): {_FALLBACK}")
    finally:
        await ctx.settle_late_calls(LATE_SETTLEMENT_S)
    return SearchPassage.from_record(record)


async def prepare_knowledge(
    question: str,
    config: DebateConfig | None,
    llm: RoleModels | None,
    build_pool: Callable[[str | None], Awaitable[KnowledgePool]],
    *,
    written: SearchPassage | None = None,
    on_event: EventSink | None = None,
    on_usage: UsageSink | None = None,
    spent: Spend | None = None,
) -> tuple[KnowledgePool, TranscriptRecord | None]:
    """The step every runner takes before a debate (the worker, ``parley ask``, ``parley eval``): the
    search passage, the pool built with it, and the passage's warning on the pool.

    ``build_pool(search_text)`` is the runner's own way to the retriever (its timeout, cache or
    status line); ``config`` None searches for the question alone; ``written`` is a passage an earlier
    attempt already wrote (a resumed job), used again instead of a new call. Returns the pool and the
    call that wrote the passage (None when none did)."""
    if written is not None:
        passage = written
    elif config is not None and config.writes_search_passage:
        if llm is None:
            raise ValueError("search_query=passage needs the models that write the passage")
        passage = await write_search_passage(question, config, llm, on_event, on_usage=on_usage, spent=spent)
    else:
        passage = SearchPassage()
    pool = await build_pool(passage.text)
    if passage.warning is not None:
        pool.warnings.append(passage.warning)
    return pool, passage.record

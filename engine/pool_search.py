"""Searches during a debate: knowledge that follows the debate instead of being fixed before it.

MADKE retrieves once, before the first round, and its debaters choose among what that search returned.
Here, after a round that did not end the debate (and, with ``before_first_round``, before the first
round for a debater whose selection found nothing it could use), each debater with searches left writes
one search: a short query, or a sentence it expects the answer to appear in, or nothing when the pool
already holds what it needs. The searches run through the same retrieval path as the first pool (the
``PoolBuilder`` the runner built it with: both stages, the question followed by the search text), the
items the pool already holds are dropped, and the rest join the shared pool, numbered after the items
it had, each with its provenance (agent, round, search). Every agent then selects from the grown pool.

Bounds (``DebateSearchSettings``): searches per agent, items one search adds, the pool's size in all.
The search's LLM call is one of the debate's own (role ``query``): checked against its budget, charged,
recorded. What cannot be searched never fails the debate: a spent budget refuses the search, a
retriever that cannot be reached ends the searching, and the pool's warnings say so.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Any

from engine.context import BudgetExhausted, DebateContext
from engine.jsontext import first_json_object
from engine.parsing import cut_at_word
from engine.prompts.untrusted import MAX_TITLE_CHARS, quote
from engine.registry import QUERY_ROLE
from engine.result import TranscriptRecord
from services.chat_model import ChatCompletion, ChatMessage, LLMError
from services.knowledge import KnowledgeItem, KnowledgePool, PoolBuilder, SearchProvenance

# What is searched of a written search at most (the retriever takes 4,000 characters of search text).
MAX_QUERY_CHARS = 300
# The search call's reply limit: a query or a sentence, in JSON.
QUERY_MAX_TOKENS = 64
_NONE_WORDS = {"", "none", "nothing", "no search", "n/a", "null"}

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"search": {"type": "string"}},
    "required": ["search"],
    "additionalProperties": False,
}


def query_prompt(question: str, pool: KnowledgePool, answer: str | None) -> list[ChatMessage]:
    """The one message that asks a debater for a search. The pool's titles (quoted as data) show what
    is there; the debater's own latest answer says what it is trying to support."""
    titles = "\n".join(f"[{it.n}] {quote(it.title, MAX_TITLE_CHARS)}" for it in pool.items) or "(none)"
    own = f"Your current answer: {quote(answer, 200)}\n" if answer else ""
    return [
        {
            "role": "user",
            "content": (
                f"Question: {question}\n{own}Knowledge pool (titles, quoted data):\n{titles}\n"
                "If the pool lacks a fact you need to answer the question, write one search for it: "
                "a short query, or a sentence you expect the answer to appear in. If the pool has what "
                'you need, leave it empty. Reply with JSON only: {"search": "..."}'
            ),
        }
    ]


def clean_query(text: str) -> str | None:
    """A written search as it is searched: one line, at most ``MAX_QUERY_CHARS`` at a word boundary;
    None for an empty reply or one that says no search is needed."""
    obj = first_json_object(text, "search")
    raw = obj.get("search") if obj is not None else text
    if not isinstance(raw, str):
        return None
    flat = " ".join(raw.split()).strip().strip('"')
    if flat.lower().rstrip(".") in _NONE_WORDS:
        return None
    return cut_at_word(flat, MAX_QUERY_CHARS)


def _parse(completion: ChatCompletion) -> dict[str, Any]:
    query = clean_query(completion.text)
    return {"extra": {"query": query, "added": []}}


def _key(item: KnowledgeItem) -> str:
    return " ".join(f"{item.title} {item.text}".lower().split())


@dataclass
class DebateSearches:
    """One debate's searches: the retrieval it searches with, what each agent has used, and why the
    searching stopped, if it did. ``searcher`` None (a pool brought with the question, an evaluation
    on a dataset's own pools) means nothing can be searched: the debate says so once and goes on."""

    searcher: PoolBuilder | None
    k_wiki: int
    k_web: int
    used: dict[int, int] = field(default_factory=dict)
    stopped: str | None = None

    @classmethod
    def resumed(
        cls, searcher: PoolBuilder | None, k_wiki: int, k_web: int, transcript: list[TranscriptRecord]
    ) -> DebateSearches:
        """The searches of a resumed debate: each agent's count from the calls already recorded."""
        used: dict[int, int] = {}
        for rec in transcript:
            if rec.role == QUERY_ROLE and rec.agent is not None:
                used[rec.agent] = used.get(rec.agent, 0) + 1
        return cls(searcher, k_wiki, k_web, used)

    def left(self, ctx: DebateContext, agent: int) -> bool:
        settings = ctx.config.debate_search
        return (
            settings.enabled
            and self.stopped is None
            and self.used.get(agent, 0) < settings.per_agent
            and len(ctx.pool.items) < settings.max_pool_items
        )


def _stop(ctx: DebateContext, searches: DebateSearches, why: str) -> None:
    if searches.stopped is None:
        searches.stopped = why
        ctx.pool.warnings.append(why)


async def search_after_round(
    ctx: DebateContext, round: int, answers: list[str | None], agents: list[int] | None = None
) -> int:
    """Let each debater (``agents``, default all) with searches left write one search and grow the
    pool with what it finds; returns how many items were added. ``answers`` are the agents' latest."""
    searches = ctx.searches
    if searches is None or not ctx.config.debate_search.enabled:
        return 0
    if searches.searcher is None:
        _stop(ctx, searches, "searches during the debate were asked for, but no retriever serves this pool")
        return 0
    who = [i for i in (agents if agents is not None else range(ctx.config.agents)) if searches.left(ctx, i)]
    if not who:
        return 0
    latest = [answers[i] if i < len(answers) else None for i in who]
    calls = [
        functools.partial(_write_query, ctx, searches, round, i, a) for i, a in zip(who, latest, strict=True)
    ]
    records = await ctx.gather(calls)
    added = 0
    for agent, record in zip(who, records, strict=True):  # in agent order: numbering is deterministic
        if record is None or not record.extra.get("query") or searches.stopped is not None:
            continue
        added += await _search(ctx, searches, round, agent, record)
    return added


async def search_before_first(ctx: DebateContext, agent: int) -> bool:
    """``before_first_round``: a debater whose first selection found nothing it can use searches
    before it speaks (round 0); True when the pool grew, so it selects again."""
    if not ctx.config.debate_search.before_first_round:
        return False
    return await search_after_round(ctx, 0, [None] * ctx.config.agents, agents=[agent]) > 0


async def _write_query(
    ctx: DebateContext, searches: DebateSearches, round: int, agent: int, answer: str | None
) -> TranscriptRecord | None:
    settings = ctx.config
    try:
        record = await ctx.call(
            round=round,
            role=QUERY_ROLE,
            agent=agent,
            messages=query_prompt(ctx.question, ctx.pool, answer),
            parse=_parse,
            temperature=settings.agent_temperature(agent),
            json_schema=SEARCH_SCHEMA,
        )
    except BudgetExhausted as exc:
        _stop(ctx, searches, f"searches during the debate stopped at round {round}: {exc.what}")
        return None
    except LLMError as exc:
        # A debater that cannot write its search does not search this round; the debate goes on.
        ctx.pool.warnings.append(
            f"agent {agent}'s search at round {round} was not written ({type(exc).__name__})"
        )
        return None
    searches.used[agent] = searches.used.get(agent, 0) + 1
    return record


async def _search(
    ctx: DebateContext, searches: DebateSearches, round: int, agent: int, record: TranscriptRecord
) -> int:
    """Run one written search and add its new items to the pool; returns how many were added."""
    query = str(record.extra["query"])
    settings = ctx.config.debate_search
    room = settings.max_pool_items - len(ctx.pool.items)
    take = min(settings.items_per_search, room)
    if take <= 0:
        # Written at the same time as a search that filled the pool: not run.
        record.extra["skipped"] = f"the pool holds {settings.max_pool_items} items, its limit"
        return 0
    held = {_key(it) for it in ctx.pool.items}
    sources = ctx.config.knowledge_sources()
    # Ask for what the pool holds of each source and the new items on top: dropping the duplicates
    # must still leave ``take`` new ones when the search finds them.
    k_wiki = min(50, searches.k_wiki + take) if "wikipedia" in sources and searches.k_wiki else 0
    k_web = min(50, searches.k_web + take) if "web" in sources and searches.k_web else 0
    assert searches.searcher is not None
    try:
        found = await searches.searcher.build_pool(ctx.question, k_wiki, k_web, search_text=query)
    except (asyncio.CancelledError, BudgetExhausted):
        raise
    except Exception as exc:
        record.extra["search_error"] = type(exc).__name__
        _stop(
            ctx,
            searches,
            f"the retriever could not be reached for a search at round {round} ({type(exc).__name__}): "
            "the debate went on with the pool it had",
        )
        await ctx.emit(
            "pool.search",
            {"round": round, "agent": agent, "query": query, "added": [], "error": type(exc).__name__},
        )
        return 0
    provenance = SearchProvenance(agent=agent, round=round, query=query)
    new: list[KnowledgeItem] = []
    for item in found.items:
        if len(new) >= take:
            break
        key = _key(item)
        if key in held or not item.text.strip():
            continue
        held.add(key)
        n = len(ctx.pool.items) + len(new) + 1
        new.append(item.model_copy(update={"n": n, "found_by": provenance}))
    ctx.pool = ctx.pool.model_copy(update={"items": [*ctx.pool.items, *new]})
    record.extra["added"] = [it.n for it in new]
    await ctx.emit(
        "pool.search",
        {
            "round": round,
            "agent": agent,
            "query": query,
            "added": [{"n": it.n, "source": it.source, "title": it.title, "url": it.url} for it in new],
            "pool_size": len(ctx.pool.items),
        },
    )
    return len(new)

"""Searches during a debate against the scripted OpenAI-compatible server and a retrieval that speaks
the ``PoolBuilder`` port: the items join the shared pool with their provenance and another agent
selects one; bounds and the budget refuse further searches; an outage leaves the first pool and a note."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engine.config import DebateConfig
from engine.context import SingleModel
from engine.pool_search import clean_query
from engine.result import Checkpoint, DebateResult
from engine.runner import run_debate
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient
from tests.engine.conftest import APOLLO
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.unit

QUESTION = "Who piloted the lunar module of Apollo 11 with Neil Armstrong?"
SELECT = "select knowledge from the knowledge pool"
JUDGE = "respond with [Yes]"
SUMMARY = "summarize the final answer"
ORDERLY = "There are a few other agents"
SEARCH = "write one search for it"
ALDRIN = "Buzz Aldrin was the lunar module pilot of Apollo 11 and the second person to walk on the Moon."


class Retrieval:
    """A ``PoolBuilder``: what the retriever returns for a search (the pool's own first item again, then
    new ones), and every search it was asked for."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.searches: list[tuple[str, int, int, str | None]] = []
        self.fail = fail

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        self.searches.append((question, k_wiki, k_web, search_text))
        if self.fail is not None:
            raise self.fail
        items = [
            KnowledgeItem(n=1, source="wikipedia", title="Apollo 11", text=APOLLO),
            KnowledgeItem(n=2, source="wikipedia", title="Buzz Aldrin", text=ALDRIN),
            KnowledgeItem(n=3, source="wikipedia", title="Michael Collins", text="Collins flew Columbia."),
            KnowledgeItem(n=4, source="wikipedia", title="Lunar module", text="The LM Eagle landed."),
        ]
        return KnowledgePool(pool_id="found", question=question, items=items[:k_wiki])


def script(server: ScriptedLLM, *, searches: list[str], selects: list[str], verdicts: list[str]) -> None:
    server.on(SEARCH, searches)
    server.on(SELECT, selects)
    server.on(JUDGE, verdicts)
    server.on(SUMMARY, "The final answer is [Buzz Aldrin].")
    server.on(ORDERLY, "Given the knowledge, the answer is [Buzz Aldrin].")
    server.on("Question:", "Based on the knowledge, the answer is [Michael Collins].")


async def debate(
    server: ScriptedLLM, pool: KnowledgePool, searcher: Any, **cfg: Any
) -> tuple[DebateResult, list[tuple[str, dict[str, Any]]]]:
    config = DebateConfig(sequential=True, **cfg)
    events: list[tuple[str, dict[str, Any]]] = []
    async with OpenAIChatClient(server.base_url, "scripted") as client:
        result = await run_debate(
            QUESTION,
            pool,
            config,
            SingleModel(client),
            lambda e, d: events.append((e, d)),
            searcher=searcher,
        )
    return result, events


def first_pool() -> KnowledgePool:
    return KnowledgePool(
        pool_id="p1",
        question=QUESTION,
        items=[KnowledgeItem(n=1, source="wikipedia", title="Apollo 11", text=APOLLO)],
    )


async def test_a_search_grows_the_shared_pool_and_the_other_agent_selects_the_new_item(
    scripted: ScriptedLLM,
) -> None:
    script(
        scripted,
        searches=['{"search": "Apollo 11 lunar module pilot"}', '{"search": ""}'],
        # round 1: both select the first item; round 2: agent 0 the first, agent 1 the new one
        selects=["helpful: [1]", "helpful: [1]", "helpful: [1]", "helpful: [2]"],
        verdicts=["They differ. [No]", "They agree. [Yes]"],
    )
    retrieval = Retrieval()
    shared = first_pool()
    result, events = await debate(
        scripted, shared, retrieval, k_wiki=1, k_web=0, debate_search={"per_agent": 1, "items_per_search": 2}
    )

    # One search was run (agent 1 asked for none), with the agent's words after the question, asking
    # for what the pool holds and the new items on top.
    assert retrieval.searches == [(QUESTION, 3, 0, "Apollo 11 lunar module pilot")]
    # The duplicate of the first item was dropped; two new items joined, numbered after it.
    assert [(it.n, it.title) for it in result.pool.items] == [
        (1, "Apollo 11"),
        (2, "Buzz Aldrin"),
        (3, "Michael Collins"),
    ]
    added = [it for it in result.pool.items if it.found_by is not None]
    assert {(it.found_by.agent, it.found_by.round, it.found_by.query) for it in added} == {  # type: ignore[union-attr]
        (0, 1, "Apollo 11 lunar module pilot")
    }
    assert [it.n for it in result.pool.first_items] == [1]
    assert shared.items == first_pool().items and shared.warnings == []  # the caller's pool is untouched

    # The other agent selected the new item and was shown it in round 2.
    round2 = {(r.role, r.agent): r for r in result.transcript if r.round == 2}
    assert round2[("select", 1)].selected == [2]
    assert round2[("debater", 1)].knowledge == [2]
    assert any("Buzz Aldrin" in request_text(b) and SELECT in request_text(b) for b in scripted.requests)
    queries = [r for r in result.transcript if r.role == "query"]
    assert [(q.round, q.agent, q.extra["query"], q.extra["added"]) for q in queries] == [
        (1, 0, "Apollo 11 lunar module pilot", [2, 3]),
        (1, 1, None, []),
    ]
    assert result.usage_by_role["query"].calls == 2  # charged like every call
    (grown,) = [d for e, d in events if e == "pool.search"]
    assert grown["agent"] == 0 and [a["title"] for a in grown["added"]] == ["Buzz Aldrin", "Michael Collins"]
    assert grown["pool_size"] == 3


async def test_bounds_and_the_budget_refuse_the_next_search(scripted: ScriptedLLM) -> None:
    # per_agent 1: the second round's end brings no second search; the pool stops at max_pool_items.
    script(
        scripted,
        searches=['{"search": "lunar module pilot"}', '{"search": "Eagle crew"}'],
        selects=["helpful: [1]"],
        verdicts=["[No]", "[No]", "[No]"],
    )
    retrieval = Retrieval()
    result, _ = await debate(
        scripted,
        first_pool(),
        retrieval,
        k_wiki=1,
        k_web=0,
        rounds=3,
        debate_search={"per_agent": 1, "items_per_search": 3, "max_pool_items": 2},
    )
    # Both wrote their search at once; agent 0's filled the pool, so agent 1's was not run, and
    # neither searched again after round 2 (one search each).
    queries = [r for r in result.transcript if r.role == "query"]
    assert [(q.round, q.agent) for q in queries] == [(1, 0), (1, 1)]
    assert "its limit" in queries[1].extra["skipped"]
    assert len(retrieval.searches) == 1
    assert [it.title for it in result.pool.items] == ["Apollo 11", "Buzz Aldrin"]

    # A budget that the search's call does not fit refuses it; the debate answers within its budget.
    scripted.reset()
    script(scripted, searches=['{"search": "x"}'], selects=["helpful: [1]"], verdicts=["[No]"])
    retrieval = Retrieval()
    # select, debater, select, debater, judge = 5 calls: round 1 fits, the search does not.
    result, _ = await debate(
        scripted, first_pool(), retrieval, k_wiki=1, k_web=0, budget_calls=5, debate_search={"per_agent": 2}
    )
    assert retrieval.searches == []
    assert not [r for r in result.transcript if r.role == "query"]
    assert any("searches during the debate stopped at round 1" in w for w in result.pool.warnings)
    assert "budget exhausted" in result.answer_source


async def test_a_retriever_outage_mid_debate_ends_with_the_first_pool_and_a_note(
    scripted: ScriptedLLM,
) -> None:
    script(
        scripted,
        searches=['{"search": "lunar module pilot"}', '{"search": "Eagle"}'],
        selects=["helpful: [1]"],
        verdicts=["[No]", "[Yes]"],
    )
    retrieval = Retrieval(fail=httpx.ConnectError("connection refused"))
    result, events = await debate(
        scripted, first_pool(), retrieval, k_wiki=1, k_web=0, debate_search={"per_agent": 2}
    )
    assert result.rounds == 2 and result.answer  # the debate went on
    assert [it.title for it in result.pool.items] == ["Apollo 11"]
    assert len(retrieval.searches) == 1  # the first failure ends the searching
    (note,) = [w for w in result.pool.warnings if "retriever" in w]
    assert "ConnectError" in note and "went on with the pool it had" in note
    failed = [r for r in result.transcript if r.role == "query" and r.extra.get("search_error")]
    assert [r.agent for r in failed] == [0]
    assert [d.get("error") for e, d in events if e == "pool.search"] == ["ConnectError"]


async def test_no_retriever_and_searches_off_leave_the_pool_as_it_was(scripted: ScriptedLLM) -> None:
    script(scripted, searches=['{"search": "x"}'], selects=["helpful: [1]"], verdicts=["[No]", "[Yes]"])
    result, _ = await debate(scripted, first_pool(), None, k_wiki=1, k_web=0, debate_search={"per_agent": 1})
    assert [it.title for it in result.pool.items] == ["Apollo 11"]
    assert any("no retriever serves this pool" in w for w in result.pool.warnings)
    assert not [r for r in result.transcript if r.role == "query"]

    scripted.reset()
    script(scripted, searches=['{"search": "x"}'], selects=["helpful: [1]"], verdicts=["[No]", "[Yes]"])
    retrieval = Retrieval()
    result, _ = await debate(scripted, first_pool(), retrieval, k_wiki=1, k_web=0)
    assert retrieval.searches == [] and result.pool.warnings == []


async def test_before_the_first_round_an_agent_with_nothing_usable_searches_then_selects_again(
    scripted: ScriptedLLM,
) -> None:
    script(
        scripted,
        searches=['{"search": "lunar module pilot"}'],
        # agent 0 finds nothing, searches, then selects the new item; agent 1 selects the first item
        selects=["No useful knowledge found.", "helpful: [2]", "helpful: [1]"],
        verdicts=["[Yes]"],
    )
    retrieval = Retrieval()
    result, _ = await debate(
        scripted,
        first_pool(),
        retrieval,
        k_wiki=1,
        k_web=0,
        debate_search={"per_agent": 1, "items_per_search": 1, "before_first_round": True},
    )
    (query,) = [r for r in result.transcript if r.role == "query"]
    assert (query.round, query.agent) == (0, 0)
    debater0 = next(r for r in result.transcript if r.role == "debater" and r.agent == 0)
    assert debater0.knowledge == [2]
    assert result.pool.items[1].found_by is not None and result.pool.items[1].found_by.round == 0


async def test_a_resumed_debate_keeps_the_items_its_searches_added(scripted: ScriptedLLM) -> None:
    script(
        scripted,
        searches=['{"search": "lunar module pilot"}', '{"search": ""}'],
        selects=["helpful: [1]"],
        verdicts=["[No]", "[No]", "[Yes]"],
    )
    saved: list[Checkpoint] = []

    async def keep(cp: Checkpoint) -> None:
        saved.append(cp)

    config = DebateConfig(sequential=True, k_wiki=1, k_web=0, rounds=3, debate_search={"per_agent": 1})
    async with OpenAIChatClient(scripted.base_url, "scripted") as client:
        await run_debate(
            QUESTION, first_pool(), config, SingleModel(client), on_checkpoint=keep, searcher=Retrieval()
        )
        first = saved[0]
        assert [it.title for it in first.pool_added] == ["Buzz Aldrin", "Michael Collins", "Lunar module"]
        retrieval = Retrieval()
        resumed = await run_debate(
            QUESTION, first_pool(), config, SingleModel(client), resume=first, searcher=retrieval
        )
    assert [it.n for it in resumed.pool.items] == [1, 2, 3, 4]
    assert retrieval.searches == []  # agent 0 used its one search before the interruption
    assert sum(1 for r in resumed.transcript if r.role == "query") == 2


@pytest.mark.parametrize(
    ("reply", "query"),
    [
        ('{"search": "Apollo 11 crew"}', "Apollo 11 crew"),
        ('{"search": ""}', None),
        ('{"search": "NONE"}', None),
        ("none.", None),
        ("Apollo lunar module pilot", "Apollo lunar module pilot"),
        ('{"search": ' + '"' + "word " * 200 + '"}', ("word " * 60).strip()),
        ('{"search": 3}', None),
    ],
)
def test_a_written_search_is_cleaned_and_bounded(reply: str, query: str | None) -> None:
    assert clean_query(reply) == query

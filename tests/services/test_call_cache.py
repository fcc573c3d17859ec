"""The call cache: a replayed run makes no model call and gives the same replies in the same order;
sample indices keep n identical requests n replies; any changed parameter misses; replay-only fails
on a miss naming the call; the store keeps to its size; the engine charges a replayed call nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import DebateConfig
from engine.context import SingleModel, Spend
from engine.runner import run_debate
from services.call_cache import CachedRoleModels, CallCacheMiss, SqliteCallStore
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit

ASK: list[ChatMessage] = [{"role": "user", "content": "Say a colour."}]


async def test_replies_replay_in_order_and_samples_stay_distinct(tmp_path: Path) -> None:
    store = SqliteCallStore(tmp_path / "calls.sqlite")
    with ScriptedLLM() as llm:
        llm.on("Say a colour.", ["red", "blue", "green"])
        async with OpenAIChatClient(llm.base_url, "scripted") as client:
            first = CachedRoleModels(SingleModel(client), store).for_role("debater")
            replies = [(await first.complete(ASK, temperature=0.9)).text for _ in range(2)]
            assert replies == ["red", "blue"] and len(llm.requests) == 2
            again = CachedRoleModels(SingleModel(client), store)
            model = again.for_role("debater")
            replayed = [await model.complete(ASK, temperature=0.9) for _ in range(2)]
            assert [r.text for r in replayed] == replies and all(r.from_cache for r in replayed)
            assert len(llm.requests) == 2 and again.stats.hits == 2
            # A third sample was never asked for: it calls the model; a changed parameter misses too.
            assert (await model.complete(ASK, temperature=0.9)).text == "green"
            assert not (await model.complete(ASK, temperature=0.2)).from_cache
            assert not (await model.complete(ASK, temperature=0.9, max_tokens=5)).from_cache
            assert len(llm.requests) == 5

            only = CachedRoleModels(SingleModel(client), store, only=True).for_role("debater")
            await only.complete(ASK, temperature=0.9)  # held: replays
            with pytest.raises(CallCacheMiss, match=r"scripted, sample 0, key [0-9a-f]{16}"):
                new: list[ChatMessage] = [{"role": "user", "content": "Something new."}]
                await only.complete(new, temperature=0.9)
    assert len(llm.requests) == 5
    store.close()


async def test_two_agents_keep_their_own_samples_whichever_asks_first(tmp_path: Path) -> None:
    store = SqliteCallStore(tmp_path / "calls.sqlite")
    with ScriptedLLM() as llm:
        llm.on("Say a colour.", ["red", "blue"])
        async with OpenAIChatClient(llm.base_url, "scripted") as client:
            first = CachedRoleModels(SingleModel(client), store)
            zero = await first.for_role("debater", 0).complete(ASK, temperature=0.9)
            one = await first.for_role("debater", 1).complete(ASK, temperature=0.9)
            assert (zero.text, one.text) == ("red", "blue")
            # The replay asks in the other order (agent 1's call happens to be sent first): each agent
            # still gets its own reply back.
            again = CachedRoleModels(SingleModel(client), store, only=True)
            one_again = await again.for_role("debater", 1).complete(ASK, temperature=0.9)
            zero_again = await again.for_role("debater", 0).complete(ASK, temperature=0.9)
            assert (zero_again.text, one_again.text) == ("red", "blue")
    assert len(llm.requests) == 2
    store.close()


async def test_a_new_run_numbers_samples_from_zero(tmp_path: Path) -> None:
    store = SqliteCallStore(tmp_path / "calls.sqlite")
    with ScriptedLLM() as llm:
        llm.on("Say a colour.", ["red", "blue"])
        async with OpenAIChatClient(llm.base_url, "scripted") as client:
            models = CachedRoleModels(SingleModel(client), store)
            first = await models.for_role("debater", 0).complete(ASK, temperature=0.9)
            models.restart_samples()
            again = await models.for_role("debater", 0).complete(ASK, temperature=0.9)
            assert (first.text, again.text, again.from_cache) == ("red", "red", True)
    assert len(llm.requests) == 1
    store.close()


async def test_the_store_keeps_to_its_size(tmp_path: Path) -> None:
    store = SqliteCallStore(tmp_path / "calls.sqlite", max_bytes=600)
    for i in range(10):
        await store.put(f"k{i}", {"text": "x" * 100, "i": i})
    assert store.size_bytes <= 600
    assert await store.get("k0") is None and await store.get("k9") == {"text": "x" * 100, "i": 9}
    store.close()


async def test_pools_replay_from_the_cache_per_search(tmp_path: Path) -> None:
    from services.call_cache import CachedPoolBuilder
    from tests.evaluation.conftest import FixedPools

    store = SqliteCallStore(tmp_path / "calls.sqlite")
    inner = FixedPools()
    cached = CachedPoolBuilder(inner, store, "index-a")
    first = await cached.build_pool("who wrote hamlet", 5, 0)
    again = await CachedPoolBuilder(FixedPools(), store, "index-a").build_pool("who wrote hamlet", 5, 0)
    assert again == first and len(inner.calls) == 1
    # another search text, other sizes or another index: each a pool of its own
    await cached.build_pool("who wrote hamlet", 5, 0, search_text="Shakespeare plays")
    await cached.build_pool("who wrote hamlet", 3, 0)
    await CachedPoolBuilder(inner, store, "index-b").build_pool("who wrote hamlet", 5, 0)
    assert len(inner.calls) == 4 and cached.stats.hits == 0 and cached.stats.misses == 3
    store.close()


async def test_a_replayed_debate_calls_nothing_and_is_charged_nothing(tmp_path: Path) -> None:
    pool = KnowledgePool(
        pool_id="p", question="q", items=[KnowledgeItem(n=1, source="wikipedia", title="T", text="Paris.")]
    )
    store = SqliteCallStore(tmp_path / "calls.sqlite")
    charged: list[Spend] = []

    async def on_usage(spend: Spend) -> None:
        charged.append(spend)

    with ScriptedLLM() as llm:
        llm.on("select knowledge from the knowledge pool", "helpful: [1]")
        llm.on("respond with [Yes]", "[Yes]")
        llm.on("summarize the final answer", "The final answer is [Paris].")
        llm.on("Question:", "The answer is [Paris].")
        async with OpenAIChatClient(llm.base_url, "scripted") as client:
            config = DebateConfig(judge="llm", budget_calls=6)
            first = await run_debate(
                "Capital of France?", pool, config, CachedRoleModels(SingleModel(client), store)
            )
            sent = len(llm.requests)
            charged.clear()
            models = CachedRoleModels(SingleModel(client), store)
            again = await run_debate("Capital of France?", pool, config, models, on_usage=on_usage)
    assert len(llm.requests) == sent  # no call
    assert [r.text for r in again.transcript] == [r.text for r in first.transcript]
    assert again.answer == first.answer and all(r.from_cache for r in again.transcript)
    assert again.usage.from_cache_calls == again.usage.calls == first.usage.calls
    assert sum(s.calls for s in charged) == 0 and sum(s.tokens for s in charged) == 0
    store.close()

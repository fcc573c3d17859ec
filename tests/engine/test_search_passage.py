"""The search passage (``search_query="passage"``): written by the debate's own model through the
scripted server, charged and budgeted like every other call, recorded at the head of the transcript,
deterministic, and never fatal: an LLM error or a spent budget leave the question alone searched."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from engine.config import DebateConfig
from engine.context import SingleModel
from engine.prompts.search import SEARCH_PASSAGE
from engine.runner import run_debate
from engine.search_passage import (
    SEARCH_MAX_TOKENS,
    SEARCH_TEXT_MAX_CHARS,
    SearchPassage,
    clean_passage,
    prepare_knowledge,
    search_key,
    write_search_passage,
)
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient
from tests.engine.usage_sink import Sink
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.unit

QUESTION = "Who painted the Mona Lisa?"
PASSAGE = "The Mona Lisa is a portrait painted by the Italian artist Leonardo da Vinci."
ASKS_PASSAGE = "Write two or three sentences from a Wikipedia article"
POOL = KnowledgePool(
    pool_id="p",
    question=QUESTION,
    items=[KnowledgeItem(n=1, source="wikipedia", title="Mona Lisa", text="Painted by Leonardo da Vinci.")],
)


def script(llm: ScriptedLLM, passage: str = PASSAGE) -> None:
    llm.on(ASKS_PASSAGE, passage)
    llm.on("select knowledge from the knowledge pool", "[1]")
    llm.on("respond with [Yes]", "[Yes]")
    llm.on("summarize the final answer", "The final answer is [Leonardo da Vinci].")
    llm.on("", "The answer is [Leonardo da Vinci].")


def served(body: dict[str, Any], reply: str) -> int:
    """What the scripted server charges for one request (its own word count)."""
    return sum(len(str(m.get("content", "")).split()) for m in body["messages"]) + len(reply.split())


def config(**kw: Any) -> DebateConfig:
    return DebateConfig(
        **{"prompt_style": "paper", "judge": "llm", "search_query": "passage", "sequential": True, **kw}
    )


async def write(llm: ScriptedLLM, cfg: DebateConfig, **kw: Any) -> SearchPassage:
    client = OpenAIChatClient(llm.base_url, "scripted", structured_mode="off")
    try:
        return await write_search_passage(QUESTION, cfg, SingleModel(client), **kw)
    finally:
        await client.aclose()


async def debate(llm: ScriptedLLM, cfg: DebateConfig, sink: Sink | None = None) -> Any:
    """What a caller does: the passage, then (the pool, here fixed) the debate that starts with it."""
    client = OpenAIChatClient(llm.base_url, "scripted", structured_mode="off")
    try:
        models = SingleModel(client)
        passage = await write_search_passage(QUESTION, cfg, models, on_usage=sink)
        result = await run_debate(QUESTION, POOL, cfg, models, on_usage=sink, search=passage.record)
        return passage, result
    finally:
        await client.aclose()


async def test_the_passage_is_written_at_temperature_0_with_the_seed_and_recorded(
    scripted: ScriptedLLM,
) -> None:
    script(scripted, f"Passage:  {PASSAGE}\n")
    sink = Sink()
    passage = await write(scripted, config(seed=7), on_usage=sink)
    assert passage.text == PASSAGE and passage.warning is None
    [body] = scripted.requests
    assert body["temperature"] == 0 and body["seed"] == 7 and body["max_tokens"] == SEARCH_MAX_TOKENS
    assert body["messages"] == [{"role": "user", "content": SEARCH_PASSAGE.format(question=QUESTION)}]
    assert "response_format" not in body  # plain text: the reply is searched, not parsed
    rec = passage.record
    assert rec is not None and rec.role == "search" and rec.round == 0 and rec.agent is None
    assert rec.extra["search_text"] == PASSAGE and rec.parse_error is None
    # Charged exactly what the server reported: held first, then settled.
    assert rec.prompt_tokens + rec.completion_tokens == served(body, f"Passage:  {PASSAGE}\n") == sink.tokens
    assert sink.calls == 1 and sink.spends[0].calls == 1 and sink.spends[0].tokens > sink.tokens


async def test_the_same_question_and_config_write_the_same_request(scripted: ScriptedLLM) -> None:
    script(scripted)
    await write(scripted, config())
    await write(scripted, config())
    first, second = scripted.requests
    assert first == second and first["seed"] == 0  # no seed in the config: 0, never the server's own
    assert search_key(config()) == search_key(config(prompt_style="robust", judge="both"))  # one prompt
    assert search_key(config(seed=1)) != search_key(config())
    assert search_key(DebateConfig()) == "question"


async def test_the_debate_starts_with_the_search_record_and_counts_it(scripted: ScriptedLLM) -> None:
    script(scripted)
    sink = Sink()
    passage, result = await debate(scripted, config(rounds=1), sink)
    assert result.transcript[0] == passage.record
    assert [r.role for r in result.transcript].count("search") == 1
    search = result.usage_by_role["search"]
    assert search.calls == 1
    assert search.prompt_tokens + search.completion_tokens == served(scripted.requests[0], PASSAGE)
    assert result.usage.calls == len(scripted.requests) == sink.calls
    total = result.usage.prompt_tokens + result.usage.completion_tokens
    assert total == sink.tokens == sum(served(b, _reply(b)) for b in scripted.requests)
    assert result.answer == "Leonardo da Vinci"
    assert result.config["search_query"] == "passage"


def _reply(body: dict[str, Any]) -> str:
    text = request_text(body)
    if ASKS_PASSAGE in text:
        return PASSAGE
    if "select knowledge from the knowledge pool" in text:
        return "[1]"
    if "respond with [Yes]" in text:
        return "[Yes]"
    if "summarize the final answer" in text:
        return "The final answer is [Leonardo da Vinci]."
    return "The answer is [Leonardo da Vinci]."


async def test_the_passage_counts_against_the_call_budget(scripted: ScriptedLLM) -> None:
    script(scripted)
    # Two agents: select + debater each is 4 calls; the passage is the first of the budget's four.
    _, result = await debate(scripted, config(budget_calls=4))
    assert len(scripted.requests) == 4 == result.usage.calls
    assert "budget exhausted (call budget of 4 reached)" in result.answer_source


async def test_a_budget_too_small_for_the_passage_sends_nothing(scripted: ScriptedLLM) -> None:
    script(scripted)
    passage = await write(scripted, config(budget_tokens=20))
    assert scripted.requests == []
    assert passage.text is None and passage.record is None
    assert passage.warning is not None and "searched with the question alone" in passage.warning


async def test_an_llm_error_falls_back_to_the_question_and_refunds(scripted: ScriptedLLM) -> None:
    script(scripted)
    scripted.fail_next(400)  # a 4xx other than 408/409/429 fails at once
    sink = Sink()
    passage = await write(scripted, config(), on_usage=sink)
    assert passage.text is None and passage.record is None
    assert passage.warning is not None and "search passage failed (" in passage.warning
    assert "scripted failure" not in passage.warning  # the server's reply never reaches the pool
    assert sink.tokens == 0 and sink.calls == 0  # held, then given back: nothing was served


async def test_an_empty_reply_is_recorded_and_the_question_alone_searched(scripted: ScriptedLLM) -> None:
    script(scripted, "   ")
    passage = await write(scripted, config())
    assert passage.text is None and passage.record is not None
    assert passage.record.parse_error is not None and passage.warning is not None


async def test_no_passage_is_written_for_the_question_mode(scripted: ScriptedLLM) -> None:
    script(scripted)
    passage = await write(scripted, DebateConfig())
    assert passage == SearchPassage() and scripted.requests == []


class PoolRecorder:
    """A pool builder for ``prepare_knowledge``: records what it was asked to search with."""

    def __init__(self) -> None:
        self.searched: list[str | None] = []

    async def __call__(self, search_text: str | None) -> KnowledgePool:
        self.searched.append(search_text)
        return POOL.model_copy(deep=True)


async def test_the_knowledge_step_searches_with_the_written_passage(scripted: ScriptedLLM) -> None:
    """The one step the worker, `parley ask` and `parley eval` share: passage, pool, warning."""
    script(scripted)
    build = PoolRecorder()
    client = OpenAIChatClient(scripted.base_url, "scripted", structured_mode="off")
    try:
        pool, record = await prepare_knowledge(QUESTION, config(), SingleModel(client), build)
    finally:
        await client.aclose()
    assert build.searched == [PASSAGE] and record is not None and record.role == "search"
    assert pool.warnings == [] and len(scripted.requests) == 1


async def test_the_knowledge_step_reuses_a_written_passage_and_keeps_its_warning(
    scripted: ScriptedLLM,
) -> None:
    build = PoolRecorder()
    failed = SearchPassage(warning="the search passage failed (LLMUnavailable): the question alone")
    pool, record = await prepare_knowledge(QUESTION, config(), None, build, written=failed)
    assert build.searched == [None] and record is None and pool.warnings == [failed.warning]
    assert scripted.requests == []  # a passage an earlier attempt wrote is never written again
    # No config, or one that searches for the question: the question alone, no call, no models needed.
    for cfg in (None, DebateConfig()):
        pool, record = await prepare_knowledge(QUESTION, cfg, None, build)
        assert record is None and pool.warnings == []
    assert build.searched == [None, None, None]
    with pytest.raises(ValueError, match="needs the models"):
        await prepare_knowledge(QUESTION, config(), None, build)


def test_the_reply_is_searched_as_one_bounded_line() -> None:
    assert clean_passage("Passage: one\n two  three") == "one two three"
    long = clean_passage("word " * 1000)
    assert len(long) <= SEARCH_TEXT_MAX_CHARS and long.endswith("word")


@pytest.mark.parametrize("protocol", ["single", "cot", "self_consistency", "kks"])
def test_a_protocol_without_a_pool_refuses_the_passage(protocol: str) -> None:
    with pytest.raises(
        ValidationError, match=f"search_query: protocol '{protocol}' does not use search_query"
    ):
        DebateConfig(
            protocol=protocol, search_query="passage", **({"agents": 3} if protocol == "kks" else {})
        )


@pytest.mark.parametrize("settings", [{"knowledge": "web"}, {"knowledge": "none"}, {"k_wiki": 0}])
async def test_no_passage_without_wikipedia_items_to_search(
    scripted: ScriptedLLM, settings: dict[str, Any]
) -> None:
    """As ``k_wiki`` means nothing with ``knowledge="web"``: accepted, and nothing is written."""
    cfg = config(**settings)
    assert not cfg.writes_search_passage and search_key(cfg) == "question"
    script(scripted)
    assert await write(scripted, cfg) == SearchPassage() and scripted.requests == []


def test_rag_and_the_debates_take_the_passage() -> None:
    for protocol in ("madke", "rag", "society", "mad", "mallm"):
        cfg = DebateConfig(protocol=protocol, search_query="passage")
        assert cfg.writes_search_passage

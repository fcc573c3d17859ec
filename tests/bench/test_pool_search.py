"""bench.pool_search replays the search step of recorded debates with the engine's own step: a debate
that went past round 1 searches and its pool grows; one that ended in round 1 keeps its pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pool_search import markdown, measure
from engine.config import DebateConfig
from engine.context import SingleModel
from engine.result import DebateResult, TranscriptRecord, Usage
from evaluation.scoring import Scores
from evaluation.store import ResultRecord, Workspace
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration


class Finds:
    """Finds the answer for any search; the first pool never held it."""

    def __init__(self) -> None:
        self.searches: list[str | None] = []

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        self.searches.append(search_text)
        items = [KnowledgeItem(n=1, source="wikipedia", title="Seine", text="The Seine flows through Paris.")]
        return KnowledgePool(pool_id="found", question=question, items=items)


def recorded(ws: Workspace, item_id: str, index: int, rounds: int) -> None:
    question = f"Which river flows through Paris? ({item_id})"
    pool = KnowledgePool(
        pool_id=item_id,
        question=question,
        items=[KnowledgeItem(n=1, source="wikipedia", title="France", text="France is in Europe.")],
    )
    transcript = [
        TranscriptRecord(round=1, role="debater", agent=i, answer=a) for i, a in enumerate(["Loire", "Rhine"])
    ]
    result = DebateResult(
        question=question,
        protocol="madke",
        answer="Loire",
        answer_source="summarizer",
        rounds=rounds,
        consensus=rounds == 1,
        pool=pool,
        transcript=transcript,
        usage=Usage(),
        usage_by_role={},
        config=DebateConfig(prompt_style="robust").model_dump(),
    )
    record = ResultRecord(
        id=item_id,
        index=index,
        run="madke",
        protocol="madke",
        prompt_style="robust",
        status="ok",
        question=question,
        gold=["Seine"],
        answer="Loire",
        rounds=rounds,
        scores=Scores(em=0, f1=0, contains=0, correct=0),
    )
    ws.write_result(record, result)


async def test_the_replay_grows_the_pool_of_debates_that_went_on(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "evidence")
    recorded(ws, "a", 0, rounds=2)
    recorded(ws, "b", 1, rounds=1)
    finds = Finds()
    with ScriptedLLM() as llm:
        llm.on("write one search for it", ['{"search": "river of Paris"}', '{"search": ""}'])
        async with OpenAIChatClient(llm.base_url, "scripted") as client:
            result = await measure(ws, "madke", SingleModel(client), finds, progress=False)
    assert finds.searches == ["river of Paris"]  # one debater searched, one asked for nothing
    assert result["questions"] == 2 and result["debates_past_round_1"] == 1
    assert (result["answer_in_first_pool"], result["answer_in_final_pool"]) == (0.0, 0.5)
    assert result["past_round_1"] == {"answer_in_first_pool": 0.0, "answer_in_final_pool": 1.0}
    assert result["items_added_per_question"] == 0.5 and result["added_items_holding_an_answer"] == 1
    assert result["searches_written_per_debate"] == 1.0
    result.update(
        command="x", evaluation="e", run="madke", model="m", machine="m", date="d", per_search=3, max_pool=20
    )
    assert "| 2 | 1 | 0.0 | 50.0 |" in "\n".join(markdown(result))

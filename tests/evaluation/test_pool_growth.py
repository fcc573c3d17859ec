"""An evaluation of the madke-search preset end to end with the scripted LLM server and a retrieval
whose first pool lacks the answer and whose search finds it: the report gives answer-in-pool of the
first and the final pool, what the searches added and who selected it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.export import export_folder
from evaluation.harness import EvalRequest, evaluate
from services.knowledge import KnowledgeItem, KnowledgePool
from tests.evaluation.conftest import models_for, write_jsonl
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration


class SearchingPools:
    """The first pool (the question alone) holds no answer; a search for the capital finds it."""

    def __init__(self) -> None:
        self.search_texts: list[str | None] = []

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        self.search_texts.append(search_text)
        items = [KnowledgeItem(n=1, source="wikipedia", title="France", text="France is in Europe.")]
        if search_text:
            items.append(
                KnowledgeItem(n=2, source="wikipedia", title="Paris", text="Paris is the capital of France.")
            )
        return KnowledgePool(pool_id=f"p{len(self.search_texts)}", question=question, items=items)


async def test_the_report_shows_the_first_and_the_final_pool(tmp_path: Path) -> None:
    dataset = write_jsonl(
        tmp_path / "nq.jsonl",
        [{"id": "q1", "question": "what is the capital of france", "answers": ["Paris"]}],
    )
    pools = SearchingPools()
    with ScriptedLLM() as llm:
        llm.on("write one search for it", ['{"search": "capital city of France"}', '{"search": ""}'])
        llm.on("select knowledge from the knowledge pool", ["[1]", "[1]", "[1]", "helpful: [2]"])
        llm.on("respond with [Yes]", ["They differ. [No]", "They agree. [Yes]"])
        llm.on("summarize the final answer", "The final answer is [Paris].")
        llm.on("Question:", "The answer is [Paris].")
        out = tmp_path / "report"
        await evaluate(
            EvalRequest(
                dataset=dataset,
                out=out,
                protocols=["madke"],
                preset="madke-search",
                progress=False,
                plots=False,
                bootstrap_samples=200,
            ),
            models=models_for(llm.base_url),
            pool_builder=pools,
        )
    assert pools.search_texts == [None, "capital city of France"]
    metrics = json.loads((out / "metrics.json").read_text())
    runs = {r["label"]: r for r in metrics["runs"]}
    growth = runs["madke-search"]["pool_growth"]
    assert growth["answer_in_first_pool"] == 0.0 and growth["answer_in_final_pool"] == 1.0
    assert growth["final_minus_first"]["diff"] == 1.0  # one question: every resample grows by 1
    assert (growth["final_minus_first"]["low"], growth["final_minus_first"]["high"]) == (1.0, 1.0)
    assert growth["items_added_per_q"] == 1.0 and growth["searches_per_q"] == 1.0
    assert growth["added_items_selected"] == 1.0 and growth["selections_of_added_by_other_agents"] == 1
    assert growth["added_by_source"] == {"wikipedia": 1}
    assert runs["madke"]["pool_growth"] is None  # the baseline searches nothing
    report = (out / "report.md").read_text()
    assert "## Searches during the debate" in report and "| madke-search | 1 |" in report
    assert "| 0.0 | 100.0 | +100.0 [+100.0, +100.0] |" in report

    # The Parquet export keeps what the search added, with who found it, apart from the first pool.
    pq = pytest.importorskip("pyarrow.parquet")
    export_folder(out, tmp_path / "export")
    rows = pq.read_table(tmp_path / "export" / "pools.parquet").to_pylist()
    first = [(r["title"], r["run"], r["found_query"]) for r in rows if r["run"] is None]
    added = [r for r in rows if r["run"] is not None]
    assert first == [("France", None, None)]
    assert [(r["title"], r["run"], r["found_query"], r["found_round"]) for r in added] == [
        ("Paris", "madke-search", "capital city of France", 1)
    ]
    assert added[0]["found_by_agent"] in (0, 1)

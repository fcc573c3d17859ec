"""bench.query_rewrite on a small index against the scripted LLM: the searches use what the model wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.llm import SEED
from bench.pool_quality import KS
from bench.query_rewrite import main
from tests.retriever.support import build_slice_index
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.integration


def test_a_written_passage_that_names_the_answer_puts_it_into_the_pool(tmp_path: Path) -> None:
    data_dir = tmp_path / "index"
    build_slice_index(data_dir)
    # The question alone says nothing the index can match; the "passage" the model writes does.
    rows = [{"question": "Which renaissance portrait hangs behind glass?", "answers": ["Leonardo da Vinci"]}]
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    with ScriptedLLM() as llm:
        llm.on("Passage:", "The Mona Lisa is a portrait painted by the Italian artist Leonardo da Vinci.")
        llm.on("Query:", "qwertyuiop zxcvbnm")
        main(["--questions", str(questions), "--out", str(out), "--data-dir", str(data_dir),
              "--llm-url", llm.base_url, "--model", "scripted"])  # fmt: skip
        bodies = list(llm.requests)
    assert len(bodies) == 2  # one keyword query and one passage per question
    assert all(b["temperature"] == 0 and b["seed"] == SEED for b in bodies)
    assert any("Which renaissance portrait" in request_text(b) for b in bodies)
    result = json.loads((out / "bench.json").read_text())
    cfgs = result["configs"]
    assert set(cfgs) == {"question", "keywords", "passage"}
    # The passage brings the answer to the top; the question alone and the nonsense keywords do not.
    assert cfgs["passage"]["answer_in_pool"]["1"] == 1.0
    assert cfgs["question"]["answer_in_pool"]["1"] == 0.0
    assert cfgs["keywords"]["answer_in_pool"]["1"] == 0.0
    assert cfgs["passage"]["vs_question"]["@5"]["diff"] >= 0
    aip = [cfgs["passage"]["answer_in_pool"][str(k)] for k in KS]
    assert aip == sorted(aip)
    assert cfgs["passage"]["cost"]["completion_tokens"] > 0
    assert (out / "answer_in_pool.png").stat().st_size > 10_000
    assert "| question + passage |" in (out / "bench.md").read_text()

"""bench.llm_rerank: the model's reply becomes the candidates' order; what it cannot parse changes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.harness.llm import SEED
from bench.llm_rerank import main, parse_order, rerank_prompt
from retriever.pools import _Candidate
from tests.retriever.support import build_slice_index
from tests.support.scripted_llm import ScriptedLLM, request_text


@pytest.mark.unit
def test_the_reply_orders_the_named_candidates_first_and_keeps_the_rest_in_order() -> None:
    assert parse_order("3, 1, 7", 5) == [2, 0, 1, 3, 4]  # 7 is not a candidate
    assert parse_order("Passage [2] then 2 again, then 4.", 4) == [1, 3, 0, 2]
    assert parse_order("0, 12", 5) is None  # no number names a candidate
    assert parse_order("I do not know.", 3) is None


@pytest.mark.unit
def test_the_prompt_numbers_the_passages_and_cuts_them_to_the_word_limit() -> None:
    long = " ".join(f"w{i}" for i in range(500))
    cands = [
        _Candidate("wikipedia", "Moon", long, "u", 1.0, None),
        _Candidate("wikipedia", "Sun", "hot", "v", 0.5, None),
    ]
    prompt = rerank_prompt("How far is the Moon? " * 40, cands, 20)
    assert "[1] Moon: w0 w1" in prompt and "w19 …" in prompt and "w20" not in prompt
    assert "[2] Sun: hot\n" in prompt
    question = prompt.split("Question: ", 1)[1].split("\n", 1)[0]
    assert len(question.split()) == 64 + 1  # cut to 64 words, marked


def _answer_first(answers: dict[str, str]) -> Any:
    """A scripted reranker that knows the answers: the passages holding it first, then the others."""

    def reply(body: dict[str, Any]) -> str:
        text = request_text(body)
        question = text.split("Question: ", 1)[1].split("\n", 1)[0]
        answer = answers.get(question)
        if answer is None:
            return "I cannot tell."
        blocks = re.findall(r"^\[(\d+)\] (.*)$", text, flags=re.M)
        holding = [n for n, passage in blocks if answer.lower() in passage.lower()]
        return ", ".join(holding + [n for n, _ in blocks if n not in holding])

    return reply


@pytest.mark.integration
def test_a_reranker_that_finds_the_answer_puts_it_first(tmp_path: Path) -> None:
    data_dir = tmp_path / "index"
    build_slice_index(data_dir)
    # On this slice the first stage ranks Isaac Newton above Albert Einstein for the first question.
    rows: list[dict[str, Any]] = [
        {"question": "Who developed the theory of relativity?", "answers": ["Einstein"]},
        {"question": "Who wrote Hamlet?", "answers": ["Shakespeare"]},
    ]
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    with ScriptedLLM() as llm:
        # The second question's reply names no passage: its first-stage order stands.
        llm.on("Passage numbers:", _answer_first({rows[0]["question"]: "Einstein"}))
        main(["--questions", str(questions), "--out", str(out), "--data-dir", str(data_dir),
              "--llm-url", llm.base_url, "--model", "scripted", "--candidates", "8",
              "--passage-words", "300"])  # fmt: skip
        bodies = list(llm.requests)
    assert len(bodies) == 2 and all(b["temperature"] == 0 and b["seed"] == SEED for b in bodies)
    assert all("[8] " in request_text(b) and "[9] " not in request_text(b) for b in bodies)
    result = json.loads((out / "bench.json").read_text())
    first, reranked = result["configs"]["first stage"], result["configs"]["llm"]
    assert result["ks"] == [1, 3, 5, 8]
    assert first["answer_in_pool"]["1"] == 0.5  # Newton first: no Einstein at @1
    assert reranked["answer_in_pool"]["1"] == 1.0  # the model moved Einstein up
    assert result["examples"][0]["order"][0] != 0
    assert reranked["answer_in_pool"]["8"] == first["answer_in_pool"]["8"] == 1.0  # the same passages
    assert reranked["vs_first_stage"]["@1"]["diff"] == 0.5
    assert set(reranked["vs_first_stage"]) == {"@1", "@3", "@5"}
    assert reranked["cost"]["unparseable"] == 0.5 and reranked["cost"]["completion_tokens"] > 0
    assert result["examples"][1]["order"] == list(range(len(result["examples"][1]["order"])))
    assert (out / "answer_in_pool.png").stat().st_size > 10_000
    assert "| llm − first stage |" in (out / "bench.md").read_text()


@pytest.mark.unit
@pytest.mark.parametrize("bad", [["--candidates", "1"], ["--candidates", "50"], ["--passage-words", "5"]])
def test_bounds_are_refused_before_anything_loads(tmp_path: Path, bad: list[str]) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text('{"question": "q", "answers": ["a"]}\n', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"--candidates|--passage-words"):
        main(["--questions", str(q), "--llm-url", "http://127.0.0.1:9/v1", *bad])

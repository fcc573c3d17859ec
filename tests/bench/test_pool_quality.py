"""bench.pool_quality on a small fixture: the metrics' arithmetic by hand, and a real run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.harness.retrieval import pool_has_answer
from bench.pool_quality import KS, load_search_texts, main, pooled_recall, with_search_texts
from retriever.search import PassageHit
from tests.retriever.support import build_slice_index


def _hit(pid: str, text: str, vec: list[float]) -> PassageHit:
    v = np.asarray(vec, dtype=np.float32)
    return PassageHit(pid, pid.upper(), text, None, 1.0, v / np.linalg.norm(v))


@pytest.mark.unit
def test_answer_in_pool_counts_the_pool_after_near_duplicates_are_removed() -> None:
    hits = [
        _hit("a", "Paris is the capital of France.", [1, 0, 0]),
        _hit("b", "A copy without the answer.", [1, 0.01, 0]),  # near-duplicate of a: dropped
        _hit("c", "Leonardo da Vinci painted the Mona Lisa.", [0, 1, 0]),
    ]
    assert pool_has_answer(hits, 1, ["Paris"], 0.95)
    assert not pool_has_answer(hits, 2, ["Leonardo da Vinci"], 0.95)
    assert pool_has_answer(hits, 3, ["leonardo da vinci"], 0.95)
    assert not pool_has_answer(hits, 3, ["Vinci painted the Louvre"], 0.95)


@pytest.mark.unit
def test_pooled_recall_uses_every_configurations_answer_bearing_passages() -> None:
    questions = [{"question": "q1", "answers": ["gold"]}, {"question": "q2", "answers": ["none here"]}]
    texts = {"p1": "the gold one", "p2": "gold again", "p3": "nothing", "p4": "also gold"}
    runs = {
        "x": {"ranked": [["p1", "p3", "p2"], ["p3"]], "texts": texts},
        "y": {"ranked": [["p4", "p1"], ["p3"]], "texts": texts},
    }
    recall, judged = pooled_recall(runs, questions)
    assert judged == 1  # q2 has no answer-bearing passage anywhere: left out
    # q1's answer-bearing passages over both top lists: p1, p2, p4.
    assert recall["x"][1] == pytest.approx(1 / 3)
    assert recall["x"][3] == pytest.approx(2 / 3)
    assert recall["y"][1] == pytest.approx(1 / 3)
    assert recall["y"][50] == pytest.approx(2 / 3)


def _passage_line(item_id: str, text: object, reply: object = None) -> str:
    search = {"role": "search", "text": text if reply is None else reply, "extra": {"search_text": text}}
    return json.dumps({"id": item_id, "pool": {"question": "q", "items": []}, "search": search})


@pytest.mark.unit
def test_written_passages_are_read_from_an_evaluation_folder_as_the_retriever_searches_them(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "eval"
    folder.mkdir()
    with pytest.raises(SystemExit, match="search_query=passage"):
        load_search_texts(folder)
    (folder / "pools.jsonl").write_text(_passage_line("q0", "ignored: the question's own pools"))
    lines = [
        _passage_line("q1", "  Paris is\n the capital.  "),
        _passage_line("q2", "   "),  # blank: searched as the question alone, so no passage
        _passage_line("q4", "", reply="Passage:"),  # the reply cleaned to nothing: the question alone
        json.dumps({"id": "q3", "pool": {}}),  # no search recorded
        "",
    ]
    (folder / "pools.passage-abc.jsonl").write_text("\n".join(lines))
    texts = load_search_texts(folder)
    assert texts == {"q1": "Paris is the capital."}
    assert load_search_texts(folder / "pools.passage-abc.jsonl") == texts
    questions = [{"id": "q1", "question": "a", "answers": []}, {"id": "q2", "question": "b", "answers": []}]
    assert with_search_texts(questions, texts) == [{**questions[0], "search_text": "Paris is the capital."}]
    (folder / "pools.passage-def.jsonl").write_text(_passage_line("q1", "other"))
    with pytest.raises(SystemExit, match="holds 2"):
        load_search_texts(folder)
    (folder / "pools.passage-def.jsonl").write_text("{not json")
    with pytest.raises(SystemExit, match=r"pools\.passage-def\.jsonl:1"):
        load_search_texts(folder / "pools.passage-def.jsonl")


@pytest.mark.integration
def test_the_benchmark_runs_on_a_small_index_and_writes_table_and_plot(tmp_path: Path) -> None:
    data_dir = tmp_path / "index"
    build_slice_index(data_dir)
    questions = tmp_path / "q.jsonl"
    rows = [
        {"question": "Who painted the Mona Lisa?", "answers": ["Leonardo da Vinci", "Leonardo"]},
        {"question": "What is the capital of France?", "answers": ["Paris"]},
        {"question": "Who was the first person to walk on the Moon?", "answers": ["Neil Armstrong"]},
    ]
    questions.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    main(
        [
            "--questions", str(questions), "--out", str(out), "--data-dir", str(data_dir),
            "--configs", "hybrid,dense,bm25,hybrid+second", "--latency-questions", "3",
        ]
    )  # fmt: skip
    result = json.loads((out / "bench.json").read_text())
    assert result["skipped"] == ["hybrid+second"]  # no second stage configured: said, not faked
    assert set(result["configs"]) == {"hybrid", "dense", "bm25"}
    for cfg in result["configs"].values():
        in_pool = [cfg["answer_in_pool"][str(k)] for k in KS]
        assert all(0.0 <= x <= 1.0 for x in in_pool)
        assert in_pool == sorted(in_pool), "a larger pool never holds fewer answers"
        assert "total_ms" in cfg["latency_ms"]
    assert result["configs"]["hybrid"]["answer_in_pool"]["5"] > 0.5  # these questions' articles are indexed
    assert result["pool_latency_ms"]["questions"] == 3
    assert (out / "answer_in_pool.png").stat().st_size > 10_000
    assert "| hybrid |" in (out / "bench.md").read_text()

    # With written passages: the +passage configuration searches for question + passage, on the
    # questions that have one. A question that names nothing finds its article through the passage.
    vague = [
        {"id": "v1", "question": "Who made it?", "answers": ["Leonardo da Vinci"]},
        {"id": "v2", "question": "Where is it?", "answers": ["Paris"]},
        {"id": "v3", "question": "What is the capital of France?", "answers": ["Paris"]},  # no passage
    ]
    questions.write_text("\n".join(json.dumps(r) for r in vague), encoding="utf-8")
    passages = tmp_path / "pools.passage-x.jsonl"
    passages.write_text(
        "\n".join(
            [
                _passage_line("v1", "The Mona Lisa is a portrait painted in Florence in the 16th century."),
                _passage_line(
                    "v2", "The Eiffel Tower and the Louvre stand on the banks of the Seine in France."
                ),
            ]
        )
    )
    out2 = tmp_path / "out2"
    main(
        [
            "--questions", str(questions), "--out", str(out2), "--data-dir", str(data_dir),
            "--configs", "hybrid,hybrid+passage,hybrid+second+passage", "--latency-questions", "2",
            "--search-texts", str(passages),
        ]
    )  # fmt: skip
    result = json.loads((out2 / "bench.json").read_text())
    assert result["questions"] == 2  # v3 has no written passage
    assert result["skipped"] == ["hybrid+second+passage"]
    with_passage = result["configs"]["hybrid+passage"]["answer_in_pool"]
    assert with_passage["3"] == 1.0  # both articles in the top 3 once the passage names them
    assert result["configs"]["hybrid"]["answer_in_pool"]["3"] < 1.0
    assert str(passages) in (out2 / "bench.md").read_text()

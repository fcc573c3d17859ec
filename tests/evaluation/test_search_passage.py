"""``parley eval`` with ``search_query=passage``: each item's passage is written once and its pool
searched with it, shared by every run with the same search key; each run that debates on such a pool
carries the passage's call in its transcript, so its calls and tokens count it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evaluation.harness import EvalRequest, evaluate
from evaluation.store import Workspace
from parley_cli import build_app
from tests.evaluation.conftest import QUESTIONS, FixedPools, models_for
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.integration

ASKS_PASSAGE = "Write two or three sentences from a Wikipedia article"


def passages_asked(llm: ScriptedLLM) -> int:
    return sum(ASKS_PASSAGE in request_text(b) for b in llm.requests)


def request(dataset: Path, out: Path, **kw: object) -> EvalRequest:
    defaults: dict[str, object] = {"progress": False, "bootstrap_samples": 200, "plots": False}
    defaults.update(kw)
    return EvalRequest(dataset=dataset, out=out, **defaults)  # type: ignore[arg-type]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


async def test_one_passage_per_item_shared_and_counted_by_each_run(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "passage"
    pools = FixedPools()
    req = request(
        nq_dataset,
        out,
        protocols=["madke", "rag", "single"],
        base_config={"search_query": "passage", "seed": 5},
    )
    await evaluate(req, models=models_for(scripted.base_url), pool_builder=pools)
    # One passage and one pool per question, shared by madke and rag; single uses no pool.
    assert passages_asked(scripted) == len(QUESTIONS) == len(pools.calls)
    assert all(text for text in pools.search_texts)
    asked = [b for b in scripted.requests if ASKS_PASSAGE in request_text(b)]
    assert {(b["temperature"], b["seed"], b["max_tokens"]) for b in asked} == {(0, 5, 96)}
    metrics = json.loads((out / "metrics.json").read_text())
    runs = {r["label"]: r for r in metrics["runs"]}
    # madke: the passage + 6 debate calls; rag: the passage + 1; single: 1 (no pool, no passage).
    assert runs["madke"]["calls_per_q"] == 7.0 and runs["rag"]["calls_per_q"] == 2.0
    assert runs["single"]["calls_per_q"] == 1.0
    assert metrics["configs"]["single"]["search_query"] == "question"
    for label in ("madke", "rag"):
        rows = {r["id"]: r for r in lines(out / "results" / f"{label}.jsonl")}
        for line in lines(out / "transcripts" / f"{label}.jsonl"):
            result, row = line["result"], rows[line["id"]]
            first = result["transcript"][0]
            assert first["role"] == "search" and first["extra"]["search_text"]
            assert result["usage_by_role"]["search"]["calls"] == 1
            # The results line's tokens are the result's: the passage included.
            assert row["prompt_tokens"] == result["usage"]["prompt_tokens"] > first["prompt_tokens"]
            assert row["calls"] == result["usage"]["calls"]
    # The passages are kept with their pools (a file per search key) and reused on a rerun.
    ws = Workspace(out)
    kept = [p for p in out.glob("pools.passage-*.jsonl")]
    assert len(kept) == 1 and not (out / "pools.jsonl").exists()
    key = kept[0].name.removeprefix("pools.").removesuffix(".jsonl")
    stored = ws.load_pools_with_search(key)
    assert len(stored) == len(QUESTIONS) and all(rec is not None for _, rec in stored.values())
    before = len(scripted.requests)
    await evaluate(req, models=models_for(scripted.base_url), pool_builder=pools)
    assert len(scripted.requests) == before and len(pools.calls) == len(QUESTIONS)


async def test_question_and_passage_runs_get_pools_of_their_own(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "both"
    pools = FixedPools()
    models = models_for(scripted.base_url)
    await evaluate(request(nq_dataset, out, protocols=["rag"], limit=2), models=models, pool_builder=pools)
    assert pools.search_texts == [None, None] and passages_asked(scripted) == 0
    # The same folder, a run with passages added: new pools for it, the first run's kept.
    await evaluate(
        request(nq_dataset, out, protocols=["madke"], limit=2, base_config={"search_query": "passage"}),
        models=models,
        pool_builder=pools,
    )
    assert passages_asked(scripted) == 2 and len(pools.calls) == 4
    assert all(text is not None for text in pools.search_texts[2:])
    assert (out / "pools.jsonl").exists() and list(out.glob("pools.passage-*.jsonl"))


@pytest.mark.slow
def test_cli_set_search_query_passage_with_the_in_process_retriever(
    scripted: ScriptedLLM, tmp_path: Path
) -> None:
    """``parley eval --set search_query=passage`` as a user runs it: the scripted LLM and the
    in-process retriever over a slice of the real corpus."""
    from tests.retriever.support import build_slice_index

    settings = build_slice_index(tmp_path / "index", titles=["Paris", "Mona Lisa", "Jupiter", "Hamlet"])
    dataset = tmp_path / "nq.jsonl"
    dataset.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS[:2]))
    out = tmp_path / "cli"
    env = {
        "PARLEY_LLM_BASE_URL": scripted.base_url,
        "PARLEY_LLM_MODEL": "scripted",
        "PARLEY_LLM_MAX_ATTEMPTS": "1",
        "PARLEY_RETRIEVER_DATA_DIR": str(settings.data_dir),
        "PARLEY_RETRIEVER_WARMUP": "false",
        "HF_HUB_OFFLINE": "1",
    }
    args = ["eval", "--dataset", str(dataset), "--out", str(out), "--protocols", "rag"]
    args += ["--no-progress", "--no-plots", "--bootstrap-samples", "100", "--set", "search_query=passage"]
    result = CliRunner().invoke(build_app(), args, env=env)
    assert result.exit_code == 0, result.output
    assert passages_asked(scripted) == 2
    rows = lines(out / "results" / "rag.jsonl")
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[0]["answer"] == "Paris"
    assert all(r["calls"] == 2 for r in rows)  # the passage and the answer
    [kept] = list(out.glob("pools.passage-*.jsonl"))
    stored = [json.loads(x) for x in kept.read_text().splitlines()]
    assert all(s["search"]["role"] == "search" and s["pool"]["items"] for s in stored)

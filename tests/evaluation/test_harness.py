"""End to end with the scripted LLM server: runs, files, metrics, plots, failures and resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evaluation.harness import EvalRequest, PlanError, evaluate, rebuild_report
from evaluation.report_markdown import render_markdown
from evaluation.run_loop import EvalAborted
from evaluation.store import Workspace, WorkspaceError
from tests.evaluation.conftest import QUESTIONS, FixedPools, asked, models_for
from tests.support.scripted_llm import ScriptedLLM, free_port

pytestmark = pytest.mark.integration


def request(dataset: Path, out: Path, **kw: object) -> EvalRequest:
    defaults: dict[str, object] = {"progress": False, "bootstrap_samples": 500, "plots": False}
    defaults.update(kw)
    return EvalRequest(dataset=dataset, out=out, **defaults)  # type: ignore[arg-type]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


async def test_three_protocols_end_to_end(scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    pools = FixedPools()
    await evaluate(
        request(nq_dataset, out, protocols=["madke", "single", "rag"], plots=True),
        models=models_for(scripted.base_url),
        pool_builder=pools,
    )
    # One pool per question, shared by madke and rag (equal terms), not one per run.
    assert len(pools.calls) == len(QUESTIONS)
    for label in ("madke", "single", "rag"):
        rows = lines(out / "results" / f"{label}.jsonl")
        assert [r["id"] for r in rows] == ["q1", "q2", "q3", "q4"]
        assert all(r["status"] == "ok" for r in rows)
        assert rows[0]["answer"] == "Paris" and rows[0]["scores"]["em"] == 1.0
        assert rows[2]["answer"] == "Saturn" and rows[2]["scores"]["em"] == 0.0
        assert rows[0]["transcript_ref"] == f"transcripts/{label}.jsonl#q1"
        assert rows[0]["calls"] > 0 and rows[0]["completion_tokens"] > 0
    metrics = json.loads((out / "metrics.json").read_text())
    runs = {r["label"]: r for r in metrics["runs"]}
    madke, single = runs["madke"], runs["single"]
    assert single["accuracy"] == pytest.approx(0.5)  # q1, q2 right; q3 wrong; q4 "3"
    assert single["calls_per_q"] == 1.0
    # madke: 2 selections + 2 debaters + judge [Yes] in round 1, then the summary = 6 calls.
    assert madke["calls_per_q"] == 6.0 and madke["avg_rounds"] == 1.0
    assert madke["cons"] == 1.0 and madke["co2"] == pytest.approx(0.5)
    assert madke["accuracy_by_round"] == [pytest.approx(0.5)]
    assert madke["selection"]["steps"] == 8 and madke["selection"]["sources"] == {"wikipedia": 8}
    assert madke["selection"]["valid_selection_share"] == 1.0
    assert madke["selection"]["no_found_share"] == 0.0
    # q4 answered "3": with 2-item pools that names no knowledge item, so it is a (wrong) answer, not a
    # knowledge number taken for one.
    assert madke["answers"]["bare_number"] == 0.0
    assert madke["judge_rule"] == {"verdicts": 4, "agreement": 1.0}
    assert madke["parse_errors"]["judge"]["rate"] == 0.0
    assert single["selection"]["steps"] == 0
    # First-listed run is the baseline of every comparison.
    assert [(c["a"], c["b"]) for c in metrics["comparisons"]] == [("madke", "single"), ("madke", "rag")]
    assert metrics["comparisons"][0]["diff"] == 0.0 and not metrics["comparisons"][0]["significant"]
    report = (out / "report.md").read_text()
    assert "| madke |" in report and "may be noise" in report
    for png in ("accuracy_vs_tokens", "accuracy_by_round", "selection"):
        assert (out / "plots" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"

    # Rerunning the same command redoes nothing: no new LLM requests, no new pools.
    before = len(scripted.requests)
    await evaluate(
        request(nq_dataset, out, protocols=["madke", "single", "rag"]),
        models=models_for(scripted.base_url),
        pool_builder=pools,
    )
    assert len(scripted.requests) == before
    assert len(pools.calls) == len(QUESTIONS)
    # Each run logged its one invocation (wall time and what it finished); the rerun that finished
    # nothing logged none, and the report turns them into questions per hour.
    logged = lines(out / "invocations.jsonl")
    assert [(i["run"], i["ok"], i["failed"], i["concurrency"]) for i in logged] == [
        ("madke", 4, 0, 1), ("single", 4, 0, 1), ("rag", 4, 0, 1)
    ]  # fmt: skip
    assert all(i["wall_s"] > 0 for i in logged)
    qph = {
        r["label"]: r["questions_per_hour"] for r in json.loads((out / "metrics.json").read_text())["runs"]
    }
    assert qph["madke"] == pytest.approx(3600 * 4 / logged[0]["wall_s"])


async def test_prompt_styles_and_compare_pairs(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "styles"
    outcome = await evaluate(
        request(
            nq_dataset,
            out,
            protocols=["madke", "single"],
            prompt_styles=["robust", "paper"],
            compare=[("single-robust", "single-paper")],
            limit=2,
        ),
        models=models_for(scripted.base_url),
        pool_builder=FixedPools(),
    )
    assert outcome.labels == ["madke-robust", "madke-paper", "single-robust", "single-paper"]
    configs = outcome.report["configs"]
    assert configs["madke-robust"]["prompt_style"] == "robust"
    assert configs["single-paper"]["prompt_style"] == "paper"
    pairs = [(c["a"], c["b"]) for c in outcome.report["comparisons"]]
    assert pairs[-1] == ("single-robust", "single-paper")
    assert pairs[0] == ("madke-robust", "madke-paper")
    runs = {r["label"]: r for r in outcome.report["runs"]}
    assert runs["madke-robust"]["example_answers"] == ["carbon dioxide"]
    assert runs["madke-paper"]["example_answers"] == ["Bridget Driscoll", "Canberra"]
    assert runs["madke-robust"]["accuracy"] == 1.0  # q1, q2 only
    assert runs["madke-robust"]["selection"]["valid_selection_share"] == 1.0


async def test_a_folder_filled_run_by_run_reports_and_compares_all_its_runs(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "by-run"
    base = {"protocols": ["single"], "limit": 2}
    await evaluate(
        request(nq_dataset, out, prompt_styles=["paper"], **base),
        models=models_for(scripted.base_url),
    )
    calls_after_paper = len(scripted.requests)
    outcome = await evaluate(
        request(
            nq_dataset, out, prompt_styles=["robust"], compare=[("single-robust", "single-paper")], **base
        ),
        models=models_for(scripted.base_url),
    )
    assert len(scripted.requests) == calls_after_paper + 2  # only the new run did work
    assert [r["label"] for r in outcome.report["runs"]] == ["single-robust", "single-paper"]
    assert [(c["a"], c["b"]) for c in outcome.report["comparisons"]][-1] == ("single-robust", "single-paper")
    # A run with nothing finished yet is shown as such, not as a zero difference "that may be noise".
    empty = {**outcome.report, "comparisons": [{**outcome.report["comparisons"][-1], "n": 0}]}
    assert "no item finished in both runs yet" in render_markdown(empty)


async def test_plan_errors_fail_before_any_work(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    with pytest.raises(PlanError, match="nonsense"):
        await evaluate(
            request(nq_dataset, tmp_path / "x", protocols=["madke", "nonsense"]),
            models=models_for(scripted.base_url),
        )
    with pytest.raises(PlanError, match="unknown runs"):
        await evaluate(
            request(nq_dataset, tmp_path / "x", protocols=["single"], compare=[("single", "cot")]),
            models=models_for(scripted.base_url),
        )
    with pytest.raises(PlanError, match="judge"):
        await evaluate(
            request(nq_dataset, tmp_path / "x", protocols=["single"], primary="judge"),
            models=models_for(scripted.base_url),
        )
    assert scripted.requests == []


async def test_failed_item_recorded_and_retried_on_resume(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fail"
    scripted.fail_next(500)  # the first question's only call fails (one attempt per call here)
    outcome = await evaluate(
        request(nq_dataset, out, protocols=["single"]), models=models_for(scripted.base_url)
    )
    rows = {r["id"]: r for r in lines(out / "results" / "single.jsonl")}
    assert rows["q1"]["status"] == "failed" and "HTTP 500" in rows["q1"]["error"]
    assert rows["q1"]["scores"] is None
    assert outcome.tallies[0].failed == 1 and outcome.tallies[0].ok == 3
    assert outcome.report["runs"][0]["failed"] == 1
    assert "q1" in (out / "report.md").read_text()

    await evaluate(request(nq_dataset, out, protocols=["single"]), models=models_for(scripted.base_url))
    rows = {r["id"]: r for r in lines(out / "results" / "single.jsonl")}
    assert rows["q1"]["status"] == "ok" and rows["q1"]["attempt"] == 2
    assert asked(scripted, "what is the capital of france") == 2  # failed once, retried once
    assert asked(scripted, "who wrote hamlet") == 1  # finished items were not redone
    assert len(lines(out / "results" / "single.jsonl")) == 4  # compacted: one line per item


async def test_llm_down_stops_early_and_keeps_going_later(nq_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "down"
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EvalAborted, match="2 items failed in a row"):
        await evaluate(
            request(nq_dataset, out, protocols=["single"], max_consecutive_failures=2),
            models=models_for(dead),
        )
    rows = lines(out / "results" / "single.jsonl")
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert "LLMUnavailable" in rows[0]["error"]
    with ScriptedLLM() as llm:
        from tests.evaluation.conftest import scripted_reply

        llm.on(lambda body: True, scripted_reply)
        outcome = await evaluate(
            request(nq_dataset, out, protocols=["single"]), models=models_for(llm.base_url)
        )
    assert outcome.report["runs"][0]["ok"] == 4


async def test_interrupted_run_resumes_without_redoing(nq_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    from tests.evaluation.conftest import scripted_reply

    with ScriptedLLM(latency_s=0.15) as llm:
        llm.on(lambda body: True, scripted_reply)
        task = asyncio.create_task(
            evaluate(request(nq_dataset, out, protocols=["single"]), models=models_for(llm.base_url))
        )
        results = out / "results" / "single.jsonl"
        while not (results.exists() and len(lines(results)) >= 2):  # noqa: ASYNC110 - polling a file
            await asyncio.sleep(0.02)
        task.cancel()  # what Ctrl-C does to the running evaluation
        with pytest.raises(asyncio.CancelledError):
            await task
        finished = {r["id"] for r in lines(results) if r["status"] == "ok"}
        assert 2 <= len(finished) < 4
        await evaluate(request(nq_dataset, out, protocols=["single"]), models=models_for(llm.base_url))
        by_id = {q["id"]: q["question"] for q in QUESTIONS}
        for item_id in finished:
            assert asked(llm, by_id[item_id]) == 1
    rows = lines(out / "results" / "single.jsonl")
    assert [r["id"] for r in rows] == ["q1", "q2", "q3", "q4"] and all(r["status"] == "ok" for r in rows)


async def test_changed_config_for_a_label_is_refused(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cfg"
    await evaluate(
        request(nq_dataset, out, protocols=["single"], limit=1), models=models_for(scripted.base_url)
    )
    with pytest.raises(WorkspaceError, match="temperature"):
        await evaluate(
            request(nq_dataset, out, protocols=["single"], limit=1, base_config={"temperature": 0.0}),
            models=models_for(scripted.base_url),
        )
    # --fresh starts over.
    await evaluate(
        request(nq_dataset, out, protocols=["single"], limit=1, base_config={"temperature": 0.0}, fresh=True),
        models=models_for(scripted.base_url),
    )
    assert Workspace(out).load_manifest().runs[0].config["temperature"] == 0.0  # type: ignore[union-attr]
    report = rebuild_report(out, plots=False)
    assert report["runs"][0]["ok"] == 1

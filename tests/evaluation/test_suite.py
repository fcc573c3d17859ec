"""``parley eval --suite evidence``: both tiers over one folder, resumed after an interruption without
redoing finished questions, and a report whose CIs are the bootstrap's arithmetic; plus the prompt
style chosen per model and the warning about unparseable replies. A scripted LLM plays every role."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evaluation.cli_args import default_prompt_style
from evaluation.harness import EvalRequest, PlanError, evaluate, plan_request, plan_runs
from evaluation.items import Item
from evaluation.metrics import paired_bootstrap
from evaluation.plots import label_lift
from evaluation.report_markdown import unparseable_warnings
from evaluation.same_budget import budget_label
from evaluation.scoring import Scores
from evaluation.store import Manifest, ResultRecord, RunSpec, Workspace
from evaluation.suite import EVIDENCE, Suite, run_suite, suite_requests
from evaluation.suite_report import accuracy_ci, write_suite_report
from services.knowledge import KnowledgeItem, KnowledgePool
from tests.evaluation.conftest import QUESTIONS, FixedPools, models_for, scripted_reply, write_jsonl
from tests.support.scripted_llm import ScriptedLLM

SMALL = Suite(
    name="evidence",
    summary="test sizes",
    main=EVIDENCE.main,
    extra=EVIDENCE.extra,
    main_limit=4,
    extra_limit=2,
    debate="madke",
    extra_config=EVIDENCE.extra_config,
)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def base_request(dataset: Path, out: Path, **kw: Any) -> EvalRequest:
    return EvalRequest(
        dataset=dataset,
        out=out,
        protocols=["madke"],
        primary="contains",
        bootstrap_samples=500,
        progress=False,
        default_style="robust",
        **kw,
    )


@pytest.mark.integration  # the scripted LLM is a real HTTP server
async def test_the_suite_runs_both_tiers_and_resumes_without_redoing(
    nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "evidence"
    main, extra = suite_requests(SMALL, base_request(nq_dataset, out))
    assert (main.limit, extra.limit, main.same_budget, extra.same_budget) == (4, 2, True, False)
    labels = [s.label for s in plan_request(main)] + [s.label for s in plan_request(extra)]
    assert labels == ["rag", "single", "madke", budget_label("madke"), *EVIDENCE.extra]
    pools = FixedPools()
    with ScriptedLLM(latency_s=0.05) as llm:
        llm.on(lambda body: True, scripted_reply)
        models = models_for(llm.base_url)
        task = asyncio.create_task(run_suite(SMALL, main, extra, evaluate, models=models, pool_builder=pools))
        madke = out / "results" / "madke.jsonl"
        while not (madke.exists() and any(r["status"] == "ok" for r in lines(madke))):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        task.cancel()  # Ctrl-C, SIGTERM or a stopped machine: the item in flight is dropped
        with pytest.raises(asyncio.CancelledError):
            await task
        before = {
            label: {
                r["id"]: r["finished_at"]
                for r in lines(out / "results" / f"{label}.jsonl")
                if r["status"] == "ok"
            }
            for label in ("rag", "single", "madke")
        }
        assert before["rag"] and before["madke"] and len(before["madke"]) < 4
        builds = len(pools.calls)
        report = await run_suite(SMALL, main, extra, evaluate, models=models, pool_builder=pools)
    assert len(pools.calls) == builds  # the pools were kept: none built again
    for label, done in before.items():
        after = {r["id"]: r for r in lines(out / "results" / f"{label}.jsonl")}
        for item_id, finished_at in done.items():
            # the same record: not redone, not retried
            assert after[item_id]["finished_at"] == finished_at and after[item_id]["attempt"] == 1
    runs = {r["label"]: r for r in report["runs"]}
    assert set(runs) == set(labels)
    assert all(runs[x]["n"] == 4 for x in ("rag", "single", "madke", budget_label("madke")))
    assert all(runs[x]["n"] == 2 for x in EVIDENCE.extra)
    assert runs["madke"]["prompt_style"] == "robust" and runs["madke"]["setting"].startswith("Parley's:")
    pairs = {(c["a"], c["b"]) for c in report["comparisons"]}
    assert {("rag", "madke"), (budget_label("madke"), "madke"), ("single", "madke"), ("rag", "cot")} <= pairs
    assert (out / "plots" / "cost_accuracy.png").stat().st_size > 10_000
    text = (out / "suite.md").read_text()
    assert "## Paired differences against rag and against vote-budget-madke" in text
    assert "32B" in text and "Qwen1.5-72B-Chat" in text  # what the papers report, and at what size


@pytest.mark.unit
def test_suite_requests_refuse_what_they_would_ignore_and_take_the_paper_setting(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    with pytest.raises(PlanError, match="drop --protocols"):
        suite_requests(EVIDENCE, EvalRequest(dataset=dataset, out=tmp_path / "o", protocols=["single"]))
    with pytest.raises(PlanError, match="cannot be larger"):
        suite_requests(EVIDENCE, base_request(dataset, tmp_path / "o"), main_limit=50, extra_limit=60)
    main, extra = suite_requests(EVIDENCE, base_request(dataset, tmp_path / "o"), paper_setting=True)
    specs = {s.label: s for s in plan_request(main)}
    assert set(specs) == {"madke", "rag", "single", budget_label("madke")}
    madke = specs["madke"].config
    # the paper's setting, exactly: 2 agents, ≤3 rounds, T=0.5, 5+5 items, ≤3 selected, Prompt 3.1, LLM judge
    assert (madke["agents"], madke["rounds"], madke["temperature"], madke["k_wiki"], madke["k_web"]) == (
        2,
        3,
        0.5,
        5,
        5,
    )
    assert (madke["max_selected"], madke["selection"], madke["prompt_style"], madke["judge"]) == (
        3,
        True,
        "paper",
        "llm",
    )
    assert all(s.prompt_style == "paper" for s in specs.values())
    assert all(s.prompt_style == "paper" for s in plan_request(extra))
    assert (
        next(s for s in plan_request(extra) if s.label == "mallm").config["mallm"]["decision"] == "majority"
    )
    assert (main.limit, extra.limit) == (300, 100)


def fixed_workspace(root: Path, runs: dict[str, list[float]], gold: str = "x") -> Workspace:
    """An evaluation folder whose runs finished question ``q{i}`` with score ``runs[label][i]`` (a
    ``vote…`` label is the same-budget vote of madke), 100–300 prompt tokens a question."""
    ws = Workspace(root)
    specs = [
        RunSpec(
            label=label,
            protocol="self_consistency" if label.startswith("vote") else label,
            prompt_style="robust",
            config={
                "protocol": "self_consistency" if label.startswith("vote") else label,
                "prompt_style": "robust",
            },
            budget_of="madke" if label.startswith("vote") else None,
        )
        for label in runs
    ]
    ws.save_manifest(Manifest(dataset="fixture", format="nq", primary="contains", runs=specs))
    n = max(len(values) for values in runs.values())
    ws.save_items([Item(id=f"q{i}", question=f"question {i}", answers=[gold]) for i in range(n)])
    for label, values in runs.items():
        for i, v in enumerate(values):
            ws.write_result(
                ResultRecord(
                    id=f"q{i}",
                    index=i,
                    run=label,
                    protocol=label,
                    prompt_style="robust",
                    status="ok",
                    question=f"question {i}",
                    gold=[gold],
                    scores=Scores(em=v, f1=v, contains=v, correct=v),
                    prompt_tokens=100 * (1 + i % 3),
                    completion_tokens=10,
                    seconds=1.5,
                )
            )
    return ws


@pytest.mark.unit
def test_the_report_ci_arithmetic_on_fixed_results(tmp_path: Path) -> None:
    """40 questions: RAG right on 10, MADKE on those 10 and 12 more, the vote on 16. Each accuracy's CI
    and each paired difference are the bootstrap of exactly those 0/1 vectors."""
    n = 40
    rag = [1.0] * 10 + [0.0] * 30
    madke = [1.0] * 22 + [0.0] * 18
    vote = [1.0] * 16 + [0.0] * 24
    single = [1.0] * 4 + [0.0] * 36
    runs = {"rag": rag, "single": single, "madke": madke, budget_label("madke"): vote}
    ws = fixed_workspace(tmp_path / "fixed", runs)
    report = write_suite_report(ws, EVIDENCE, labels=list(runs), samples=2000, seed=3, plots=True)
    by_label = {r["label"]: r for r in report["runs"]}
    for label, values in runs.items():
        r = by_label[label]
        expected = paired_bootstrap([0.0] * n, values, samples=2000, seed=3)
        assert r["accuracy"] == pytest.approx(sum(values) / n)
        assert (r["ci_low"], r["ci_high"]) == (pytest.approx(expected.low), pytest.approx(expected.high))
        # and it is the usual interval: within 3 points of p ± 1.96·sqrt(p(1−p)/n)
        p = sum(values) / n
        half = 1.96 * np.sqrt(p * (1 - p) / n)
        assert r["ci_low"] == pytest.approx(p - half, abs=0.03) and r["ci_high"] == pytest.approx(
            p + half, abs=0.03
        )
        assert r["tokens_per_q"] == pytest.approx(sum(100 * (1 + i % 3) + 10 for i in range(n)) / n)
    diffs = {(c["a"], c["b"]): c for c in report["comparisons"]}
    madke_rag = diffs[("rag", "madke")]
    expected = paired_bootstrap(rag, madke, samples=2000, seed=3)
    assert madke_rag["diff"] == pytest.approx(0.30) and madke_rag["n"] == n
    assert (madke_rag["ci_low"], madke_rag["ci_high"]) == (
        pytest.approx(expected.low),
        pytest.approx(expected.high),
    )
    assert madke_rag["significant"] and madke_rag["ci_low"] > 0.1
    assert (madke_rag["b_better"], madke_rag["a_better"]) == (12, 0)
    vote_madke = diffs[(budget_label("madke"), "madke")]
    assert vote_madke["diff"] == pytest.approx(0.15)
    assert report["verdict"][0].startswith("madke beats RAG: +30.0 points")
    assert any("madke beats the same-budget vote: +15.0 points" in v for v in report["verdict"])
    assert accuracy_ci([], samples=100, seed=0) == (None, 0.0, 0.0)
    assert (tmp_path / "fixed" / "plots" / "cost_accuracy.png").exists()
    assert "| madke | 40 | 0 | 55.0 |" in (tmp_path / "fixed" / "suite.md").read_text()


@pytest.mark.unit
def test_eval_uses_the_style_each_model_answers_reliably_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARLEY_LLM_BASE_URL", raising=False)
    assert default_prompt_style("auto", api=False) == "robust"  # the embedded model
    assert default_prompt_style("auto", api=True) == "paper"  # the gateway: its own configuration
    assert default_prompt_style("paper", api=False) == "paper"
    monkeypatch.setenv("PARLEY_LLM_BASE_URL", "http://gpu-box:8000/v1")
    monkeypatch.setenv("PARLEY_LLM_MODEL", "Qwen/Qwen2.5-72B-Instruct")
    assert default_prompt_style("auto", api=False) == "paper"  # a configured endpoint
    # the same packaged model served elsewhere (`parley llm serve`) keeps the style it reads reliably
    monkeypatch.setenv("PARLEY_LLM_MODEL", "qwen2.5-coder-1.5b")
    assert default_prompt_style("auto", api=False) == "robust"
    monkeypatch.setenv("PARLEY_LLM_MODEL", "qwen2.5-0.5b")  # an old alias names it too
    assert default_prompt_style("auto", api=False) == "robust"
    specs = plan_runs(["madke", "single"], None, {}, default_style="robust")
    assert [(s.label, s.prompt_style) for s in specs] == [("madke", "robust"), ("single", "robust")]
    assert specs[0].config["judge"] == "auto"  # resolves to both with the robust style
    # a config or a preset that asks for the paper's wording keeps it
    asked = plan_runs(["madke"], None, {"prompt_style": "paper"}, default_style="robust")
    assert asked[0].prompt_style == "paper"


@pytest.mark.unit
def test_the_report_warns_about_unparseable_replies() -> None:
    runs = [
        {
            "label": "madke-paper",
            "prompt_style": "paper",
            "unparseable": 0.31,
            "parse_errors": {
                "debater": {"records": 100, "errors": 40, "rate": 0.4},
                "judge": {"records": 30, "errors": 0, "rate": 0.0},
            },
        },
        {"label": "madke-robust", "prompt_style": "robust", "unparseable": 0.01, "parse_errors": {}},
        {
            "label": "mad",
            "prompt_style": "robust",
            "unparseable": 0.083,
            "parse_errors": {"affirmative": {"records": 25, "errors": 5, "rate": 0.2}},
        },
    ]
    warnings = unparseable_warnings({"runs": runs})
    assert len(warnings) == 2 and warnings[0].startswith("madke-paper (paper prompts): 31.0 %")
    assert "debater 40/100" in warnings[0] and warnings[0].endswith("try the robust style")
    # A run already in the robust style is not told to try it.
    assert "affirmative 5/25" in warnings[1] and "try the robust style" not in warnings[1]


@pytest.mark.unit
def test_the_madke_preset_is_the_papers_setting_and_reports_say_which_each_run_used() -> None:
    from engine.prompts import paper
    from evaluation.presets import MADKE
    from evaluation.report import run_setting
    from services.knowledge import KnowledgeItem

    # MADKE §4.4: 2 agents, at most 3 rounds, temperature 0.5, 5 Wikipedia + 5 Google items; Prompt 3.1
    # selects up to 3; Prompt 3.4's LLM judge stops the debate.
    cfg = MADKE.debate_config()
    assert (cfg.agents, cfg.rounds, cfg.temperature, cfg.k_wiki, cfg.k_web) == (2, 3, 0.5, 5, 5)
    assert (cfg.selection, cfg.max_selected, cfg.prompt_style, cfg.judge_mode) == (True, 3, "paper", "llm")
    prompt = paper.select("q?", [KnowledgeItem(n=1, source="wikipedia", title="t", text="x")], None)
    text = " ".join(str(m["content"]) for m in prompt)
    assert (
        "Please select knowledge from the knowledge pool that will help you answer the question. If the "
        "knowledge pool does not contain the information needed to answer the question, add [No Found] "
        "at the end of your response. If the knowledge pool has knowledge that can help you answer the "
        "question, please return up to 3 of the most helpful knowledge. Put the number in square brackets."
    ) in text  # Prompt 3.1, word for word
    assert any("5 Wikipedia items only" in d for d in MADKE.deviations)
    preset_run = plan_request(
        EvalRequest(dataset=Path("d.jsonl"), out=Path("o"), protocols=[], preset="madke")
    )[0]
    assert run_setting(preset_run).startswith("the paper's (MADKE §4.4")
    # on an endpoint (the papers' wording), Parley's defaults are the paper's setting
    assert run_setting(plan_runs(["madke"], None, {}, default_style="paper")[0]).startswith("the paper's")
    default_run = plan_runs(["madke"], None, {}, default_style="robust")[0]
    assert (
        run_setting(default_run)
        == "Parley's: prompt_style=robust (the paper: paper), judge=auto→both (the paper: llm)"
    )


@pytest.mark.integration  # the scripted LLM is a real HTTP server; the command runs in this process
def test_parley_eval_suite_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole command: the root app's in-process runner, a configured endpoint (the papers' wording
    by default), the dataset's own pools (no retriever), then --report-only."""
    from typer.testing import CliRunner

    from parley_cli import build_app

    rows = [
        {
            "question": q["question"],
            "answer": q["answers"],
            "wiki_retrieval": [{"id": f"w{i}", "contents": f"Facts\n{q['question']}: {q['answers'][0]}."}],
        }
        for i, q in enumerate(QUESTIONS)
    ]
    dataset = tmp_path / "madke.json"
    dataset.write_text(json.dumps(rows))
    out = tmp_path / "suite"
    with ScriptedLLM() as llm:
        llm.on(lambda body: True, scripted_reply)
        monkeypatch.setenv("PARLEY_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("PARLEY_LLM_MAX_ATTEMPTS", "1")
        args = ["eval", "--suite", "evidence", "--dataset", str(dataset), "--out", str(out), "--limit", "3"]
        args += ["--extra-limit", "2", "--no-progress", "--bootstrap-samples", "200", "--primary", "contains"]
        done = CliRunner().invoke(build_app(), args)
    assert done.exit_code == 0, done.output
    suite = json.loads((out / "suite.json").read_text())
    runs = {r["label"]: r for r in suite["runs"]}
    assert runs["madke"]["n"] == 3 and runs["cot"]["n"] == 2 and runs["madke"]["prompt_style"] == "paper"
    assert runs["madke"]["setting"].startswith("the paper's") and runs["cot"]["pool_items"] is None
    rebuilt = CliRunner().invoke(
        build_app(), ["eval", "--suite", "evidence", "--out", str(out), "--report-only"]
    )
    assert rebuilt.exit_code == 0 and "suite.md" in rebuilt.output


@pytest.mark.unit
def test_the_paired_table_counts_the_questions_each_run_answered_better(tmp_path: Path) -> None:
    """RAG right on q0–q9, MADKE on q5–q16: MADKE better on 7 questions, RAG on 5, 5 tie right and 23
    tie wrong; the difference (+2 of 40 = +5 points) is those counts' difference over n."""
    n = 40
    rag = [1.0 if i < 10 else 0.0 for i in range(n)]
    madke = [1.0 if 5 <= i < 17 else 0.0 for i in range(n)]
    ws = fixed_workspace(tmp_path / "crossing", {"rag": rag, "madke": madke})
    report = write_suite_report(ws, EVIDENCE, labels=["rag", "madke"], samples=500, seed=1, plots=False)
    (c,) = [c for c in report["comparisons"] if (c["a"], c["b"]) == ("rag", "madke")]
    assert (c["b_better"], c["a_better"], c["n"]) == (7, 5, 40)
    assert c["diff"] == pytest.approx((7 - 5) / 40)
    assert (
        "| rag | madke | 40 | 25.0 | 30.0 | 7 / 5 | +5.0 |"
        in (tmp_path / "crossing" / "suite.md").read_text()
    )


@pytest.mark.unit
def test_the_report_splits_accuracy_by_whether_the_pool_holds_the_answer(tmp_path: Path) -> None:
    """Ten questions, gold "Paris": the pools of q0–q3 hold it; q4's holds only "Parisian" (not the
    word), the rest other towns. RAG right on q0–q2 and q5, single on q0 and q6."""
    rag = [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    single = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    ws = fixed_workspace(tmp_path / "split", {"rag": rag, "single": single, "cot": []}, gold="Paris")
    texts = ["Paris is the capital of France."] * 4 + ["A Parisian style."] + ["Lyon and Lille."] * 5
    for i, text in enumerate(texts):
        item = KnowledgeItem(n=1, source="wikipedia", title=f"T{i}", text=text)
        ws.save_pool(f"q{i}", KnowledgePool(pool_id=f"p{i}", question=f"question {i}", items=[item]))
    report = write_suite_report(
        ws, EVIDENCE, labels=["rag", "single", "cot"], samples=500, seed=1, plots=False
    )
    split = report["pool_answer"]
    assert (split["questions"], split["holding"]) == (10, 4)
    by_label = {r["label"]: r for r in split["runs"]}
    assert by_label["rag"]["holds"]["n"] == 4 and by_label["rag"]["holds"]["accuracy"] == pytest.approx(0.75)
    assert by_label["rag"]["lacks"]["accuracy"] == pytest.approx(1 / 6)
    assert by_label["single"]["holds"]["accuracy"] == pytest.approx(0.25)
    assert by_label["single"]["lacks"]["n"] == 6 and by_label["single"]["lacks"]["accuracy"] == pytest.approx(
        1 / 6
    )
    text = (tmp_path / "split" / "suite.md").read_text()
    assert "holds a gold answer string for 4 of its 10 questions (40.0 %)" in text
    assert "| rag | 4 | 75.0 |" in text
    # within each group, paired: single → rag on the 4 holding questions is +2 of 4 (rag right on q1,
    # q2 where single is not; both on q0), on the 6 others 0 (rag right on q5, single on q6)
    within = {(c["a"], c["b"], c["group"]): c for c in split["comparisons"]}
    holds_diff, lacks_diff = within[("single", "rag", "holds")], within[("single", "rag", "lacks")]
    assert (holds_diff["n"], holds_diff["b_better"], holds_diff["a_better"]) == (4, 2, 0)
    assert holds_diff["diff"] == pytest.approx(0.5)
    assert (lacks_diff["n"], lacks_diff["b_better"], lacks_diff["a_better"], lacks_diff["diff"]) == (
        6,
        1,
        1,
        0.0,
    )
    assert "| holds | single | rag | 4 | 25.0 | 75.0 | 2 / 0 | +50.0 |" in text
    # a run with nothing finished yet has no interval, in this table and in the runs table
    assert "| cot | 0 | – | – | 0 | – | – |" in text
    assert "| cot | 0 | 0 | – | – |" in text
    # a folder without pools (closed-book runs only) has no such section
    bare = fixed_workspace(tmp_path / "bare", {"single": single}, gold="Paris")
    assert (
        write_suite_report(bare, EVIDENCE, labels=["single"], samples=100, plots=False)["pool_answer"] is None
    )
    assert "pool holds the answer" not in (tmp_path / "bare" / "suite.md").read_text()


def test_labels_of_runs_alike_in_cost_and_accuracy_do_not_print_over_each_other() -> None:
    placed: list[tuple[float, float]] = []
    # society and MAD: 6,156 and 6,623 tokens, both 21 %; a run far off keeps its place
    assert label_lift(placed, math.log10(6156), 21.0) == 0
    assert label_lift(placed, math.log10(6623), 21.0) == 1
    assert label_lift(placed, math.log10(6400), 21.0) == 2
    assert label_lift(placed, math.log10(180), 21.0) == 0
    assert label_lift(placed, math.log10(6156), 30.0) == 0

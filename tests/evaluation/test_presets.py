"""Paper presets end to end against the scripted LLM: the dataset's own pools, published figures next
to Parley's, the same-budget vote baseline, and the CLI's preset listing and errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evaluation.harness import EvalRequest, PlanError, evaluate
from evaluation.presets import PRESETS
from evaluation.store import Workspace
from parley_cli import build_app
from services.knowledge import KnowledgeItem, KnowledgePool
from tests.evaluation.conftest import QUESTIONS, FixedPools, models_for
from tests.evaluation.test_cli import env_for
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.integration

app = build_app()
runner = CliRunner()


def madke_file(folder: Path) -> Path:
    """The four conftest questions in MADKE's layout, each with a pool only this file has; the path
    names the benchmark the way MADKE's repository does (data/nq/…)."""
    records: list[dict[str, Any]] = []
    for q in QUESTIONS:
        records.append(
            {
                "question": q["question"],
                "answer": q["answers"],
                "wiki_retrieval": [
                    {"id": "w1", "contents": f"Wiki one\nFILE PASSAGE about {q['question']}.", "score": 9.0},
                    {"id": "w2", "contents": "Wiki two\nSecond FILE PASSAGE.", "score": 8.0},
                    {"id": "w3", "contents": "Empty\n"},
                ],
                "google_retrieval": [{"contents": "Web one\nFILE SNIPPET."}],
            }
        )
    path = folder / "data" / "nq" / "test_all_retrieval_500.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(records, indent=4))
    return path


def request(dataset: Path, out: Path, **kw: Any) -> EvalRequest:
    defaults: dict[str, Any] = {"progress": False, "bootstrap_samples": 200, "plots": False, "protocols": []}
    defaults.update(kw)
    return EvalRequest(dataset=dataset, out=out, **defaults)


def sent(llm: ScriptedLLM, text: str) -> int:
    return sum(1 for body in llm.requests if text in request_text(body))


async def test_madke_preset_debates_on_the_files_pools(scripted: ScriptedLLM, tmp_path: Path) -> None:
    data = madke_file(tmp_path)
    out = tmp_path / "out"
    # A cached pool from an earlier retriever run must not replace the file's pool.
    Workspace(out).save_pool(
        "index-0",
        KnowledgePool(
            pool_id="cached",
            question=QUESTIONS[0]["question"],
            items=[KnowledgeItem(n=1, source="wikipedia", title="Cache", text="CACHED PASSAGE")],
        ),
    )
    outcome = await evaluate(
        request(data, out, preset="madke", plots=True), models=models_for(scripted.base_url)
    )
    report = outcome.report
    assert (out / "plots" / "published.png").read_bytes()[:4] == b"\x89PNG"
    (run,) = report["runs"]
    assert run["label"] == "madke" and run["ok"] == 4
    assert run["accuracy"] == pytest.approx(0.5)  # Paris, Shakespeare right; Saturn, "3" wrong
    config = report["configs"]["madke"]
    assert (config["agents"], config["rounds"], config["k_wiki"], config["k_web"]) == (2, 3, 5, 5)
    assert (config["prompt_style"], config["judge"], config["temperature"]) == ("paper", "llm", 0.5)
    # The agents saw the file's passages, never the cache; the textless entry was dropped.
    assert sent(scripted, "FILE PASSAGE about what is the capital of france") > 0
    assert sent(scripted, "CACHED PASSAGE") == 0
    transcripts = Workspace(out).load_transcripts("madke")
    assert [k.title for k in transcripts["index-0"].pool.items] == ["Wiki one", "Wiki two", "Web one"]
    assert report["pool_source"] == "file" and report["pool_items_dropped"] == 4
    # The paper's figures for NQ next to Parley's, with the model behind each.
    assert report["benchmark"] == "nq"
    rows = report["published"]
    assert {(r["paper_model"], r["metric"]) for r in rows} >= {
        ("Qwen1.5-72B-Chat", "f1"),
        ("GPT-3.5-Turbo", "judge_accuracy"),
    }
    f1_72b = next(r for r in rows if r["paper_model"] == "Qwen1.5-72B-Chat" and r["metric"] == "f1")
    assert f1_72b["paper_value"] == pytest.approx(0.479) and f1_72b["parley_value"] == run["f1"]
    assert f1_72b["parley_models"] == ["scripted"]
    md = (out / "report.md").read_text()
    assert "## Published figures" in md and "MADKE Table 2" in md and "| madke | scripted |" in md
    assert "Preset **madke**" in md and "4 pool entries without text were dropped" in md


async def test_preset_overrides_baselines_and_retriever_pools(scripted: ScriptedLLM, tmp_path: Path) -> None:
    data = madke_file(tmp_path)
    pools = FixedPools()
    outcome = await evaluate(
        request(
            data,
            tmp_path / "out",
            preset="madke",
            protocols=["single", "rag"],
            base_config={"k_web": 0},
            pool="retriever",
            benchmark="triviaqa",
        ),
        models=models_for(scripted.base_url),
        pool_builder=pools,
    )
    assert [r["label"] for r in outcome.report["runs"]] == ["madke", "single", "rag"]
    configs = outcome.report["configs"]
    assert configs["madke"]["k_web"] == 0 and configs["rag"]["k_web"] == 0  # --set reaches every run
    assert configs["single"]["temperature"] == 0.5  # shared with the preset
    # --pool retriever: pools built by Parley for every question, the file's ignored.
    assert len(pools.calls) == len(QUESTIONS) and sent(scripted, "FILE PASSAGE") == 0
    assert sent(scripted, "Facts about who wrote hamlet") > 0
    methods = {(r["run"], r["paper_method"]) for r in outcome.report["published"]}
    assert ("single", "SP") in methods and ("rag", "RAG") in methods and ("madke", "MADKE") in methods
    plain = tmp_path / "nq.jsonl"
    plain.write_text(json.dumps(QUESTIONS[0]) + "\n")
    with pytest.raises(PlanError, match="carries no knowledge pools"):
        await evaluate(
            request(plain, tmp_path / "o2", preset="madke", pool="file"), models=models_for(scripted.base_url)
        )


async def test_same_budget_vote_spends_the_debates_tokens(scripted: ScriptedLLM, tmp_path: Path) -> None:
    data = madke_file(tmp_path)
    out = tmp_path / "out"
    outcome = await evaluate(
        request(data, out, preset="madke", same_budget=True), models=models_for(scripted.base_url)
    )
    labels = [r["label"] for r in outcome.report["runs"]]
    assert labels == ["madke", "vote-budget-madke"]
    ws = Workspace(out)
    debate = ws.load_results("madke")
    votes = ws.load_results("vote-budget-madke")
    cap = 20
    for item_id, vote in votes.items():
        budget = debate[item_id].prompt_tokens + debate[item_id].completion_tokens
        assert vote.status == "ok" and vote.budget_tokens == budget
        used = vote.prompt_tokens + vote.completion_tokens
        assert vote.samples is not None
        per_sample = used / vote.samples
        # As many samples as the debate's tokens buy (the scripted server's cost is the same for each
        # sample of a question), never more than self-consistency allows.
        assert vote.samples == max(1, min(cap, math.floor(budget / per_sample)))
        assert used <= budget or vote.samples == 1
        assert vote.samples > 1
    vote_run = next(r for r in outcome.report["runs"] if r["label"] == "vote-budget-madke")
    assert vote_run["protocol"] == "self_consistency" and vote_run["budget_of"] == "madke"
    pairs = [(c["a"], c["b"]) for c in outcome.report["comparisons"]]
    assert pairs == [("madke", "vote-budget-madke")]
    md = (out / "report.md").read_text()
    assert "## Same-budget vote baseline" in md and "| madke |" in md
    # The vote run is not matched with the paper's SC row: it is not the paper's self-consistency.
    assert all(r["run"] != "vote-budget-madke" for r in outcome.report["published"])


def test_cli_lists_presets_and_refuses_unknown(scripted: ScriptedLLM, tmp_path: Path) -> None:
    listed = runner.invoke(app, ["eval", "--list-presets"])
    assert listed.exit_code == 0, listed.output
    for name in PRESETS:
        assert f"{name}:" in listed.output
    assert "source: MADKE §4.4" in listed.output
    assert "differs: the paper's Table 1 uses 10 agents" in listed.output
    data = madke_file(tmp_path)
    unknown = runner.invoke(
        app,
        ["eval", "--preset", "madk", "--dataset", str(data), "--out", str(tmp_path / "x")],
        env=env_for(scripted),
    )
    assert unknown.exit_code == 2
    assert "unknown preset 'madk'" in unknown.output and "mad-ciar" in unknown.output


def test_cli_preset_run_needs_no_retriever(scripted: ScriptedLLM, tmp_path: Path) -> None:
    data = madke_file(tmp_path)
    out = tmp_path / "cli"
    result = runner.invoke(
        app,
        [
            "eval",
            "--preset",
            "madke",
            "--dataset",
            str(data),
            "--out",
            str(out),
            "--set",
            "k_wiki=1",
            "--no-progress",
            "--no-plots",
        ],
        env=env_for(scripted),
    )
    assert result.exit_code == 0, result.output
    assert "4 pool entries without text dropped" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["preset"] == "madke" and metrics["runs"][0]["ok"] == 4
    # The file's pool cut to the run's k_wiki=1 and k_web=5, as the reference code's wiki_num/google_num.
    pool = Workspace(out).load_transcripts("madke")["index-2"].pool
    assert [(k.n, k.title) for k in pool.items] == [(1, "Wiki one"), (2, "Web one")]


CIAR = [
    {
        "question": "Alice walks up a hill at 1 m/s and down at 3 m/s. What is her average speed in m/s?",
        "answer": ["1.5", "3/2"],
        "explanation": "Equal distances: harmonic mean.",
        "incorrect answer": ["2"],
        "incorrect explanation": "The arithmetic mean.",
    },
    {
        "question": "A train covers half a trip at 30 km/h and half at 60 km/h. What is its average speed?",
        "answer": ["40"],
        "explanation": "Harmonic mean.",
        "incorrect answer": ["45"],
        "incorrect explanation": "The arithmetic mean.",
    },
]
# The moderator's answer per question: another form of the right value, then the intuitive wrong one.
MODERATOR = {"Alice walks up": "3/2 m/s", "A train covers": "45 km/h"}


def mad_reply(body: dict[str, Any]) -> str:
    text = request_text(body)
    if "Whether there is a preference" in text:
        answer = next(a for q, a in MODERATOR.items() if q in text)
        return json.dumps(
            {
                "Whether there is a preference": "Yes",
                "Supported Side": "Negative",
                "Reason": "The negative side computed total distance over total time.",
                "debate_answer": answer,
            }
        )
    return "Average speed is total distance over total time. Therefore, the answer is [1.5 m/s]."


async def test_mad_ciar_preset_scores_numbers_by_value(tmp_path: Path) -> None:
    data = tmp_path / "data" / "CounterintuitiveQA" / "CIAR.json"
    data.parent.mkdir(parents=True)
    data.write_text(json.dumps(CIAR, indent=4))
    with ScriptedLLM() as llm:
        llm.on(lambda body: True, mad_reply)
        outcome = await evaluate(
            request(data, tmp_path / "out", preset="mad-ciar"), models=models_for(llm.base_url)
        )
    assert outcome.dataset.format == "ciar"
    (run,) = outcome.report["runs"]
    assert run["label"] == "mad-ciar" and run["protocol"] == "mad" and run["ok"] == 2
    # "3/2 m/s" is the published "1.5"; "45 km/h" is CIAR's intuitive wrong answer.
    assert run["accuracy"] == pytest.approx(0.5) and run["numeric"] == pytest.approx(0.5)
    assert run["em"] == 0.0  # no string match: only equivalence by value scores it
    assert run["avg_rounds"] == 1.0  # the moderator's preference ends the debate (adaptive break)
    config = outcome.report["configs"]["mad-ciar"]
    assert (
        config["mad"]["tit_for_tat"] == 2
        and config["mad"]["adaptive_break"]
        and config["knowledge"] == "none"
    )
    (row,) = [r for r in outcome.report["published"] if r["paper_model"] == "GPT-3.5-Turbo"]
    assert outcome.report["benchmark"] == "ciar"
    assert (row["paper_method"], row["paper_value"], row["parley_value"]) == ("MAD", pytest.approx(0.37), 0.5)
    assert row["source"] == "Liang et al. Table 3"


async def test_api_mode_refuses_what_only_runs_in_process(tmp_path: Path) -> None:
    """File pools and same-budget votes are in-process features: an --api run says so before it sends
    anything (the client below would fail on any call)."""
    data = madke_file(tmp_path)
    no_gateway: Any = object()
    with pytest.raises(PlanError, match="in-process only"):
        await evaluate(request(data, tmp_path / "a", preset="madke"), batch_client=no_gateway)
    with pytest.raises(PlanError, match="--same-budget runs in-process only"):
        await evaluate(
            request(data, tmp_path / "b", preset="madke", same_budget=True, pool="retriever"),
            batch_client=no_gateway,
        )


async def test_kks_wu_preset_on_controlmad_puzzles(tmp_path: Path) -> None:
    """Wu et al.'s setup on their published layout: the team solves the first puzzle and gets one role
    of the second wrong; Strict/Smooth against text_solution, and Table 3's figure for size 4."""
    from evaluation.kks.generator import generate_dataset
    from evaluation.kks.puzzle import game_text

    puzzles = list(generate_dataset([4], per_size=2, seed=5))
    codes = {"knight": 1, "knave": 2, "spy": 3}
    data = tmp_path / "groundtruth" / "4.jsonl"
    data.parent.mkdir()
    data.write_text(
        "".join(
            json.dumps(
                {
                    "game_id": k,
                    "num_player": 4,
                    "raw_solution": [codes[p.solution[n]] for n in p.players],
                    "text_game": game_text(p.players, p.statements) + "\n",
                    "text_solution": "".join(f"{n} is a {p.solution[n]}.\n" for n in p.players),
                }
            )
            + "\n"
            for k, p in enumerate(puzzles, start=1)
        )
    )
    first, second = puzzles
    wrong = dict(second.solution)
    flipped = second.players[0]
    wrong[flipped] = "spy" if wrong[flipped] != "spy" else "knight"

    def solution_for(text: str) -> dict[str, str]:
        return first.solution if game_text(first.players, first.statements) in text else wrong

    def assignment(body: dict[str, Any]) -> str:
        sol = solution_for(request_text(body))
        return json.dumps({"players": [{"name": p, "role": r} for p, r in sol.items()], "explanation": "e"})

    def role_reply(body: dict[str, Any]) -> str:
        text = request_text(body)
        player = text.split("We are debating the role of ", 1)[1].split(".", 1)[0]
        return json.dumps(
            {"player_role": player, "role": solution_for(text)[player], "agree_reasoning": "ok"}
        )

    with ScriptedLLM() as llm:
        llm.on("CURRENT FOCUS: We are debating", role_reply)
        llm.on(lambda body: True, assignment)
        outcome = await evaluate(
            request(data, tmp_path / "out", preset="kks-wu"), models=models_for(llm.base_url)
        )
    assert outcome.dataset.format == "kks" and outcome.report["benchmark"] == "kks-4"
    (run,) = outcome.report["runs"]
    assert run["protocol"] == "kks" and run["ok"] == 2
    assert run["kks_strict"] == pytest.approx(0.5) and run["kks_smooth"] == pytest.approx((1 + 3 / 4) / 2)
    (row,) = outcome.report["published"]
    assert (row["paper_method"], row["paper_value"], row["metric"]) == (
        "debate",
        pytest.approx(0.6933),
        "kks_strict",
    )
    assert row["parley_value"] == pytest.approx(0.5)

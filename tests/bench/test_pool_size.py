"""The pool-size study: only the sizes not reused run, each like the reused run but for k_wiki, and the
report's accuracies and paired differences are the bootstrap of exactly the results written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.pool_size import main
from engine.result import DebateResult, Usage
from evaluation.datasets import Item
from evaluation.metrics import paired_bootstrap
from evaluation.scoring import Scores
from evaluation.store import Manifest, ResultRecord, RunSpec, Workspace
from services.knowledge import KnowledgeItem
from tests.support.results import debate_result

pytestmark = pytest.mark.unit

N = 30


def write_folder(
    root: Path, *, size: int, runs: dict[str, list[float]], primary: str = "strict_contains"
) -> None:
    """An evaluation folder as ``parley eval`` leaves it: manifest, items, one results file per run."""
    ws = Workspace(root)
    specs = [
        RunSpec(
            label=protocol,
            protocol=protocol,
            prompt_style="robust",
            config={"protocol": protocol, "prompt_style": "robust", "k_wiki": size, "rounds": 3, "agents": 2},
        )
        for protocol in runs
    ]
    ws.save_manifest(Manifest(dataset="fixture", format="nq", primary=primary, runs=specs))
    ws.save_items([Item(id=f"q{i}", question=f"question {i}", answers=["x"]) for i in range(N)])
    for protocol, values in runs.items():
        for i, v in enumerate(values):
            ws.write_result(
                ResultRecord(
                    id=f"q{i}",
                    index=i,
                    run=protocol,
                    protocol=protocol,
                    prompt_style="robust",
                    status="ok",
                    question=f"question {i}",
                    gold=["x"],
                    scores=Scores(em=v, f1=v, contains=v, strict_contains=v, correct=v),
                    prompt_tokens=100 * size,
                    completion_tokens=10,
                    seconds=2.0,
                    calls=1,
                ),
                transcript(size, holds_answer=i < HELD[size]),
            )


# Questions whose pool holds the gold answer "x": more of them in larger pools.
HELD = {5: 12, 10: 20, 15: 24}


def transcript(size: int, *, holds_answer: bool) -> DebateResult:
    texts = ["the answer is x" if holds_answer and n == size else f"passage {n}" for n in range(1, size + 1)]
    items = [KnowledgeItem(n=n, source="wikipedia", title=f"t{n}", text=t) for n, t in enumerate(texts, 1)]
    usage = Usage(calls=1, prompt_tokens=100 * size, completion_tokens=10)
    return debate_result(
        items, protocol="rag", question="q", answer="x", answer_source="single answer", usage=usage
    )


RAG = {5: [1.0] * 6 + [0.0] * 24, 10: [1.0] * 12 + [0.0] * 18, 15: [1.0] * 3 + [0.0] * 27}
MADKE = {5: [1.0] * 9 + [0.0] * 21, 10: [1.0] * 9 + [0.0] * 21, 15: [1.0] * 10 + [0.0] * 20}


class FakeEval:
    """Stands where ``parley eval`` runs: records each command and writes what that evaluation would."""

    def __init__(self, rc: int = 0) -> None:
        self.commands: list[list[str]] = []
        self.rc = rc

    def __call__(self, cmd: Sequence[str]) -> int:
        cmd = list(cmd)
        self.commands.append(cmd)
        if self.rc:
            return self.rc
        out = Path(cmd[cmd.index("--out") + 1])
        protocol = cmd[cmd.index("--protocols") + 1]
        size = int(cmd[cmd.index("--set") + 1].removeprefix("k_wiki="))
        existing = Workspace(out).load_manifest()
        labels = [r.label for r in existing.runs] if existing else []
        write_folder(
            out, size=size, runs={p: (RAG if p == "rag" else MADKE)[size] for p in [*labels, protocol]}
        )
        return 0


def test_the_study_runs_what_is_missing_like_the_reused_run_and_reports_paired_cis(tmp_path: Path) -> None:
    reused = tmp_path / "evidence"
    write_folder(reused, size=5, runs={"rag": RAG[5], "madke": MADKE[5]})
    fake = FakeEval()
    out = tmp_path / "study"
    argv = ["--sizes", "15,5,10", "--protocols", "rag,madke", "--limit", str(N), "--reuse", f"5={reused}"]
    assert main([*argv, "--out", str(out), "--no-progress"], runner=fake) == 0

    # rag's whole curve first, smallest size first; the reused size is not run again
    ran = [(c[c.index("--protocols") + 1], c[c.index("--set") + 1]) for c in fake.commands]
    assert ran == [("rag", "k_wiki=10"), ("rag", "k_wiki=15"), ("madke", "k_wiki=10"), ("madke", "k_wiki=15")]
    madke_cmd = fake.commands[2]
    config = json.loads(madke_cmd[madke_cmd.index("--config") + 1])
    assert config == {"prompt_style": "robust", "rounds": 3, "agents": 2}  # the reused run's, less k_wiki
    rag_config = json.loads(fake.commands[0][fake.commands[0].index("--config") + 1])
    assert "rounds" not in rag_config and "agents" not in rag_config  # settings RAG does not read
    assert madke_cmd[madke_cmd.index("--out") + 1] == str(out / "k10")

    report = json.loads((out / "pool_size.json").read_text())
    rows = {(r["protocol"], r["size"]): r for r in report["rows"]}
    assert rows[("rag", 5)]["reused"] and rows[("rag", 5)]["folder"] == str(reused)
    for (protocol, size), row in rows.items():
        values = (RAG if protocol == "rag" else MADKE)[size]
        assert row["n"] == N and row["accuracy"] == pytest.approx(sum(values) / N)
        assert row["tokens_per_q"] == pytest.approx(100 * size + 10)
        assert row["ci_low"] < row["accuracy"] < row["ci_high"]
        assert row["pool_items"] == size and row["answer_in_pool"] == pytest.approx(HELD[size] / N)
        # right on the first questions, whose pools hold the answer: accuracy among those held
        assert row["accuracy_when_held"] == pytest.approx(min(sum(values), HELD[size]) / HELD[size])
    diffs = {(c["protocol"], c["b"]): c for c in report["comparisons"]}
    assert set(diffs) == {("rag", "k10"), ("rag", "k15"), ("madke", "k10"), ("madke", "k15")}
    rag10 = diffs[("rag", "k10")]
    expected = paired_bootstrap(RAG[5], RAG[10], samples=10_000, seed=0)
    assert rag10["diff"] == pytest.approx(0.2) and rag10["n"] == N
    assert (rag10["ci_low"], rag10["ci_high"]) == (pytest.approx(expected.low), pytest.approx(expected.high))
    text = (out / "pool_size.md").read_text()
    assert "| rag | k5 | k10 | 30 | 20.0 | 40.0 | +20.0 |" in text and "| better |" in text
    assert "| madke | k5 | k10 | 30 | 30.0 | 30.0 | +0.0 | [+0.0, +0.0] | may be noise |" in text
    assert (out / "pool_size.png").stat().st_size > 10_000

    # --report-only rebuilds the report from the folders and runs nothing
    fake.commands.clear()
    assert main([*argv, "--out", str(out), "--report-only"], runner=fake) == 0
    assert fake.commands == []


@pytest.mark.parametrize(
    ("reuse_size", "primary", "says"),
    [
        (10, "strict_contains", "used k_wiki 5, not 10"),
        (5, "em", "measured strict_contains, this study em"),
    ],
)
def test_a_reused_folder_that_does_not_fit_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reuse_size: int, primary: str, says: str
) -> None:
    reused = tmp_path / "evidence"
    write_folder(reused, size=5, runs={"rag": RAG[5]})
    fake = FakeEval()
    argv = [
        "--sizes",
        "5,10",
        "--protocols",
        "rag",
        "--primary",
        primary,
        "--reuse",
        f"{reuse_size}={reused}",
    ]
    assert main([*argv, "--out", str(tmp_path / "study")], runner=fake) == 2
    assert says in capsys.readouterr().err and fake.commands == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sizes", "5,x"], "--sizes takes pool sizes"),
        (["--sizes", "0,5"], "pool sizes must lie in 1..50"),
        (["--sizes", "5,80"], "pool sizes must lie in 1..50"),
        (["--reuse", "5"], "--reuse takes SIZE=FOLDER"),
        (["--reuse", "7=somewhere"], "7 is not one of the sizes"),
        (["--reuse", "5=nowhere"], "holds no evaluation"),
        (["--protocols", "rag,madke", "--reuse", "5=HERE"], "no run labelled 'madke'"),
    ],
)
def test_bad_arguments_are_said_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    reused = tmp_path / "evidence"
    write_folder(reused, size=5, runs={"rag": RAG[5]})
    argv = [a.replace("HERE", str(reused)) for a in argv]
    if "--protocols" not in argv:
        argv += ["--protocols", "rag"]
    fake = FakeEval()
    assert main([*argv, "--out", str(tmp_path / "study")], runner=fake) == 2
    assert says in capsys.readouterr().err and fake.commands == []


def test_an_evaluation_that_stops_stops_the_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeEval(rc=130)
    assert main(["--sizes", "5,10", "--protocols", "rag", "--out", str(tmp_path / "s")], runner=fake) == 2
    assert "rag at pool size 5 stopped (exit 130)" in capsys.readouterr().err and len(fake.commands) == 1

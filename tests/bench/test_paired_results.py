"""Pairing two runs of different folders: the questions both finished, the harness's bootstrap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.paired_results import main
from evaluation.metrics import paired_bootstrap

pytestmark = pytest.mark.unit


def write_run(
    folder: Path,
    run: str,
    contains: dict[str, float],
    failed: tuple[str, ...] = (),
    cost: dict[str, tuple[int, float]] | None = None,
) -> None:
    """``cost``: a question's (tokens, seconds)."""
    (folder / "results").mkdir(parents=True)

    def record(qid: str, status: str, scores: dict[str, float] | None) -> dict[str, object]:
        return {"id": qid, "index": int(qid[1:]), "run": run, "protocol": run, "prompt_style": "robust",
                "status": status, "question": "q?", "gold": ["x"], "scores": scores}  # fmt: skip

    rows = [
        record(qid, "ok", {"contains": c, "f1": c / 2, "em": 0.0, "correct": c})
        for qid, c in contains.items()
    ] + [record(qid, "failed", None) for qid in failed]
    for row in rows:
        tokens, seconds = (cost or {}).get(str(row["id"]), (0, 0.0))
        row.update(prompt_tokens=tokens - tokens // 10, completion_tokens=tokens // 10, seconds=seconds)
    (folder / "results" / f"{run}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_two_folders_are_paired_on_the_questions_both_finished(tmp_path: Path) -> None:
    a = {f"q{i}": float(i % 2) for i in range(10)}  # 5 of 10 right
    b = {f"q{i}": 1.0 for i in range(1, 12)}  # q0 missing, q10 and q11 extra
    write_run(tmp_path / "before", "madke", a)
    write_run(tmp_path / "after", "madke", b, failed=("q0",))
    out = tmp_path / "paired.md"
    result = main([f"{tmp_path / 'before'}:madke", f"{tmp_path / 'after'}:madke", "--out", str(out)])
    assert result["questions"] == 9  # q1..q9: q0 failed in B, q10 and q11 are not in A
    c = result["metrics"]["contains"]
    shared = [f"q{i}" for i in range(1, 10)]
    ci = paired_bootstrap([a[i] for i in shared], [b[i] for i in shared])
    assert (c["a"], c["b"]) == (pytest.approx(5 / 9), 1.0)
    assert (c["diff"], c["low"], c["high"]) == (pytest.approx(ci.diff), ci.low, ci.high)
    assert (c["b_better"], c["a_better"]) == (4, 0)
    assert result["metrics"]["em"]["diff"] == 0.0  # every answer scored 0 on exact match, on both sides
    assert "| contains | 55.6 | 100.0 | +44.4 |" in out.read_text()
    assert json.loads(out.with_suffix(".json").read_text())["questions"] == 9
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    assert "![B − A per metric](paired.png)" in out.read_text()


def test_a_run_that_is_not_there_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"results/madke\.jsonl does not exist"):
        main([f"{tmp_path}:madke", f"{tmp_path}:rag"])
    with pytest.raises(SystemExit, match="is not FOLDER:RUN"):
        main(["reports/evidence", f"{tmp_path}:rag"])


def test_a_range_of_questions_is_paired_alone(tmp_path: Path) -> None:
    a = {f"q{i}": 0.0 for i in range(10)}
    b = {f"q{i}": float(i >= 6) for i in range(10)}  # B better on q6..q9 only
    write_run(tmp_path / "a", "madke", a)
    write_run(tmp_path / "b", "madke", b)
    out = tmp_path / "late.md"
    late = main(
        [f"{tmp_path / 'a'}:madke", f"{tmp_path / 'b'}:madke", "--questions", "6:", "--out", str(out)]
    )
    assert late["questions"] == 4 and late["metrics"]["contains"]["diff"] == 1.0
    early = main([f"{tmp_path / 'a'}:madke", f"{tmp_path / 'b'}:madke", "--questions", ":6"])
    assert early["questions"] == 6 and early["metrics"]["contains"]["diff"] == 0.0
    assert "among the dataset's questions 6:" in out.read_text()
    assert json.loads(out.with_suffix(".json").read_text())["questions_range"] == "6:"
    for bad in ("6", "x:9", "5:5", "-1:3"):
        with pytest.raises(SystemExit, match="--questions"):
            main([f"{tmp_path / 'a'}:madke", f"{tmp_path / 'b'}:madke", f"--questions={bad}"])
    # A malformed range is refused before either run is read.
    with pytest.raises(SystemExit, match="--questions"):
        main([f"{tmp_path}:missing", f"{tmp_path}:missing", "--questions=9:3"])


def test_cost_is_compared_on_the_questions_both_answered(tmp_path: Path) -> None:
    """Tokens and seconds per question of each run over the same questions: a question only one run
    answered (q2 failed in B, q3 missing from A) would tilt either side's average."""
    write_run(tmp_path / "a", "madke", {"q0": 1.0, "q1": 0.0, "q2": 1.0},
              cost={"q0": (100, 10.0), "q1": (300, 30.0), "q2": (9000, 900.0)})  # fmt: skip
    write_run(tmp_path / "b", "madke", {"q0": 1.0, "q1": 1.0, "q3": 1.0}, failed=("q2",),
              cost={"q0": (250, 20.0), "q1": (550, 40.0), "q3": (9000, 900.0)})  # fmt: skip
    out = tmp_path / "cost.md"
    result = main([f"{tmp_path / 'a'}:madke", f"{tmp_path / 'b'}:madke", "--out", str(out)])
    cost = result["cost"]
    assert (cost["tokens"]["a"], cost["tokens"]["b"], cost["tokens"]["ratio"]) == (200.0, 400.0, 2.0)
    assert (cost["seconds"]["a"], cost["seconds"]["b"], cost["seconds"]["ratio"]) == (20.0, 30.0, 1.5)
    assert "tokens per question 200 (A) and 400 (B), 2.00×" in out.read_text()

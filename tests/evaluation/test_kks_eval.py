"""KKS puzzles through the harness: the protocols engineer's generator writes the dataset, the harness
loads it with its ``kks`` loader and scores Strict/Smooth (Wu et al.)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluation.harness import EvalRequest, evaluate
from tests.evaluation.conftest import models_for
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.integration


async def test_kks_strict_and_smooth_end_to_end(tmp_path: Path) -> None:
    generator = pytest.importorskip("evaluation.kks.generator")
    puzzles = list(generator.generate_dataset([3], per_size=2, seed=11))
    records = [p.record() for p in puzzles]
    # The second record has no question: the loader phrases it with the KKS package's puzzle_question.
    del records[1]["question"]
    data = tmp_path / "kks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    first, second = puzzles
    wrong = dict(second.solution)
    flipped = second.players[0]
    wrong[flipped] = "knave" if wrong[flipped] != "knave" else "knight"

    def reply(body: dict[str, Any]) -> str:
        text = request_text(body)
        sol = first.solution if records[0]["game"] in text else wrong
        return "Reasoning...\nAnswer: [" + ", ".join(f"{p}: {r}" for p, r in sol.items()) + "]"

    with ScriptedLLM() as llm:
        llm.on(lambda body: True, reply)
        outcome = await evaluate(
            EvalRequest(
                dataset=data, out=tmp_path / "out", protocols=["single"], progress=False, plots=False
            ),
            models=models_for(llm.base_url),
        )
    assert outcome.dataset.format == "kks"
    assert outcome.dataset.items[1].question.startswith("Knight-Knave-Spy game.")
    run = outcome.report["runs"][0]
    assert run["kks_strict"] == pytest.approx(0.5)
    assert run["kks_smooth"] == pytest.approx((1 + 2 / 3) / 2)
    assert run["accuracy"] == pytest.approx(0.5)  # KKS accuracy is Strict
    assert "KKS strict" in (tmp_path / "out" / "report.md").read_text()

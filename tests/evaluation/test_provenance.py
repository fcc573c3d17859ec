"""An evaluation folder keeps each invocation's provenance; the report prints the latest and warns
when invocations differ in the model (or the code, the lock, the index); paired results across two
folders warn the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.paired_results import main as paired_main
from evaluation.harness import EvalRequest, evaluate
from tests.evaluation.conftest import models_for
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration


def provenance(model_sha: str) -> dict[str, object]:
    return {
        "code": {"commit": "abc123", "lock_sha256": "f" * 64, "modified": False},
        "model": {"kind": "embedded", "model": "m", "weights_sha256": model_sha, "quantization": "Q4_K_M"},
        "index": None,
        "machine": {"machine": "x86_64", "cpus": 2},
    }


async def test_each_invocation_is_recorded_and_a_changed_model_is_flagged(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"

    async def run(sha: str, limit: int) -> None:
        request = EvalRequest(
            dataset=nq_dataset,
            out=out,
            protocols=["single"],
            limit=limit,
            progress=False,
            plots=False,
            bootstrap_samples=200,
            provenance=provenance(sha),
        )
        await evaluate(request, models=models_for(scripted.base_url))

    await run("a" * 64, 2)
    report = (out / "report.md").read_text()
    assert "## Provenance" in report and "aaaaaaaa" in report and "warning" not in report
    await run("b" * 64, 4)  # more questions, another model's weights
    lines = [json.loads(x) for x in (out / "provenance.jsonl").read_text().splitlines()]
    assert [x["model"]["weights_sha256"][0] for x in lines] == ["a", "b"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["provenance"]["differs_across_invocations"] == ["model"]
    assert "**warning**: invocations of this folder differ in model" in (out / "report.md").read_text()

    other = tmp_path / "other"
    await evaluate(
        EvalRequest(
            dataset=nq_dataset,
            out=other,
            protocols=["single"],
            progress=False,
            plots=False,
            bootstrap_samples=200,
            provenance={**provenance("b" * 64), "code": {"commit": "def456", "lock_sha256": "f" * 64}},
        ),
        models=models_for(scripted.base_url),
    )
    result = paired_main([f"{out}:single", f"{other}:single"])
    assert result["provenance_differs"] == ["code.commit"]

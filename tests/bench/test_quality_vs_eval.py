"""Pairing a speed-bench path with an eval run: only shared questions count, differences are paired."""

from __future__ import annotations

import pytest

from bench.quality_vs_eval import compare, render

pytestmark = pytest.mark.unit


def row(item_id: str, contains: float, f1: float) -> dict[str, object]:
    return {"id": item_id, "scores": {"contains": contains, "f1": f1}}


def test_compare_pairs_by_id_and_counts_who_was_right() -> None:
    path_run = {
        "path": "slots",
        "server": "llama-server",
        "items": [
            {"id": "a", "contains": 1.0, "f1": 1.0},
            {"id": "b", "contains": 0.0, "f1": 0.5},
            {"id": "c", "contains": 1.0, "f1": 1.0},
            {"id": "not-in-eval", "contains": 1.0, "f1": 1.0},
        ],
    }
    eval_rows = {"a": row("a", 0.0, 0.0), "b": row("b", 1.0, 1.0), "c": row("c", 1.0, 1.0)}
    result = compare(path_run, eval_rows)
    assert result["questions"] == 3
    assert result["contains"]["eval"] == pytest.approx(2 / 3, abs=1e-3)
    assert result["contains"]["path"] == pytest.approx(2 / 3, abs=1e-3)
    assert result["contains"]["diff"] == 0.0
    assert result["f1"]["diff"] == pytest.approx((1.0 - 0.5) / 3, abs=1e-3)
    assert (result["only_eval_right"], result["only_path_right"]) == (1, 1)
    assert result["contains"]["low"] <= 0.0 <= result["contains"]["high"]
    assert "| contains | 0.667 | 0.667 | +0.000" in render(result, "eval.jsonl")

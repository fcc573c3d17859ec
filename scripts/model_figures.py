"""The figures `parley models` shows, computed from the reports they cite, into services/llm/models.json.

    .venv/bin/python scripts/model_figures.py            # write the figures into services/llm/models.json
    .venv/bin/python scripts/model_figures.py --check    # exit 1 when the file differs from the reports

For each measured run a model names (``{"run": "madke", "report": "reports/evidence"}``) it reads
``<report>/results/<run>.jsonl`` and keeps the questions that finished: their number, the mean accuracy
under the report's primary metric (``eval.json``; each result's ``scores.correct``) with the evaluation
harness's percentile bootstrap 95 % CI (10,000 resamples, seed 0)
and the mean wall seconds of one debate (each item's own ``seconds``: a debate's time, however many ran
at once beside it). tests/services/llm/test_registry.py runs the same check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "services" / "llm" / "models.json"
SAMPLES, SEED = 10_000, 0


def figures(report: str, run: str) -> dict[str, Any]:
    """What one run's stored results say: questions, accuracy with its CI, seconds per debate."""
    sys.path.insert(0, str(ROOT))
    from evaluation.suite_report import accuracy_ci

    path = ROOT / report / "results" / f"{run}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    done = [r for r in rows if r["status"] == "ok"]
    if not done:
        raise SystemExit(f"{path}: no finished question")
    metric = json.loads((ROOT / report / "eval.json").read_text(encoding="utf-8"))["primary"]
    scores = [float(r["scores"]["correct"]) for r in done]
    accuracy, low, high = accuracy_ci(scores, samples=SAMPLES, seed=SEED)
    assert accuracy is not None
    return {
        "questions": len(done),
        "metric": metric,
        "accuracy": round(accuracy, 4),
        "accuracy_ci": [round(low, 4), round(high, 4)],
        "seconds_per_debate": round(sum(float(r["seconds"]) for r in done) / len(done), 1),
    }


def computed(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every measured entry's figures computed again from its report."""
    out = json.loads(json.dumps(data))
    for model in out["models"].values():
        for entry in model.get("measured", []):
            entry.update(figures(entry["report"], entry["run"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    data = json.loads(REGISTRY.read_text(encoding="utf-8"))
    fresh = computed(data)
    if args.check:
        if fresh != data:
            print(f"{REGISTRY.relative_to(ROOT)}: measured figures differ from the reports; run {__file__}")
            return 1
        return 0
    REGISTRY.write_text(json.dumps(fresh, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, model in fresh["models"].items():
        for m in model.get("measured", []):
            print(f"{name} {m['run']}: {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Answer quality of an embedded-speed path against an earlier evaluation run on the same questions.

The speed bench debates few questions per path (each costs minutes); this pairs a longer run of one
path (``bench.embedded_speed --paths slots --questions 40``) with a ``parley eval`` results file of
the same questions, pools and configuration, and reports contains and F1 with paired-bootstrap 95 %
intervals of the differences (path − eval run).

    .venv/bin/python -m bench.quality_vs_eval --path-run reports/embedded-speed/quality-40/slots.json \\
        --eval-results reports/styles-1.5b/results/madke-robust.jsonl \\
        --out reports/embedded-speed/quality-40/paired.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evaluation.metrics import paired_bootstrap


def compare(path_run: dict[str, Any], eval_rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Paired contains/F1 of the path's items against the eval rows with the same ids."""
    items = [r for r in path_run["items"] if r["id"] in eval_rows]
    out: dict[str, Any] = {"questions": len(items), "path": path_run["path"], "server": path_run["server"]}
    for metric in ("contains", "f1"):
        before = [float(eval_rows[r["id"]]["scores"][metric]) for r in items]
        after = [float(r[metric]) for r in items]
        ci = paired_bootstrap(before, after)
        out[metric] = {
            "eval": round(sum(before) / len(before), 3) if before else None,
            "path": round(sum(after) / len(after), 3) if after else None,
            "diff": round(ci.diff, 3),
            "low": round(ci.low, 3),
            "high": round(ci.high, 3),
        }
    out["only_eval_right"] = sum(1 for r in items if eval_rows[r["id"]]["scores"]["contains"] > r["contains"])
    out["only_path_right"] = sum(1 for r in items if r["contains"] > eval_rows[r["id"]]["scores"]["contains"])
    return out


def render(result: dict[str, Any], eval_name: str) -> str:
    lines = [
        f"{result['questions']} questions; `{result['path']}` ({result['server']}) against `{eval_name}`.",
        "",
        "| metric | eval run | path | path − eval [95 % CI] |",
        "|---|---|---|---|",
    ]
    for metric in ("contains", "f1"):
        m = result[metric]
        lines.append(
            f"| {metric} | {m['eval']:.3f} | {m['path']:.3f} | "
            f"{m['diff']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}] |"
        )
    lines += [
        "",
        f"Right only in the eval run: {result['only_eval_right']}; right only on the path: "
        f"{result['only_path_right']}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path-run", type=Path, required=True, help="a path's JSON from bench.embedded_speed")
    ap.add_argument("--eval-results", type=Path, required=True, help="a parley eval results/*.jsonl")
    ap.add_argument("--out", type=Path, required=True, help="the markdown report to write")
    args = ap.parse_args()
    rows = {}
    for line in args.eval_results.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("status") == "ok":
                rows[row["id"]] = row
    result = compare(json.loads(args.path_run.read_text()), rows)
    text = render(result, str(args.eval_results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    print(text)


if __name__ == "__main__":
    main()

"""Two evaluation runs on the same questions, from any two folders: paired differences with 95 % CIs.

``parley eval --compare`` pairs runs inside one folder; this pairs a run of one folder with a run of
another (two models, two servers, a run before and after a change), on the questions both finished.
Runs are named ``FOLDER:RUN`` (``RUN`` as in ``FOLDER/results/RUN.jsonl``). Reported per metric
(contains, F1, exact match): both accuracies, B − A with the harness's paired bootstrap interval, and
on how many questions either answered better.

    .venv/bin/python -m bench.paired_results reports/evidence-pinned-slots:madke reports/evidence:madke \\
        --out reports/evidence/paired-pinned-slots.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evaluation.metrics import paired_bootstrap

METRICS = ("contains", "f1", "em")


def load_run(spec: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """``FOLDER:RUN`` → its finished results by question id."""
    folder, sep, run = spec.rpartition(":")
    if not sep or not folder or not run:
        raise SystemExit(f"{spec!r} is not FOLDER:RUN")
    path = Path(folder) / "results" / f"{run}.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} does not exist")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return spec, {r["id"]: r for r in rows if r.get("status") == "ok"}


def pair(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ids = [i for i in a if i in b]
    out: dict[str, Any] = {"questions": len(ids), "metrics": {}}
    for metric in METRICS:
        xa = [float(a[i]["scores"][metric] or 0.0) for i in ids]
        xb = [float(b[i]["scores"][metric] or 0.0) for i in ids]
        ci = paired_bootstrap(xa, xb)
        out["metrics"][metric] = {
            "a": sum(xa) / len(ids) if ids else 0.0,
            "b": sum(xb) / len(ids) if ids else 0.0,
            "diff": ci.diff,
            "low": ci.low,
            "high": ci.high,
            "b_better": sum(1 for p, q in zip(xa, xb, strict=True) if q > p),
            "a_better": sum(1 for p, q in zip(xa, xb, strict=True) if p > q),
        }
    return out


def markdown(a: str, b: str, result: dict[str, Any]) -> str:
    lines = [
        f"# {b} against {a}",
        "",
        f"{result['questions']} questions both runs finished; 95 % intervals by paired bootstrap over them "
        "(an interval that contains 0 means the difference may be noise).",
        "",
        "| metric | A | B | B − A (points) | 95 % CI | B better | A better |",
        "|---|---|---|---|---|---|---|",
    ]
    for metric, m in result["metrics"].items():
        lines.append(
            f"| {metric} | {100 * m['a']:.1f} | {100 * m['b']:.1f} | {100 * m['diff']:+.1f} | "
            f"[{100 * m['low']:+.1f}, {100 * m['high']:+.1f}] | {m['b_better']} | {m['a_better']} |"
        )
    lines += ["", f"A: `{a}`; B: `{b}`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="FOLDER:RUN, the reference")
    p.add_argument("b", help="FOLDER:RUN, compared with it")
    p.add_argument("--out", type=Path, help="write the table here too (.md; a .json beside it)")
    args = p.parse_args(argv)
    name_a, a = load_run(args.a)
    name_b, b = load_run(args.b)
    result = pair(a, b)
    text = markdown(name_a, name_b, result)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(
            json.dumps({"a": name_a, "b": name_b, **result}, indent=1) + "\n", encoding="utf-8"
        )
    return result


if __name__ == "__main__":
    main()

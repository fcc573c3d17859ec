"""Two evaluation runs on the same questions, from any two folders: paired differences with 95 % CIs.

``parley eval --compare`` pairs runs inside one folder; this pairs a run of one folder with a run of
another (two models, two servers, a run before and after a change), on the questions both finished.
Runs are named ``FOLDER:RUN`` (``RUN`` as in ``FOLDER/results/RUN.jsonl``). Reported per metric
(strict contains, contains, F1, exact match): both accuracies, B − A with the harness's paired bootstrap
interval, and on how many questions either answered better.

    .venv/bin/python -m bench.paired_results reports/evidence-pinned-slots:madke reports/evidence:madke \\
        --out reports/evidence/paired-pinned-slots.md

``--questions FROM:TO`` pairs only the dataset's questions FROM to TO−1 (0-based, either end may be left
out): the questions a run was extended by, say, apart from those that decided to extend it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluation.provenance import differences, provenance_summary
from evaluation.report import PairedMetric, compare_runs
from evaluation.store import ResultRecord, Workspace

METRICS: tuple[PairedMetric, ...] = ("strict_contains", "contains", "f1", "em")


def provenance_differs(a: str, b: str) -> list[str]:
    """Where the two folders' latest recorded provenance differs in what decides the answers (the code,
    the lock, the model, the index); empty when either folder recorded none."""
    pa = provenance_summary(Path(a.rpartition(":")[0]))
    pb = provenance_summary(Path(b.rpartition(":")[0]))
    if pa is None or pb is None:
        return []
    return differences(pa["latest"], pb["latest"])


def load_run(spec: str) -> dict[str, ResultRecord]:
    """``FOLDER:RUN`` → its latest result per question id, as the harness reads them."""
    folder, sep, run = spec.rpartition(":")
    if not sep or not folder or not run:
        raise SystemExit(f"{spec!r} is not FOLDER:RUN")
    workspace = Workspace(Path(folder))
    if not workspace.results_path(run).exists():
        raise SystemExit(f"{workspace.results_path(run)} does not exist")
    return workspace.load_results(run)


def parse_range(text: str) -> range:
    """``FROM:TO`` (0-based, TO excluded, either end may be empty) → the dataset indices it names."""
    low, sep, high = text.partition(":")
    try:
        start, stop = int(low or 0), int(high) if high else sys.maxsize
    except ValueError:
        raise SystemExit(
            f"--questions {text!r}: give FROM:TO, two whole numbers (either may be left out)"
        ) from None
    if not sep or start < 0 or stop <= start:
        raise SystemExit(f"--questions {text!r}: give FROM:TO with 0 <= FROM < TO")
    return range(start, stop)


def within(run: dict[str, ResultRecord], indices: range) -> dict[str, ResultRecord]:
    """The run's results on the dataset questions ``indices``."""
    return {qid: r for qid, r in run.items() if r.index in indices}


def pair(a: dict[str, ResultRecord], b: dict[str, ResultRecord]) -> dict[str, Any]:
    """The harness's paired comparison (``compare_runs``: questions both finished, bootstrap, who
    answered better) for each metric."""
    out: dict[str, Any] = {"questions": 0, "metrics": {}}
    for metric in METRICS:
        c = compare_runs("A", "B", {"A": a, "B": b}, list(a), samples=10_000, seed=0, metric=metric)
        out["questions"] = c["n"]
        out["metrics"][metric] = {
            "a": c["accuracy_a"] or 0.0,
            "b": c["accuracy_b"] or 0.0,
            "diff": c["diff"],
            "low": c["ci_low"],
            "high": c["ci_high"],
            "b_better": c["b_better"],
            "a_better": c["a_better"],
        }
    out["cost"] = cost(a, b)
    return out


def cost(a: dict[str, ResultRecord], b: dict[str, ResultRecord]) -> dict[str, Any]:
    """Tokens per question and seconds per debate of each run, on the questions both answered (the
    runs' own reports average over what each finished, which need not be the same questions)."""
    ids = [i for i in a if i in b and a[i].status == "ok" and b[i].status == "ok"]
    if not ids:
        return {}

    measures: dict[str, Callable[[ResultRecord], float]] = {
        "tokens": lambda r: r.prompt_tokens + r.completion_tokens,
        "seconds": lambda r: r.seconds,
    }
    out: dict[str, Any] = {}
    for name, measure in measures.items():
        ta, tb = (sum(measure(run[i]) for i in ids) / len(ids) for run in (a, b))
        out[name] = {"a": ta, "b": tb, "ratio": tb / ta if ta else None}
    return out


def markdown(a: str, b: str, result: dict[str, Any], questions: str | None = None) -> str:
    scope = f" among the dataset's questions {questions} (0-based, end excluded)" if questions else ""
    lines = [
        f"# {b} against {a}",
        "",
        f"{result['questions']} questions both runs finished{scope}; 95 % intervals by paired "
        "bootstrap over them (an interval that contains 0 means the difference may be noise).",
        "",
        "| metric | A | B | B − A (points) | 95 % CI | B better | A better |",
        "|---|---|---|---|---|---|---|",
    ]
    for metric, m in result["metrics"].items():
        lines.append(
            f"| {metric} | {100 * m['a']:.1f} | {100 * m['b']:.1f} | {100 * m['diff']:+.1f} | "
            f"[{100 * m['low']:+.1f}, {100 * m['high']:+.1f}] | {m['b_better']} | {m['a_better']} |"
        )
    c = result.get("cost") or {}
    if c and c["tokens"]["ratio"] is not None and c["seconds"]["ratio"] is not None:
        lines += [
            "",
            f"On the same questions: tokens per question {c['tokens']['a']:,.0f} (A) and "
            f"{c['tokens']['b']:,.0f} (B), {c['tokens']['ratio']:.2f}×; seconds per debate "
            f"{c['seconds']['a']:.1f} and {c['seconds']['b']:.1f}, {c['seconds']['ratio']:.2f}× (wall time "
            "of each debate as its run measured it: two runs made at other times met other loads).",
        ]
    lines += ["", f"A: `{a}`; B: `{b}`.", ""]
    if result.get("provenance_differs"):
        lines += [
            f"**Warning**: the two folders' provenance differs in {', '.join(result['provenance_differs'])}; "
            "the difference may come from that as well as from the runs' settings.",
            "",
        ]
    return "\n".join(lines)


def plot(a: str, b: str, result: dict[str, Any], path: Path) -> Path:
    """Each metric's B − A with its 95 % interval, against the zero line (an interval across it: may be
    noise)."""
    from bench.harness.plots import figure, save  # lazy: matplotlib only when a PNG is asked for

    fig, ax = figure((6, 3.2))
    names = list(result["metrics"])
    ys = range(len(names))
    for y, name in zip(ys, names, strict=True):
        m = result["metrics"][name]
        ax.errorbar(
            100 * m["diff"],
            y,
            xerr=[[100 * (m["diff"] - m["low"])], [100 * (m["high"] - m["diff"])]],
            fmt="o",
            capsize=4,
            color="tab:blue" if m["low"] > 0 or m["high"] < 0 else "tab:gray",
        )
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xlabel("B − A, points (95 % paired bootstrap CI)")
    ax.set_title(f"{b.rpartition('/')[2]} against {a.rpartition('/')[2]}, {result['questions']} questions")
    ax.grid(axis="x", alpha=0.3)
    return save(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="FOLDER:RUN, the reference")
    p.add_argument("b", help="FOLDER:RUN, compared with it")
    p.add_argument(
        "--out", type=Path, help="write the table here too (.md; a .json and a .png plot beside it)"
    )
    p.add_argument("--questions", metavar="FROM:TO", help="only the dataset's questions FROM..TO-1 (0-based)")
    args = p.parse_args(argv)
    indices = parse_range(args.questions) if args.questions else None  # a typo fails before any read
    a, b = load_run(args.a), load_run(args.b)
    if indices is not None:
        a, b = within(a, indices), within(b, indices)
    result = pair(a, b)
    result["provenance_differs"] = provenance_differs(args.a, args.b)
    text = markdown(args.a, args.b, result, args.questions)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        png = plot(args.a, args.b, result, args.out.with_suffix(".png"))
        args.out.write_text(f"{text}\n![B − A per metric]({png.name})\n", encoding="utf-8")
        args.out.with_suffix(".json").write_text(
            json.dumps({"a": args.a, "b": args.b, "questions_range": args.questions, **result}, indent=1)
            + "\n",
            encoding="utf-8",
        )
    return result


if __name__ == "__main__":
    main()

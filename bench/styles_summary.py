"""The prompt-style benchmark across models: one table, the targets checked, one plot.

Reads the ``metrics.json`` that ``parley eval`` wrote for each model (see the README's "Choosing the
embedded default" for the eval commands) and writes ``summary.md`` and ``accuracy.png`` under ``--out``:
per run accuracy (the primary metric), contains, EM, F1, answer-shape shares, parse errors per role,
valid selections, judge/rule agreement, calls, tokens and seconds per question; madke-robust minus each
other run with its paired-bootstrap 95 % CI; and each style target with PASS/MISS. Where a folder holds a
``replay/replay.json`` from ``bench.final_step_replay``, the targets are also checked on the replayed
final steps (recorded debates, current parser and summarizer).

    .venv/bin/python -m bench.styles_summary 0.5B=reports/styles-0.5b 1.5B=reports/styles-1.5b \
        --out reports/styles-summary
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.harness.plots import figure, save

ANSWER_SHAPES = ("bare_number", "example_copy", "placeholder")
MAX_PARSE_ERROR_RATE = 0.02
MIN_VALID_SELECTION = 0.98


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def load(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "metrics.json").read_text(encoding="utf-8"))


def robust_minus(metrics: dict[str, Any]) -> list[tuple[str, int, float, float, float]]:
    """madke-robust minus each run it was compared with: (other, n, diff, low, high), in points."""
    rows = []
    seen: set[frozenset[str]] = set()
    for c in metrics["comparisons"]:
        pair = frozenset((c["a"], c["b"]))
        if pair in seen:  # the first-vs-each pairs and --compare can name the same pair
            continue
        seen.add(pair)
        if c["a"] == "madke-robust":  # the report gives B − A; the target is stated as madke-robust − B
            rows.append((c["b"], c["n"], -100 * c["diff"], -100 * c["ci_high"], -100 * c["ci_low"]))
        elif c["b"] == "madke-robust":
            rows.append((c["a"], c["n"], 100 * c["diff"], 100 * c["ci_low"], 100 * c["ci_high"]))
    return rows


def load_replay(folder: Path) -> dict[str, dict[str, Any]] | None:
    path = folder / "replay" / "replay.json"
    if not path.exists():
        return None
    return {r["label"]: r for r in json.loads(path.read_text(encoding="utf-8"))}


def replayed(
    runs: dict[str, dict[str, Any]], replay: dict[str, dict[str, Any]], primary: str
) -> dict[str, Any]:
    """``runs`` with the replayed runs' answer shares, parse errors and accuracy put in."""
    out = {label: dict(r) for label, r in runs.items()}
    for label, rep in replay.items():
        if label not in out or not rep["items"]:
            continue
        run = out[label]
        run["answers"] = {**run["answers"], **rep["answers_replay"]}
        errors = dict(run["parse_errors"])
        for role, e in rep["errors_replay"].items():
            errors[role] = {**e, "rate": e["errors"] / e["records"] if e["records"] else 0.0}
        run["parse_errors"] = errors
        if primary in rep["replay"]:
            run["accuracy"] = rep["replay"][primary] / rep["items"]
    return out


def targets(model: str, runs: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for the robust runs of one model."""
    out: list[tuple[str, str, bool]] = []
    robust = {label: r for label, r in runs.items() if r["prompt_style"] == "robust" and r["ok"]}
    for label, r in robust.items():
        shapes = {k: r["answers"].get(k, 0.0) for k in ANSWER_SHAPES}
        worst = max(shapes, key=lambda k: shapes[k])
        out.append(
            (
                f"{model} {label}: bare-number, example-copy, placeholder answers 0 %",
                ", ".join(f"{k} {pct(v)} %" for k, v in shapes.items()),
                shapes[worst] == 0.0,
            )
        )
        for role, pe in r["parse_errors"].items():
            out.append(
                (
                    f"{model} {label}: {role} parse errors < 2 %",
                    f"{pe['errors']}/{pe['records']} = {pct(pe['rate'])} %",
                    pe["rate"] < MAX_PARSE_ERROR_RATE,
                )
            )
        share = (r.get("selection") or {}).get("valid_selection_share")
        if share is not None:
            out.append(
                (f"{model} {label}: valid selections ≥ 98 %", f"{pct(share)} %", share >= MIN_VALID_SELECTION)
            )
    if "madke-robust" in robust and "single-robust" in robust:
        m, s = robust["madke-robust"]["accuracy"], robust["single-robust"]["accuracy"]
        out.append((f"{model}: madke-robust ≥ single-robust", f"{pct(m)} % vs {pct(s)} %", m >= s))
    return out


def table(models: dict[str, dict[str, Any]]) -> list[str]:
    head = (
        "| model | run | n ok | accuracy % | contains % | EM % | F1 % | bare-number % | example-copy % | "
        "placeholder % | valid selections % | judge = rule % | parse errors (errors/records per role) | "
        "rounds | calls/q | tokens/q | s/q |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for model, metrics in models.items():
        for r in metrics["runs"]:
            sel = (r.get("selection") or {}).get("valid_selection_share")
            agree = (r.get("judge_rule") or {}).get("agreement")
            errors = ", ".join(
                f"{role} {pe['errors']}/{pe['records']}" for role, pe in r["parse_errors"].items()
            )
            shapes = " | ".join(pct(r["answers"].get(k)) for k in ANSWER_SHAPES)
            cost = (
                f"{r['avg_rounds']:.2f} | {r['calls_per_q']:.1f} | "
                f"{r['tokens_per_q']:.0f} | {r['seconds_per_q']:.1f}"
            )
            lines.append(
                f"| {model} | {r['label']} | {r['ok']} | {pct(r['accuracy'])} | {pct(r['contains'])} | "
                f"{pct(r['em'])} | {pct(r['f1'])} | {shapes} | {pct(sel)} | {pct(agree)} | {errors} | "
                f"{cost} |"
            )
    return lines


def plot(models: dict[str, dict[str, Any]], path: Path) -> None:
    labels = list(dict.fromkeys(r["label"] for m in models.values() for r in m["runs"]))
    width = 0.8 / max(1, len(models))
    fig, ax = figure((max(6.0, 1.1 * len(labels)), 4.0))
    for i, (model, metrics) in enumerate(models.items()):
        by_label = {r["label"]: r for r in metrics["runs"]}
        xs = [j + (i - (len(models) - 1) / 2) * width for j in range(len(labels))]
        ys = [100 * (by_label[lab]["accuracy"] or 0.0) if lab in by_label else 0.0 for lab in labels]
        bars = ax.bar(xs, ys, width, label=model)
        for bar, lab in zip(bars, labels, strict=True):
            n = by_label[lab]["ok"] if lab in by_label else 0
            ax.annotate(
                f"n={n}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.set_xticks(range(len(labels)), labels, rotation=20)
    metric = " / ".join(dict.fromkeys(m["primary"] for m in models.values()))
    ax.set_ylabel(f"accuracy ({metric}) %")
    ax.set_title(f"NQ-open dev: accuracy ({metric}) by run and model")
    ax.legend()
    save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="+", help="MODEL=FOLDER, a parley eval output per model")
    parser.add_argument("--out", type=Path, default=Path("reports/styles-summary"))
    args = parser.parse_args()
    models: dict[str, dict[str, Any]] = {}
    folders: dict[str, Path] = {}
    for spec in args.folders:
        model, _, folder = spec.partition("=")
        folders[model] = Path(folder)
        models[model] = load(folders[model])
    lines = ["# Prompt styles × models", ""]
    for model, m in models.items():
        lines.append(f"- {model}: `{m['dataset']}`, {m['items']} items, accuracy = {m['primary']}")
    lines += ["", *table(models), "", "## madke-robust minus … (paired bootstrap 95 % CI, points)", ""]
    lines += ["| model | minus | n | difference | 95 % CI |", "|---|---|---|---|---|"]
    for model, m in models.items():
        for other, n, diff, low, high in robust_minus(m):
            lines.append(f"| {model} | {other} | {n} | {diff:+.1f} | [{low:+.1f}, {high:+.1f}] |")
    lines += ["", "## Targets", ""]
    replays = {model: load_replay(folders[model]) for model in models}
    has_replay = any(replays.values())
    if has_replay:
        lines += [
            "Replay: the recorded debates' final steps re-derived with the current parser and summarizer "
            "(`python -m bench.final_step_replay`, `replay/replay.md` in each folder).",
            "",
            "| target | recorded | met | replay | met |",
            "|---|---|---|---|---|",
        ]
    else:
        lines += ["| target | measured | met |", "|---|---|---|"]
    for model, m in models.items():
        runs = {r["label"]: r for r in m["runs"]}
        replay = replays[model]
        after = targets(model, replayed(runs, replay, m["primary"])) if replay else None
        for i, (name, measured, met) in enumerate(targets(model, runs)):
            row = f"| {name} | {measured} | {'PASS' if met else 'MISS'} |"
            if has_replay:
                if after is None:
                    row += " – | – |"
                else:
                    row += f" {after[i][1]} | {'PASS' if after[i][2] else 'MISS'} |"
            lines.append(row)
        for label, rep in (replay or {}).items():
            role = rep.get("summarizer_role") or {}
            if role.get("records"):
                rate = role["errors"] / role["records"]
                lines.append(
                    f"| {model} {label}: summarizer parse errors < 2 %, asked on every recorded final round "
                    f"whose answers differ (diverging items included) | – | – | "
                    f"{role['errors']}/{role['records']} = {pct(rate)} % | "
                    f"{'PASS' if rate < MAX_PARSE_ERROR_RATE else 'MISS'} |"
                )
    args.out.mkdir(parents=True, exist_ok=True)
    plot(models, args.out / "accuracy.png")
    lines += ["", "![accuracy by run and model](accuracy.png)", ""]
    (args.out / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

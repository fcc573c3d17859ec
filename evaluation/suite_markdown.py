"""``suite.md``: a suite's verdict, runs with their CIs, paired differences, the split by whether the
pool holds the answer, and the papers' figures, as Markdown (from ``suite_report``'s dict)."""

from __future__ import annotations

from typing import Any

from evaluation.report_markdown import fmt, paired_row


def _ci(row: dict[str, Any]) -> str:
    """``[16.0, 27.0]``, or a dash where nothing finished (no accuracy, so no interval)."""
    return "–" if row["accuracy"] is None else f"[{fmt(row['ci_low'], True)}, {fmt(row['ci_high'], True)}]"


def render_pool_answer(split: dict[str, Any] | None) -> list[str]:
    """The section on questions whose pool holds the answer and the others (``by_pool_answer``):
    where a knowledge protocol's gain comes from. Empty where no pools were built."""
    if not split or not split["questions"]:
        return []
    lines = [
        "",
        "## Accuracy when the pool holds the answer",
        "",
        f"The question's knowledge pool (the passages RAG and MADKE read) holds a gold answer string for "
        f"{split['holding']} of its {split['questions']} questions "
        f"({100 * split['holding'] / split['questions']:.1f} %). Each run's accuracy on those and on the "
        "others: a run that reads no pool shows how hard each group is without it, so what reading adds "
        "is the knowledge run's gain over it on the first group. On the second, every run answers from "
        "what the model already knows.",
        "",
        "| run | n (pool holds) | accuracy % | 95 % CI | n (pool lacks) | accuracy % | 95 % CI |",
        "|---|---|---|---|---|---|---|",
    ]

    def cells(g: dict[str, Any]) -> str:
        return f"{g['n']} | {fmt(g['accuracy'], True)} | {_ci(g)}"

    lines += [f"| {r['label']} | {cells(r['holds'])} | {cells(r['lacks'])} |" for r in split["runs"]]
    compared = [c for c in split.get("comparisons", []) if c["n"]]
    if compared:
        lines += [
            "",
            "Paired differences within each group (B − A over the questions both finished; groups chosen "
            "after the fact, so read them as a diagnosis of where the difference comes from):",
            "",
            "| pool | A | B | n | A % | B % | B better / A better | B − A (points) | 95 % CI | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [f"| {c['group']} {paired_row(c)}" for c in compared]
    return lines


def render_suite(report: dict[str, Any]) -> str:
    """The suite's Markdown report."""
    models = sorted({m for r in report["runs"] for m in r["models"]})
    lines = [
        f"# Suite `{report['suite']}`",
        "",
        f"{report['summary']}. Dataset `{report['dataset']}`; accuracy = **{report['primary']}**; "
        f"model: {', '.join(models) or '–'}. 95 % CIs by percentile bootstrap over questions "
        f"({report['bootstrap']['samples']} resamples, seed {report['bootstrap']['seed']}).",
        "",
    ]
    if report["verdict"]:
        lines += ["## Verdict", "", *[f"- {v}" for v in report["verdict"]], ""]
    if report["warnings"]:
        lines += ["**Warning: unparseable replies**", "", *[f"- {w}" for w in report["warnings"]], ""]
    lines += [
        "## Runs",
        "",
        "| run | n | failed | accuracy % | 95 % CI | tokens/q | s/q | q/h | calls/q | unparseable % "
        "| pool items | setting |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['label']} | {r['n']} | {r['failed']} | {fmt(r['accuracy'], True)} "
            f"| {_ci(r)} "
            f"| {fmt(r['tokens_per_q'], digits=0)} | {fmt(r['seconds_per_q'], digits=1)} "
            f"| {fmt(r.get('questions_per_hour'), digits=0)} | {fmt(r['calls_per_q'], digits=1)} "
            f"| {fmt(r['unparseable'], True)} | {fmt(r['pool_items'], digits=1)} "
            f"| {r['setting']} |"
        )
    lines += [
        "",
        f"## Paired differences against {report['reference']} and against {report['vote']}",
        "",
        "B − A over the questions both finished; *B better / A better* counts the questions on which one"
        " run answered better than the other (the rest tie): the difference comes from those alone. A CI"
        " that contains 0 means the difference may be noise.",
        "",
        "| A | B | n | A % | B % | B better / A better | B − A (points) | 95 % CI | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [paired_row(c, "no question finished in both") for c in report["comparisons"]]
    lines += render_pool_answer(report.get("pool_answer"))
    if report.get("plot"):
        lines += ["", f"![cost and accuracy]({report['plot']})"]
    lines += [
        "",
        "## What the papers report",
        "",
        report["literature"],
        "",
        "MADKE Table 2, NQ, F1 (their models; Parley's figure above is its own metric on its own model):",
        "",
        "| paper model | single | CoT | self-consistency | RAG | MAD (society) | MADKE |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["paper_nq_f1"]:
        lines.append(
            f"| {row['model']} | {fmt(row['single'], True)} | {fmt(row['cot'], True)} "
            f"| {fmt(row['self_consistency'], True)} | {fmt(row['rag'], True)} | {fmt(row['society'], True)} "
            f"| {fmt(row['madke'], True)} |"
        )
    return "\n".join(lines) + "\n"

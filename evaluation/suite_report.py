"""A suite's ``suite.json``: each run's accuracy with a 95 % CI, cost per question, the paired
differences against the reference and the same-budget vote, the split by whether the pool holds the
answer, the verdict in words, and what the papers report for comparison (``suite_markdown`` writes
``suite.md`` from it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.config import KNOWLEDGE_FREE
from evaluation import metrics, published
from evaluation.harness import PlanError
from evaluation.plots import cost_accuracy_plot
from evaluation.report import compare_runs, questions_per_hour, run_setting
from evaluation.report_markdown import unparseable_warnings
from evaluation.run_diagnostics import answer_passages, parse_error_rates, unparseable_share
from evaluation.same_budget import budget_label
from evaluation.store import ResultRecord, Workspace
from evaluation.suite_markdown import render_suite

if TYPE_CHECKING:
    from evaluation.suite import Suite

# Where the literature found debate and knowledge gains, repeated in every suite report.
LITERATURE = (
    "MADKE (Wang et al.) reports its gains with GPT-3.5-Turbo and Qwen1.5-32B/72B-Chat; in its "
    "§5.3 (Qwen1.5-Chat at 1.8B, 7B, 14B, 32B, 72B) retrieved knowledge did not significantly improve "
    'the debate at 1.8–14B parameters and helped from 32B on. Choi et al. ("Debate or Vote") find '
    "that most of multi-agent debate's gain is majority voting, and Wunderlich et al. measure +1.3 "
    "points for debate over self-consistency at equal compute; the gains shrink below about 7B."
)
# MADKE Table 2, NQ (Natural Questions), F1: what the paper reports for comparison.
# MADKE Table 2, NQ (Natural Questions), F1, for these models: what the paper reports for comparison.
PAPER_NQ_MODELS = ("Qwen1.5-72B-Chat", "Qwen1.5-32B-Chat", "GPT-3.5-Turbo")


def paper_nq_f1() -> list[dict[str, Any]]:
    """One row per model of ``PAPER_NQ_MODELS``: the paper's NQ F1 for each protocol of the suite
    (Parley's name → the paper's figure), read from the published figures ``published`` holds."""
    methods = {**published.BASELINE_METHODS["madke"], "madke": published.MAIN_METHOD["madke"][1]}
    rows: list[dict[str, Any]] = []
    for model in PAPER_NQ_MODELS:
        row: dict[str, Any] = {"model": model}
        for protocol, method in methods.items():
            figures = published.figures_for("madke", "nq", method)
            row[protocol] = next(f.value for f in figures if f.model == model and f.metric == "f1")
        rows.append(row)
    return rows


def accuracy_ci(values: Sequence[float], *, samples: int, seed: int) -> tuple[float | None, float, float]:
    """Mean and percentile-bootstrap 95 % CI of per-question scores (the harness's bootstrap, against
    zeros, so the interval is computed exactly as the paired differences are)."""
    if not values:
        return None, 0.0, 0.0
    ci = metrics.paired_bootstrap([0.0] * len(values), values, samples=samples, seed=seed)
    return ci.diff, ci.low, ci.high


def cost_per_question(ok: Sequence[ResultRecord]) -> dict[str, float | None]:
    """Tokens, seconds and calls per finished question (None where none finished)."""
    if not ok:
        return {"tokens_per_q": None, "seconds_per_q": None, "calls_per_q": None}
    return {
        "tokens_per_q": metrics.mean(r.prompt_tokens + r.completion_tokens for r in ok),
        "seconds_per_q": metrics.mean(r.seconds for r in ok),
        "calls_per_q": metrics.mean(r.calls for r in ok),
    }


def by_pool_answer(
    ws: Workspace,
    results: dict[str, dict[str, ResultRecord]],
    *,
    pairs: Sequence[tuple[str, str]] = (),
    samples: int,
    seed: int,
) -> dict[str, Any] | None:
    """Each run's accuracy on the questions whose knowledge pool holds a gold answer string (the
    passages RAG and MADKE read; a normalised alias on word boundaries, as ``contains`` scores) and on
    the others. Runs that read no pool show how hard the two groups are on their own, so a knowledge
    protocol's gain on the first group is read against theirs; ``pairs`` are compared (paired
    bootstrap) within each group. None where no pools were built."""
    pools = ws.load_pools()
    if not pools:
        return None
    gold = {it.id: it.answers for it in ws.load_items()}
    holds = {item_id: bool(answer_passages(pool, gold.get(item_id, []))) for item_id, pool in pools.items()}
    runs = []
    for label, recs in results.items():
        row: dict[str, Any] = {"label": label}
        for group, wanted in (("holds", True), ("lacks", False)):
            values = [r.scores.correct for r in _ok(recs) if r.scores and holds.get(r.id) is wanted]
            acc, low, high = accuracy_ci(values, samples=samples, seed=seed)
            row[group] = {"n": len(values), "accuracy": acc, "ci_low": low, "ci_high": high}
        runs.append(row)
    order = [it_id for it_id in gold if it_id in holds]
    comparisons = [
        {
            **compare_runs(
                a, b, results, [i for i in order if holds[i] is wanted], samples=samples, seed=seed
            ),
            "group": group,
        }
        for a, b in pairs
        if a in results and b in results
        for group, wanted in (("holds", True), ("lacks", False))
    ]
    return {"questions": len(holds), "holding": sum(holds.values()), "runs": runs, "comparisons": comparisons}


def _ok(results: dict[str, ResultRecord]) -> list[ResultRecord]:
    return [r for r in results.values() if r.status == "ok" and r.scores is not None]


def write_suite_report(
    ws: Workspace,
    suite: Suite,
    *,
    labels: Sequence[str],
    samples: int = 10_000,
    seed: int = 0,
    plots: bool = True,
) -> dict[str, Any]:
    """``suite.json``, ``suite.md`` and ``plots/cost_accuracy.png`` from the results in ``ws``."""
    manifest = ws.load_manifest()
    if manifest is None:
        raise PlanError(f"{ws.root} holds no evaluation")
    order = [it.id for it in ws.load_items()]
    results = {label: ws.load_results(label) for label in labels}
    vote = budget_label(suite.debate)
    runs = []
    for label in labels:
        spec = next(s for s in manifest.runs if s.label == label)
        ok = _ok(results[label])
        acc, low, high = accuracy_ci([r.scores.correct for r in ok if r.scores], samples=samples, seed=seed)
        transcripts = ws.load_transcripts(label)
        rates = parse_error_rates(transcripts.values())
        uses_pool = spec.protocol not in KNOWLEDGE_FREE and spec.config.get("knowledge") != "none"
        pools = [len(t.pool.items) for t in transcripts.values()] if uses_pool else []
        runs.append(
            {
                "label": label,
                "protocol": spec.protocol,
                "prompt_style": spec.prompt_style,
                "setting": run_setting(spec),
                "n": len(ok),
                "failed": sum(1 for r in results[label].values() if r.status == "failed"),
                "accuracy": acc,
                "ci_low": low,
                "ci_high": high,
                **cost_per_question(ok),
                "questions_per_hour": questions_per_hour(ws.load_invocations(label)),
                "unparseable": unparseable_share(rates),
                "parse_errors": rates,
                "pool_items": metrics.mean(pools) if pools else None,
                "models": sorted(
                    {rec.model for t in transcripts.values() for rec in t.transcript if rec.model}
                ),
            }
        )
    pairs = [
        (ref, label) for ref in (suite.reference, vote) if ref in results for label in labels if label != ref
    ]
    if "single" in results and suite.debate in results:
        pairs.append(("single", suite.debate))
    comparisons = [compare_runs(a, b, results, order, samples=samples, seed=seed) for a, b in pairs]
    report: dict[str, Any] = {
        "suite": suite.name,
        "summary": suite.summary,
        "dataset": manifest.dataset,
        "primary": manifest.primary,
        "reference": suite.reference,
        "vote": vote,
        "debate": suite.debate,
        "bootstrap": {"samples": samples, "seed": seed, "level": 0.95},
        "runs": runs,
        "comparisons": comparisons,
        "pool_answer": by_pool_answer(
            ws,
            results,
            # what reading adds (RAG over closed book) and what the debate does with it
            pairs=[("single", suite.reference), (suite.reference, suite.debate), ("single", suite.debate)],
            samples=samples,
            seed=seed,
        ),
        "literature": LITERATURE,
        "paper_nq_f1": paper_nq_f1(),
    }
    report["warnings"] = unparseable_warnings({"runs": runs})
    report["verdict"] = verdict(report)
    if plots and any(r["accuracy"] is not None for r in runs):
        report["plot"] = str(
            cost_accuracy_plot(report, ws.root / "plots" / "cost_accuracy.png").relative_to(ws.root)
        )
    (ws.root / "suite.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (ws.root / "suite.md").write_text(render_suite(report), encoding="utf-8")
    return report


def _diff(report: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    return next((c for c in report["comparisons"] if c["a"] == a and c["b"] == b and c["n"]), None)


def verdict(report: dict[str, Any]) -> list[str]:
    """Whether the debate beats RAG, closed-book single and the same-budget vote, said plainly."""
    debate = report["debate"]
    lines = []
    for ref, name in (
        (report["reference"], "RAG"),
        ("single", "closed-book single"),
        (report["vote"], "the same-budget vote"),
    ):
        c = _diff(report, ref, debate)
        if c is None:
            continue
        d, lo, hi, n = c["diff"], c["ci_low"], c["ci_high"], c["n"]
        if lo > 0:
            words = "beats"
        elif hi < 0:
            words = "is worse than"
        else:
            words = "is not distinguishable from"
        lines.append(
            f"{debate} {words} {name}: {100 * d:+.1f} points, 95 % CI [{100 * lo:+.1f}, {100 * hi:+.1f}] "
            f"over {n} questions"
        )
    beats = [c for ref in (report["reference"], "single") if (c := _diff(report, ref, debate)) is not None]
    if len(beats) == 2 and not all(c["ci_low"] > 0 for c in beats):
        lines.append(
            f"At this model and on these questions {debate} does not beat both RAG and closed-book single "
            "with a 95 % CI that excludes 0; the papers found the effect only with much larger models "
            "(see below)."
        )
    return lines

"""From results files to ``metrics.json``, ``report.md`` and plots: every number of one evaluation.

Accuracy-type metrics are means over the items that finished (``ok``); the report always shows how
many failed or are still pending, so a run with many failures cannot pass for a good one. Paired
bootstrap comparisons use only items that finished in both runs. The transcript diagnostics are in
``run_diagnostics``; the Markdown is written by ``report_markdown``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from engine.config import DebateConfig
from engine.result import DebateResult
from evaluation import metrics, published
from evaluation.items import Item
from evaluation.plots import write_plots
from evaluation.pool_growth import pool_growth
from evaluation.presets import MADKE, PRESETS
from evaluation.provenance import provenance_summary
from evaluation.report_markdown import render_markdown
from evaluation.run_diagnostics import (
    accuracy_by_round,
    agent_answers_by_round,
    answer_shares,
    example_answers,
    judge_rule_agreement,
    knowledge_label,
    parse_error_rates,
    selection_hits,
    selection_stats,
    unparseable_share,
)
from evaluation.scoring import PrimaryMetric
from evaluation.store import Invocation, Manifest, ResultRecord, RunSpec, Workspace
from evaluation.strict_contains import strict_contains


def questions_per_hour(invocations: Sequence[Invocation]) -> float | None:
    """Answered questions per hour of wall-clock time over the invocations that logged their work
    (throughput at the concurrency they ran with); None before any logged one."""
    wall = sum(i.wall_s for i in invocations)
    ok = sum(i.ok for i in invocations)
    return 3600 * ok / wall if wall > 0 and ok else None


def run_metrics(
    spec: RunSpec,
    items: Sequence[Item],
    results: dict[str, ResultRecord],
    transcripts: dict[str, DebateResult],
    primary: PrimaryMetric,
) -> dict[str, Any]:
    """Every number the report shows for one run."""
    ids = [it.id for it in items]
    by_id = {it.id: it for it in items}
    ok = [results[i] for i in ids if i in results and results[i].status == "ok"]
    failed = [results[i] for i in ids if i in results and results[i].status == "failed"]
    trans = {r.id: transcripts[r.id] for r in ok if r.id in transcripts}
    scores = [r.scores for r in ok if r.scores is not None]
    n = len(ok)

    def avg(values: Iterable[float]) -> float | None:
        vals = list(values)
        return sum(vals) / len(vals) if vals else None

    co2, cons = metrics.co2_cons([(bool(r.consistent), bool(r.scores and r.scores.correct >= 1)) for r in ok])
    judged = [r.judge for r in ok if r.judge is not None and not r.judge.call_failed]
    kks = [s for s in scores if s.strict is not None]
    turn_answers = [
        (a, len(res.pool.items))
        for res in trans.values()
        for per_agent in agent_answers_by_round(res.transcript).values()
        for a in per_agent.values()
    ]
    final_pool_sizes = [len(trans[r.id].pool.items) if r.id in trans else None for r in ok]
    examples = example_answers(spec.prompt_style)
    label = knowledge_label(spec.prompt_style)
    out: dict[str, Any] = {
        "label": spec.label,
        "protocol": spec.protocol,
        "prompt_style": spec.prompt_style,
        "items": len(ids),
        "ok": n,
        "failed": len(failed),
        "pending": len(ids) - n - len(failed),
        "accuracy": avg(s.correct for s in scores),
        "em": avg(s.em for s in scores),
        "f1": avg(s.f1 for s in scores),
        "contains": avg(s.contains for s in scores),
        # Results scored before the strict contains existed carry none: no figure rather than a wrong one.
        "strict_contains": avg(strict)
        if (strict := [s.strict_contains for s in scores if s.strict_contains is not None])
        else None,
        "judge_accuracy": avg(float(bool(j.verdict)) for j in judged) if judged else None,
        "judge_graded": len(judged),
        "judge_unparseable": sum(1 for j in judged if j.verdict is None),
        "co2": co2 if n else None,
        "cons": cons if n else None,
        "avg_rounds": avg(r.rounds for r in ok),
        "kks_strict": avg(s.strict for s in kks if s.strict is not None) if kks else None,
        "kks_smooth": avg(s.smooth for s in kks if s.smooth is not None) if kks else None,
        "calls_per_q": avg(r.calls for r in ok),
        "prompt_tokens_per_q": avg(r.prompt_tokens for r in ok),
        "completion_tokens_per_q": avg(r.completion_tokens for r in ok),
        "tokens_per_q": avg(r.prompt_tokens + r.completion_tokens for r in ok),
        "seconds_per_q": avg(r.seconds for r in ok),
        "answers": answer_shares([r.answer for r in ok], examples, final_pool_sizes, label),
        "turn_answers": answer_shares(
            [a for a, _ in turn_answers], examples, [s for _, s in turn_answers], label
        ),
        "example_answers": list(examples),
        "parse_errors": (rates := parse_error_rates(trans.values())),
        "unparseable": unparseable_share(rates),
        "selection": selection_stats(trans.values()),
        "selection_hits": selection_hits(trans, {r.id: r.gold for r in ok}),
        "pool_growth": pool_growth(trans, {r.id: r.gold for r in ok}),
        "degraded": degraded_steps(ok),
        "judge_rule": judge_rule_agreement(trans.values()),
        "accuracy_by_round": accuracy_by_round(by_id, trans, primary),
        "failures": [{"id": r.id, "error": r.error, "attempt": r.attempt} for r in failed],
        "models": sorted({rec.model for res in trans.values() for rec in res.transcript if rec.model}),
        "numeric": avg(s.numeric for s in scores if s.numeric is not None)
        if any(s.numeric is not None for s in scores)
        else None,
        "setting": run_setting(spec),
        "budget_of": spec.budget_of,
        "budget_tokens_per_q": avg(r.budget_tokens for r in ok if r.budget_tokens is not None)
        if spec.budget_of
        else None,
        "samples_per_q": avg(r.samples for r in ok if r.samples is not None) if spec.budget_of else None,
    }
    return out


# The per-question scores two runs can be paired on (every result has each of them).
PairedMetric = Literal["correct", "strict_contains", "contains", "f1", "em"]


def paired_score(rec: ResultRecord, metric: PairedMetric) -> float:
    """One finished result's score on ``metric``; a result scored before the strict contains existed
    gets it from its stored answer (the same function of answer, golds and question)."""
    assert rec.scores is not None
    value = getattr(rec.scores, metric)
    if value is None and metric == "strict_contains":
        value = strict_contains(rec.answer, rec.gold, rec.question)
    return float(value)


def call_cache_share(results: dict[str, dict[str, ResultRecord]]) -> dict[str, Any]:
    """How many of the folder's model calls the call cache replayed (from each finished item's counts)."""
    calls = sum(r.calls for recs in results.values() for r in recs.values() if r.status == "ok")
    replayed = sum(r.cached_calls for recs in results.values() for r in recs.values() if r.status == "ok")
    return {"calls": calls, "replayed": replayed, "share": replayed / calls if calls else None}


def compare_runs(
    a: str,
    b: str,
    results: dict[str, dict[str, ResultRecord]],
    order: Sequence[str],
    *,
    samples: int,
    seed: int,
    metric: PairedMetric = "correct",
) -> dict[str, Any]:
    """Paired bootstrap 95% CI of accuracy(b) − accuracy(a) over items finished in both runs, and how
    many of those items each run answered better (the discordant pairs the difference comes from).
    ``metric``: the score compared (``correct``, the primary metric, by default; ``strict_contains``,
    ``contains``, ``f1`` or ``em``)."""
    ra, rb = results.get(a, {}), results.get(b, {})
    va: list[float] = []
    vb: list[float] = []
    for i in order:
        sa = ra[i] if i in ra and ra[i].status == "ok" and ra[i].scores is not None else None
        sb = rb[i] if i in rb and rb[i].status == "ok" and rb[i].scores is not None else None
        if sa is not None and sb is not None:
            va.append(paired_score(sa, metric))
            vb.append(paired_score(sb, metric))
    ci = metrics.paired_bootstrap(va, vb, samples=samples, seed=seed)
    return {
        "a": a,
        "b": b,
        "metric": "accuracy" if metric == "correct" else metric,
        "n": ci.n,
        "accuracy_a": metrics.mean(va) if va else None,
        "accuracy_b": metrics.mean(vb) if vb else None,
        "diff": ci.diff,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "level": ci.level,
        "significant": ci.significant,
        "a_better": sum(1 for x, y in zip(va, vb, strict=True) if x > y),
        "b_better": sum(1 for x, y in zip(va, vb, strict=True) if y > x),
    }


def _preset(name: str | None) -> Any:
    return PRESETS.get(name) if name else None


def build_report(
    ws: Workspace,
    manifest: Manifest,
    items: Sequence[Item],
    labels: Sequence[str],
    *,
    compare: Sequence[tuple[str, str]] = (),
    samples: int = 10_000,
    seed: int = 0,
    plots: bool = True,
) -> dict[str, Any]:
    """Compute metrics for ``labels`` (in the order given), write metrics.json, report.md and plots."""
    specs = {s.label: s for s in manifest.runs}
    primary: PrimaryMetric = manifest.primary  # type: ignore[assignment]
    order = [it.id for it in items]
    all_results = {label: ws.load_results(label) for label in labels}
    runs = []
    for label in labels:
        run = run_metrics(specs[label], items, all_results[label], ws.load_transcripts(label), primary)
        runs.append({**run, "questions_per_hour": questions_per_hour(ws.load_invocations(label))})
    pairs: list[tuple[str, str]] = [(labels[0], other) for other in labels[1:]]
    for pair in compare:
        if pair not in pairs:
            pairs.append(pair)
    comparisons = [compare_runs(a, b, all_results, order, samples=samples, seed=seed) for a, b in pairs]
    preset = _preset(manifest.preset)
    report: dict[str, Any] = {
        "dataset": manifest.dataset,
        "format": manifest.format,
        "preset": manifest.preset,
        "preset_source": preset.source if preset else None,
        "preset_deviations": list(preset.deviations) if preset else [],
        "benchmark": manifest.benchmark,
        "pool_source": manifest.pool_source,
        "pool_items_dropped": manifest.pool_items_dropped,
        "items": len(items),
        "primary": manifest.primary,
        "judge_model": manifest.judge_model,
        "dataset_problems": manifest.problems,
        "provenance": provenance_summary(ws.root),
        "call_cache": call_cache_share(all_results),
        "sampling_seeds": {label: specs[label].config.get("seed") for label in labels},
        "bootstrap": {"samples": samples, "seed": seed, "level": 0.95},
        "runs": runs,
        "comparisons": comparisons,
        "configs": {label: specs[label].config for label in labels},
        "published": published.comparison_rows(
            manifest.preset,
            manifest.benchmark,
            [r for r in runs if not r["budget_of"]],
            {r["label"]: r["models"] for r in runs},
        ),
    }
    (ws.root / "metrics.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    if plots:
        report["plots"] = [str(p.relative_to(ws.root)) for p in write_plots(report, ws.root / "plots")]
        (ws.root / "metrics.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (ws.root / "report.md").write_text(render_markdown(report), encoding="utf-8")
    return report


def degraded_steps(ok: Sequence[ResultRecord]) -> dict[str, Any]:
    """How many debates had a degraded step, and the steps by kind (the reason without its round)."""
    kinds: dict[str, int] = {}
    for rec in ok:
        for line in rec.degraded:
            _, _, reason = line.partition(": ")
            kind = "fallback endpoint" if "fallback" in reason else reason.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"debates": sum(1 for rec in ok if rec.degraded), "steps": dict(sorted(kinds.items()))}


def run_setting(spec: RunSpec) -> str:
    """Which setting a run used, in words: for MADKE, the paper's published setting (MADKE §4.4 and
    Prompt 3.1: the ``madke`` preset) or each value that differs from it; for the others, the style."""
    cfg = spec.config
    if spec.budget_of:
        return f"self-consistency given {spec.budget_of}'s tokens per question, {spec.prompt_style} prompts"
    if spec.protocol != "madke":
        return f"{spec.prompt_style} prompts"
    paper = MADKE.config
    keys = ("agents", "rounds", "temperature", "k_wiki", "k_web", "selection", "max_selected", "prompt_style")
    differs = [f"{k}={cfg.get(k)} (the paper: {paper[k]})" for k in keys if cfg.get(k) != paper[k]]
    # judge=auto is the LLM judge with the paper's prompts: compare what the debate will do
    judge = DebateConfig.model_validate(cfg).judge_mode
    if judge != paper["judge"]:
        differs.append(f"judge={cfg.get('judge')}→{judge} (the paper: {paper['judge']})")
    if not differs:
        return (
            "the paper's (MADKE §4.4: 2 agents, ≤3 rounds, T=0.5, 5 Wikipedia + 5 web items, ≤3 selected "
            "with Prompt 3.1, the paper's prompts, LLM judge)"
        )
    return "Parley's: " + ", ".join(differs)

"""From results files to ``metrics.json``, ``report.md`` and plots.

Accuracy-type metrics are means over the items that finished (``ok``); the report always shows how
many failed or are still pending, so a run with many failures cannot pass for a good one. Paired
bootstrap comparisons use only items that finished in both runs.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from engine.config import DebateConfig
from engine.prompts import PromptSet, get_prompts, paper
from engine.registry import answer_roles
from engine.result import DebateResult, TranscriptRecord
from evaluation import metrics, published
from evaluation.datasets import Item
from evaluation.scoring import PrimaryMetric, is_correct
from evaluation.store import Invocation, Manifest, ResultRecord, RunSpec, Workspace
from services.knowledge import KnowledgePool

# Roles whose records carry an agent's own answer to the question (not a selection, verdict or vote),
# as the protocol registry declares them: a role no protocol declares is not counted as an answer.
ANSWER_ROLES = answer_roles()


def _style(style: str) -> PromptSet:
    """The style's prompt set; the paper's for a style this version does not know (an old report)."""
    try:
        return get_prompts(style)
    except ValueError:
        return paper


def knowledge_label(style: str) -> re.Pattern[str]:
    """How an answer that is only a knowledge item's label looks in ``style``."""
    return _style(style).KNOWLEDGE_LABEL


def example_answers(style: str) -> tuple[str, ...]:
    """The example answers ``style``'s prompts show (an answer copying one is flagged)."""
    return tuple(str(a) for a in _style(style).EXAMPLE_ANSWERS)


def _share(flags: Iterable[bool]) -> float | None:
    vals = list(flags)
    return sum(vals) / len(vals) if vals else None


def answer_shares(
    answers: Sequence[str | None],
    examples: Sequence[str],
    pool_sizes: Sequence[int | None] | None = None,
    label: re.Pattern[str] = paper.KNOWLEDGE_LABEL,
) -> dict[str, float | None]:
    """Shares of bare-number, example-copy and placeholder answers: the failure modes of small models.

    ``pool_sizes`` (one per answer) lets a bare number count only when it names a pool item."""
    sizes = list(pool_sizes) if pool_sizes is not None else [None] * len(answers)
    return {
        "bare_number": _share(
            metrics.is_bare_number(a, s, label) for a, s in zip(answers, sizes, strict=True)
        ),
        "example_copy": _share(metrics.is_example_copy(a, examples) for a in answers),
        "placeholder": _share(metrics.is_placeholder(a) for a in answers),
        # The part of "placeholder" where the parser found no answer at all (None).
        "no_answer": _share(a is None for a in answers),
    }


def agent_answers_by_round(transcript: Sequence[TranscriptRecord]) -> dict[int, dict[int, str | None]]:
    """round → agent → that agent's (last) answer in the round."""
    out: dict[int, dict[int, str | None]] = defaultdict(dict)
    for rec in transcript:
        if rec.role not in ANSWER_ROLES or rec.agent is None or rec.round < 1:
            continue
        out[rec.round][rec.agent] = rec.answer
    return dict(out)


def accuracy_by_round(
    items: dict[str, Item], transcripts: dict[str, DebateResult], primary: PrimaryMetric
) -> list[float]:
    """Mean share of agents with a correct answer after each round.

    A debate that stopped early keeps its last round's answers for the later rounds (its answer is
    final), so every point averages over the same questions.
    """
    per_item: list[list[float]] = []
    for item_id, result in transcripts.items():
        item = items.get(item_id)
        if item is None:
            continue
        rounds = agent_answers_by_round(result.transcript)
        if not rounds:
            continue
        curve = []
        for r in sorted(rounds):
            answers = list(rounds[r].values())
            curve.append(sum(is_correct(item, a, primary) for a in answers) / len(answers))
        per_item.append(curve)
    if not per_item:
        return []
    depth = max(len(c) for c in per_item)
    padded = [c + [c[-1]] * (depth - len(c)) for c in per_item]
    return [sum(c[r] for c in padded) / len(padded) for r in range(depth)]


def questions_per_hour(invocations: Sequence[Invocation]) -> float | None:
    """Answered questions per hour of wall-clock time over the invocations that logged their work
    (throughput at the concurrency they ran with); None before any logged one."""
    wall = sum(i.wall_s for i in invocations)
    ok = sum(i.ok for i in invocations)
    return 3600 * ok / wall if wall > 0 and ok else None


def answer_passages(pool: KnowledgePool, gold: Sequence[str]) -> set[int]:
    """Numbers of the pool's passages that hold a gold answer string (a normalised alias on word
    boundaries, as ``contains`` scores an answer)."""
    return {it.n for it in pool.items if metrics.contains_match(it.text, gold)}


def selection_hits(transcripts: dict[str, DebateResult], gold: dict[str, list[str]]) -> dict[str, Any]:
    """How often a selection step picked a passage that holds a gold answer string, over the steps
    whose pool holds one (a normalised alias on word boundaries, as ``contains`` scores): the share of
    the answer that selection lets through to the agent, whatever the agent then makes of it."""
    steps = hits = 0
    for item_id, result in transcripts.items():
        holding = answer_passages(result.pool, gold.get(item_id, []))
        if not holding:
            continue
        for rec in result.transcript:
            if rec.role == "select":
                steps += 1
                hits += bool(holding.intersection(rec.selected or []))
    return {"steps": steps, "share": hits / steps if steps else None}


def selection_stats(transcripts: Iterable[DebateResult]) -> dict[str, Any]:
    """Selection behaviour: [No Found] share, items chosen per agent and round, sources chosen."""
    steps = 0
    no_found = 0
    valid = 0
    per_slot: dict[str, list[int]] = defaultdict(list)
    sources: Counter[str] = Counter()
    for result in transcripts:
        by_n = result.pool.by_number()
        for rec in result.transcript:
            if rec.role != "select":
                continue
            steps += 1
            no_found += bool(rec.no_found)
            valid += rec.parse_error is None
            chosen = rec.selected or []
            per_slot[f"r{rec.round}a{rec.agent if rec.agent is not None else 0}"].append(len(chosen))
            for n in chosen:
                item = by_n.get(n)
                sources[item.source if item is not None else "unknown"] += 1
    return {
        "steps": steps,
        "no_found_share": no_found / steps if steps else None,
        "valid_selection_share": valid / steps if steps else None,
        "mean_selected": {k: sum(v) / len(v) for k, v in sorted(per_slot.items())},
        "sources": dict(sources),
    }


def parse_error_rates(transcripts: Iterable[DebateResult]) -> dict[str, dict[str, float]]:
    """Per role: records, records with a parse_error, and their ratio."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for result in transcripts:
        for rec in result.transcript:
            counts[rec.role][0] += 1
            counts[rec.role][1] += rec.parse_error is not None
    return {
        role: {"records": n, "errors": e, "rate": e / n if n else 0.0}
        for role, (n, e) in sorted(counts.items())
    }


def judge_rule_agreement(transcripts: Iterable[DebateResult]) -> dict[str, Any]:
    """How often the LLM judge's verdict equals the rule check (all answers agree after normalisation)."""
    n = agree = 0
    for result in transcripts:
        for rec in result.transcript:
            if rec.role != "judge" or "rule_verdict" not in rec.extra:
                continue
            n += 1
            agree += rec.extra["rule_verdict"] == rec.verdict
    return {"verdicts": n, "agreement": agree / n if n else None}


# A run with more of its replies unreadable than this measures the prompt format more than the
# protocol: the report says so above its tables.
UNPARSEABLE_WARN = 0.05


def unparseable_share(rates: dict[str, dict[str, float]]) -> float | None:
    """Share of a run's LLM replies (every role: answers, selections, verdicts, votes) that could not
    be parsed; None without transcripts."""
    records = sum(v["records"] for v in rates.values())
    return sum(v["errors"] for v in rates.values()) / records if records else None


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
PairedMetric = Literal["correct", "contains", "f1", "em"]


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
    ``metric``: the score compared (``correct``, the primary metric, by default; ``contains``, ``f1``
    or ``em``)."""
    ra, rb = results.get(a, {}), results.get(b, {})
    va: list[float] = []
    vb: list[float] = []
    for i in order:
        sa = ra[i].scores if i in ra and ra[i].status == "ok" else None
        sb = rb[i].scores if i in rb and rb[i].status == "ok" else None
        if sa is not None and sb is not None:
            va.append(getattr(sa, metric))
            vb.append(getattr(sb, metric))
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


def discordant(comparison: dict[str, Any]) -> str:
    """``12 / 5``: on how many items B answered better than A and A better than B; the others tie.
    Reports written before these counts existed show a dash."""
    if "b_better" not in comparison:
        return "–"
    return f"{comparison['b_better']} / {comparison['a_better']}"


def _preset(name: str | None) -> Any:
    from evaluation.presets import PRESETS

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
        from evaluation.plots import write_plots

        report["plots"] = [str(p.relative_to(ws.root)) for p in write_plots(report, ws.root / "plots")]
        (ws.root / "metrics.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (ws.root / "report.md").write_text(render_markdown(report), encoding="utf-8")
    return report


def _fmt(value: Any, pct: bool = False, digits: int = 1) -> str:
    if value is None:
        return "–"
    if pct:
        return f"{100 * value:.{digits}f}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _comparison_lines(report: dict[str, Any]) -> list[str]:
    """The paired-bootstrap differences section (empty without comparisons)."""
    lines: list[str] = []
    if report["comparisons"]:
        lines += [
            "",
            "## Differences (paired bootstrap, 95% CI)",
            "",
            f"Accuracy of B minus accuracy of A over the items both finished; "
            f"{report['bootstrap']['samples']} resamples, seed {report['bootstrap']['seed']}. "
            "A CI that contains 0 means the difference may be noise.",
            "",
            "| A | B | n | A % | B % | B better / A better | B − A (pp) | 95% CI (pp) | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in report["comparisons"]:
            if not c["n"]:
                lines.append(
                    f"| {c['a']} | {c['b']} | 0 | – | – | – | – | – | no item finished in both runs yet |"
                )
                continue
            verdict = "real difference" if c["significant"] else "may be noise"
            lines.append(
                f"| {c['a']} | {c['b']} | {c['n']} | {_fmt(c['accuracy_a'], True)} "
                f"| {_fmt(c['accuracy_b'], True)} | {discordant(c)} | {100 * c['diff']:+.1f} "
                f"| [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] | {verdict} |"
            )
    return lines


def _diagnostic_lines(report: dict[str, Any]) -> list[str]:
    """Prompt diagnostics per run and the parse-error rate per role."""
    lines: list[str] = []
    lines += [
        "",
        "## Prompt diagnostics",
        "",
        "Final answers: bare numbers (a knowledge label taken for the answer: `3` for an item shown as "
        "`[3]` in the paper style, `K3` in the robust style, where a plain number is a real answer), "
        "copies of the one-shot example's answer, placeholders (empty, `answer`, `the short answer` "
        "and the like; in brackets the part where no answer could be parsed at all); turn columns "
        "count every agent turn. Selection: steps whose reply "
        "parsed (an empty selection counts as valid), `[No Found]` share, and *picks answer*: of the "
        "steps whose pool holds a gold answer string, the share that chose a passage holding it. "
        "Judge/rule: LLM judge verdicts equal to the rule check.",
        "",
        "| run | bare number % | example copy % | placeholder % | (no answer %) | turn bare % "
        "| turn copy % | valid selection % | No Found % | picks answer % | judge = rule % |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        a, t, s = r["answers"], r["turn_answers"], r["selection"]
        lines.append(
            f"| {r['label']} | {_fmt(a['bare_number'], True)} | {_fmt(a['example_copy'], True)} "
            f"| {_fmt(a['placeholder'], True)} | {_fmt(a['no_answer'], True)} "
            f"| {_fmt(t['bare_number'], True)} | {_fmt(t['example_copy'], True)} "
            f"| {_fmt(s['valid_selection_share'], True)} | {_fmt(s['no_found_share'], True)} "
            f"| {_fmt(r.get('selection_hits', {}).get('share'), True)} "
            f"| {_fmt(r['judge_rule']['agreement'], True)} |"
        )
    lines += ["", "Parse-error rate per role (errors / records):", ""]
    for r in report["runs"]:
        parts = [f"{role} {v['errors']}/{v['records']}" for role, v in r["parse_errors"].items()]
        lines.append(f"- **{r['label']}**: " + (", ".join(parts) if parts else "no transcripts"))
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """The human-readable report: results, comparisons with CIs, prompt diagnostics, failures."""
    lines = [
        "# Evaluation report",
        "",
        f"Dataset `{report['dataset']}` ({report['format']}), {report['items']} items; accuracy = "
        f"**{report['primary']}**"
        + (f"; judge model `{report['judge_model']}`" if report.get("judge_model") else "")
        + ". Percentages are over finished (ok) items.",
        "",
        *_setup_lines(report),
        *_unparseable_lines(report),
        "| run | style | ok | failed | pending | accuracy % | EM % | F1 % | contains % | judge % | Co2 % "
        "| Cons % | rounds | calls/q | tokens/q | out tok/q | s/q | q/h | unparseable % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['label']} | {r['prompt_style']} | {r['ok']} | {r['failed']} | {r['pending']} "
            f"| {_fmt(r['accuracy'], True)} "
            f"| {_fmt(r['em'], True)} | {_fmt(r['f1'], True)} | {_fmt(r['contains'], True)} "
            f"| {_fmt(r['judge_accuracy'], True)} | {_fmt(r['co2'], True)} | {_fmt(r['cons'], True)} "
            f"| {_fmt(r['avg_rounds'], digits=2)} | {_fmt(r['calls_per_q'], digits=2)} "
            f"| {_fmt(r['tokens_per_q'], digits=0)} | {_fmt(r['completion_tokens_per_q'], digits=0)} "
            f"| {_fmt(r['seconds_per_q'], digits=2)} | {_fmt(r.get('questions_per_hour'), digits=0)} "
            f"| {_fmt(r.get('unparseable'), True)} |"
        )
    if any(r["kks_strict"] is not None for r in report["runs"]):
        lines += ["", "| run | KKS strict % | KKS smooth % |", "|---|---|---|"]
        for r in report["runs"]:
            lines.append(f"| {r['label']} | {_fmt(r['kks_strict'], True)} | {_fmt(r['kks_smooth'], True)} |")
    lines += _budget_lines(report)
    lines += _published_lines(report)
    lines += _comparison_lines(report)
    lines += _diagnostic_lines(report)
    if report.get("plots"):
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}]({p})" for p in report["plots"]]
    failures = [(r["label"], f) for r in report["runs"] for f in r["failures"]]
    if failures or report["dataset_problems"]:
        lines += ["", "## Problems", ""]
        for label, f in failures[:50]:
            lines.append(f"- {label} `{f['id']}` (attempt {f['attempt']}): {f['error']}")
        if len(failures) > 50:
            lines.append(f"- … {len(failures) - 50} more failed items (see metrics.json)")
        for p in report["dataset_problems"][:50]:
            lines.append(f"- dataset {p}")
        if failures:
            lines.append("")
            lines.append("Failed items are retried when the same command is run again.")
    return "\n".join(lines) + "\n"


def run_setting(spec: RunSpec) -> str:
    """Which setting a run used, in words: for MADKE, the paper's published setting (MADKE §4.4 and
    Prompt 3.1: the ``madke`` preset) or each value that differs from it; for the others, the style."""
    from evaluation.presets import MADKE

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


def unparseable_warnings(report: dict[str, Any], threshold: float = UNPARSEABLE_WARN) -> list[str]:
    """One warning per run whose share of unparseable replies is above ``threshold``."""
    out = []
    for r in report["runs"]:
        share = r.get("unparseable")
        if share is not None and share > threshold:
            worst = max(r["parse_errors"].items(), key=lambda kv: kv[1]["rate"])
            # The robust style is the remedy only for a run not already using it.
            advice = (
                "the model does not follow even the robust style here: read its transcripts"
                if r["prompt_style"] == "robust"
                else "try the robust style"
            )
            out.append(
                f"{r['label']} ({r['prompt_style']} prompts): {100 * share:.1f} % of its replies could "
                f"not be parsed (most: {worst[0]} {worst[1]['errors']}/{worst[1]['records']}); its "
                f"accuracy measures the prompt format as much as the protocol — {advice}"
            )
    return out


def _unparseable_lines(report: dict[str, Any]) -> list[str]:
    warnings = unparseable_warnings(report)
    if not warnings:
        return []
    lines = [f"**Warning: more than {100 * UNPARSEABLE_WARN:.0f} % unparseable replies**", ""]
    lines += [f"- {w}" for w in warnings]
    return [*lines, ""]


def _setup_lines(report: dict[str, Any]) -> list[str]:
    """Preset, knowledge source and models: what a reader needs before comparing with a paper."""
    out: list[str] = []
    if report.get("preset"):
        out.append(f"Preset **{report['preset']}**: {report.get('preset_source')}.")
        out += [f"- differs from the paper: {d}" for d in report.get("preset_deviations", [])]
        out.append("")
    if report.get("pool_source") == "file":
        dropped = report.get("pool_items_dropped") or 0
        out.append(
            "Knowledge: the dataset's own pools (cut to each run's k_wiki/k_web)"
            + (f"; {dropped} pool entries without text were dropped." if dropped else ".")
        )
        out.append("")
    settings = {r["label"]: r.get("setting") for r in report["runs"] if r.get("setting")}
    if settings:
        out.append("Setting of each run:")
        out += [f"- {label}: {setting}" for label, setting in settings.items()]
        out.append("")
    models = {r["label"]: r.get("models") or [] for r in report["runs"]}
    if any(models.values()):
        out.append("Models: " + "; ".join(f"{k}: {', '.join(v) or '–'}" for k, v in models.items()) + ".")
        out.append("")
    return out


def _budget_lines(report: dict[str, Any]) -> list[str]:
    runs = [r for r in report["runs"] if r.get("budget_of")]
    if not runs:
        return []
    by_label = {r["label"]: r for r in report["runs"]}
    lines = [
        "",
        "## Same-budget vote baseline",
        "",
        "Self-consistency (independent chain-of-thought samples, majority vote) given, question by "
        "question, the prompt + completion tokens its debate used: one sample measures the cost, then as "
        "many more as fit are drawn. If the debate is not better than this vote, debating bought nothing "
        'that voting does not (Choi et al., 2025, "Debate or Vote").',
        "",
        "| debate | debate % | vote run | vote % | debate tok/q | vote tok/q | samples/q |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        d = by_label.get(r["budget_of"], {})
        lines.append(
            f"| {r['budget_of']} | {_fmt(d.get('accuracy'), True)} | {r['label']} "
            f"| {_fmt(r['accuracy'], True)} "
            f"| {_fmt(r.get('budget_tokens_per_q'), digits=0)} | {_fmt(r['tokens_per_q'], digits=0)} "
            f"| {_fmt(r.get('samples_per_q'), digits=1)} |"
        )
    return lines


def _published_lines(report: dict[str, Any]) -> list[str]:
    """Parley's number next to the paper's, with the model behind each."""
    if not report.get("preset"):
        return []
    lines = ["", "## Published figures", ""]
    rows = report.get("published") or []
    if not rows:
        bench = report.get("benchmark")
        lines.append(
            f"The paper gives no figure for benchmark `{bench}` and these runs."
            if bench
            else "Benchmark unknown: pass `--benchmark NAME` to compare with the paper's figures."
        )
        return lines
    lines += [
        f"Benchmark `{report.get('benchmark')}`. The paper's models are not Parley's: expect a large gap "
        "with a small local model. The GPT-4 score is compared with Parley's LLM judge (`--judge`).",
        "",
        "| run | Parley model | Parley % | metric | paper method | paper model | paper % | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['run']} | {', '.join(row['parley_models']) or '–'} | {_fmt(row['parley_value'], True)} "
            f"| {published.METRIC_NAMES.get(row['metric'], row['metric'])} | {row['paper_method']} "
            f"| {row['paper_model']} | {_fmt(row['paper_value'], True)} | {row['source']} |"
        )
    return lines

"""``report.md``: an evaluation's results, paired differences, prompt diagnostics and problems as
Markdown, and the cell formats the suite's report and the console summary share with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation import published
from evaluation.run_diagnostics import UNPARSEABLE_WARN


def fmt(value: Any, pct: bool = False, digits: int = 1) -> str:
    """One table cell: a dash for a missing value, a share as a percentage (``pct``), a float to
    ``digits`` places; every report and the console summary write numbers this one way."""
    if value is None:
        return "–"
    if pct:
        return f"{100 * value:.{digits}f}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def discordant(comparison: dict[str, Any]) -> str:
    """``12 / 5``: on how many items B answered better than A and A better than B; the others tie.
    Reports written before these counts existed show a dash."""
    if "b_better" not in comparison:
        return "–"
    return f"{comparison['b_better']} / {comparison['a_better']}"


def paired_row(c: dict[str, Any], nothing_paired: str = "no item finished in both runs yet") -> str:
    """``| A | B | n | A % | B % | B better / A better | B − A | 95 % CI | verdict |`` of one paired
    comparison (``compare_runs``), the row both ``report.md`` and ``suite.md`` print; a comparison
    with no item finished in both runs says ``nothing_paired`` instead of numbers."""
    if not c["n"]:
        return f"| {c['a']} | {c['b']} | 0 | – | – | – | – | – | {nothing_paired} |"
    verdict = "real difference" if c["significant"] else "may be noise"
    return (
        f"| {c['a']} | {c['b']} | {c['n']} | {fmt(c['accuracy_a'], True)} | {fmt(c['accuracy_b'], True)} "
        f"| {discordant(c)} | {100 * c['diff']:+.1f} "
        f"| [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] | {verdict} |"
    )


def _comparison_lines(report: dict[str, Any]) -> list[str]:
    """The paired-bootstrap differences section (empty without comparisons)."""
    if not report["comparisons"]:
        return []
    return [
        "",
        "## Differences (paired bootstrap, 95% CI)",
        "",
        f"Accuracy of B minus accuracy of A over the items both finished; "
        f"{report['bootstrap']['samples']} resamples, seed {report['bootstrap']['seed']}. "
        "A CI that contains 0 means the difference may be noise.",
        "",
        "| A | B | n | A % | B % | B better / A better | B − A (pp) | 95% CI (pp) | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
        *(paired_row(c) for c in report["comparisons"]),
    ]


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
            f"| {r['label']} | {fmt(a['bare_number'], True)} | {fmt(a['example_copy'], True)} "
            f"| {fmt(a['placeholder'], True)} | {fmt(a['no_answer'], True)} "
            f"| {fmt(t['bare_number'], True)} | {fmt(t['example_copy'], True)} "
            f"| {fmt(s['valid_selection_share'], True)} | {fmt(s['no_found_share'], True)} "
            f"| {fmt(r.get('selection_hits', {}).get('share'), True)} "
            f"| {fmt(r['judge_rule']['agreement'], True)} |"
        )
    lines += ["", "Parse-error rate per role (errors / records):", ""]
    for r in report["runs"]:
        parts = [f"{role} {v['errors']}/{v['records']}" for role, v in r["parse_errors"].items()]
        lines.append(f"- **{r['label']}**: " + (", ".join(parts) if parts else "no transcripts"))
    return lines


def _provenance_lines(report: dict[str, Any]) -> list[str]:
    """What produced the answers (the latest invocation), and a warning when invocations differ."""
    prov = report.get("provenance")
    if not prov:
        return []
    latest = prov["latest"]
    code, model, index = latest.get("code") or {}, latest.get("model") or {}, latest.get("index") or {}
    what = model.get("weights_sha256") or model.get("base_url") or ""
    box = latest.get("machine") or {}
    lines = [
        "",
        "## Provenance",
        "",
        f"- code: {code.get('commit') or code.get('package')}"
        + (" (with local changes)" if code.get("modified") else "")
        + (f"; requirements.lock sha256 {code['lock_sha256'][:16]}…" if code.get("lock_sha256") else ""),
        f"- model: {model.get('model')} ({model.get('kind')}"
        + (f", {model['quantization']}" if model.get("quantization") else "")
        + (f", {what}" if what else "")
        + ")",
        _index_line(index),
        f"- machine: {box.get('machine')}, {box.get('cpus')} CPUs; {prov['invocations']} invocation(s), "
        f"the latest at {latest.get('at')}",
    ]
    cache = report.get("call_cache") or {}
    if cache.get("calls"):
        lines.append(
            f"- call cache: {cache['replayed']:,} of {cache['calls']:,} model calls replayed "
            f"({100 * cache['share']:.1f} %); the latest invocation ran with the cache "
            f"{(latest.get('run') or {}).get('cache', 'unknown')}"
        )
    seeds = sorted({str(v) for v in (report.get("sampling_seeds") or {}).values()})
    if seeds:
        lines.append(
            "- sampling seed: "
            + ", ".join("none (the server's own)" if s == "None" else s for s in seeds)
            + f"; bootstrap seed {report['bootstrap']['seed']}; each run's full configuration: eval.json"
        )
    if prov["differs_across_invocations"]:
        lines.append(
            "- **warning**: invocations of this folder differ in "
            + ", ".join(prov["differs_across_invocations"])
            + ": its results mix answers made under both"
        )
    return lines


def _index_line(index: dict[str, Any]) -> str:
    if not index:
        return "- index: none (no pool built by Parley)"
    if index.get("service"):
        return f"- index: the retrieval service at {index['service']}"
    passages, encoder = index.get("passages"), index.get("encoder")
    return f"- index: {index.get('collection')}, {passages} passages, encoder {encoder}"


def _degraded_lines(report: dict[str, Any]) -> list[str]:
    """Debates whose verdict or summary did not come from its own endpoint's readable reply."""
    rows = [(r["label"], r["degraded"]) for r in report["runs"] if (r.get("degraded") or {}).get("debates")]
    if not rows:
        return []
    lines = [
        "",
        "## Degraded steps",
        "",
        "| run | debates with a degraded step | steps by kind |",
        "|---|---|---|",
    ]
    for label, d in rows:
        kinds = "; ".join(f"{k}: {v}" for k, v in d["steps"].items())
        lines.append(f"| {label} | {d['debates']} | {kinds} |")
    return lines


def _pool_growth_lines(report: dict[str, Any]) -> list[str]:
    """The searches during the debate, for the runs that made them (``evaluation.pool_growth``)."""
    grown = [(r["label"], r["pool_growth"]) for r in report["runs"] if r.get("pool_growth")]
    if not grown:
        return []
    lines = [
        "",
        "## Searches during the debate",
        "",
        "Answer in pool: a gold answer string in the pool's passages, the first pool (built before the "
        "debate) and the final one (with what the debaters' searches added).",
        "",
        "| run | debates | searches/q | items added/q | answer in first pool % | answer in final pool % "
        "| final − first, points [95 % CI] | added items selected % | selected by another agent "
        "| added by source | search tokens/q "
        "| retriever outages |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, g in grown:
        d = g["final_minus_first"]
        sources = ", ".join(f"{k} {v}" for k, v in g["added_by_source"].items()) or "–"
        lines.append(
            f"| {label} | {g['debates']} | {fmt(g['searches_per_q'], digits=2)} "
            f"| {fmt(g['items_added_per_q'], digits=2)} | {fmt(g['answer_in_first_pool'], True)} "
            f"| {fmt(g['answer_in_final_pool'], True)} "
            f"| {100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] "
            f"| {fmt(g['added_items_selected'], True)} "
            f"| {g['selections_of_added_by_other_agents']} | {sources} "
            f"| {fmt(g['query_tokens_per_q'], digits=0)} | {g['debates_with_retriever_outage']} |"
        )
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
            f"| {fmt(r['accuracy'], True)} "
            f"| {fmt(r['em'], True)} | {fmt(r['f1'], True)} | {fmt(r['contains'], True)} "
            f"| {fmt(r['judge_accuracy'], True)} | {fmt(r['co2'], True)} | {fmt(r['cons'], True)} "
            f"| {fmt(r['avg_rounds'], digits=2)} | {fmt(r['calls_per_q'], digits=2)} "
            f"| {fmt(r['tokens_per_q'], digits=0)} | {fmt(r['completion_tokens_per_q'], digits=0)} "
            f"| {fmt(r['seconds_per_q'], digits=2)} | {fmt(r.get('questions_per_hour'), digits=0)} "
            f"| {fmt(r.get('unparseable'), True)} |"
        )
    if any(r["kks_strict"] is not None for r in report["runs"]):
        lines += ["", "| run | KKS strict % | KKS smooth % |", "|---|---|---|"]
        for r in report["runs"]:
            lines.append(f"| {r['label']} | {fmt(r['kks_strict'], True)} | {fmt(r['kks_smooth'], True)} |")
    lines += _budget_lines(report)
    lines += _published_lines(report)
    lines += _comparison_lines(report)
    lines += _provenance_lines(report)
    lines += _pool_growth_lines(report)
    lines += _degraded_lines(report)
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
            f"| {r['budget_of']} | {fmt(d.get('accuracy'), True)} | {r['label']} "
            f"| {fmt(r['accuracy'], True)} "
            f"| {fmt(r.get('budget_tokens_per_q'), digits=0)} | {fmt(r['tokens_per_q'], digits=0)} "
            f"| {fmt(r.get('samples_per_q'), digits=1)} |"
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
            f"| {row['run']} | {', '.join(row['parley_models']) or '–'} | {fmt(row['parley_value'], True)} "
            f"| {published.METRIC_NAMES.get(row['metric'], row['metric'])} | {row['paper_method']} "
            f"| {row['paper_model']} | {fmt(row['paper_value'], True)} | {row['source']} |"
        )
    return lines

"""Do the debaters' searches put the answer into the pool? The search step replayed on recorded debates.

Run (after `parley index build`, against the embedded default served by `parley llm serve`):

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.pool_search --evaluation reports/evidence --run madke \\
        --llm-url http://127.0.0.1:8080/v1 --out reports/pool-search/replay

For each recorded debate of the run, in the dataset's order: its stored first pool and, when it went on
past round 1 (where a debate with ``debate_search`` searches; one that ended in round 1 searches
nothing and keeps its pool), its debaters' round-1 answers. Each of those debaters writes its search
with the engine's own step (``engine.pool_search.search_after_round``: the query prompt, the cleaning,
the bounds of ``--per-agent-items`` and ``--max-pool-items``), and the in-process retriever runs it as it
builds a pool (both stages as configured, the question followed by the search, items the pool holds
dropped). Reported: answer-in-pool of the first and the final pool (a normalised gold alias on word
boundaries in a passage, as the evaluation counts it) over all questions and over the debates that
searched, the paired bootstrap 95 % CI of final − first, searches written and items added per
question, their sources, and the search calls' tokens and seconds. Writes ``bench.json``, ``bench.md``
and ``answer_in_pool.png`` to ``--out``. Nothing here runs a debate: what the grown pool does to the
answers needs the debates themselves (``parley eval --preset madke-search``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness.cli import study_parser
from bench.harness.plots import figure, save
from bench.harness.reports import command_line, machine, report_head, utc_date, write_json, write_markdown
from bench.harness.stats import ci_summary
from engine.config import DebateConfig
from engine.context import DebateContext, RoleModels, SingleModel
from engine.pool_search import DebateSearches, search_after_round
from engine.result import DebateResult
from evaluation.metrics import paired_bootstrap
from evaluation.run_diagnostics import answer_passages
from evaluation.store import Workspace
from services.knowledge import KnowledgePool, PoolBuilder

ROOT = Path(__file__).resolve().parent.parent


def round_one_answers(result: DebateResult) -> list[str | None]:
    """Each debater's recorded round-1 answer, by agent."""
    answers: dict[int, str | None] = {}
    for rec in result.transcript:
        if rec.round == 1 and rec.role == "debater" and rec.agent is not None:
            answers[rec.agent] = rec.answer
    return [answers.get(i) for i in range(max(answers, default=-1) + 1)]


def searching_config(result: DebateResult, per_search: int, max_pool: int) -> DebateConfig:
    """The recorded debate's configuration with one search per debater."""
    recorded = dict(result.config)
    recorded["debate_search"] = {"per_agent": 1, "items_per_search": per_search, "max_pool_items": max_pool}
    return DebateConfig.model_validate(recorded)


async def replay_one(
    item_id: str,
    gold: list[str],
    result: DebateResult,
    models: RoleModels,
    builder: PoolBuilder,
    *,
    per_search: int,
    max_pool: int,
) -> dict[str, Any]:
    """The search step of one recorded debate, and what its pool held before and after."""
    first = result.pool
    row: dict[str, Any] = {
        "id": item_id,
        "went_on": result.rounds > 1,
        "first_holds": bool(answer_passages(first, gold)),
        "queries": [],
        "added": [],
        "tokens": 0,
        "seconds": 0.0,
    }
    if not row["went_on"]:
        row["final_holds"] = row["first_holds"]
        return row
    config = searching_config(result, per_search, max_pool)
    pool = KnowledgePool.model_validate(first.model_dump())
    ctx = DebateContext(result.question, pool, config, models)
    ctx.searches = DebateSearches(builder, config.k_wiki, config.k_web)
    started = time.perf_counter()
    await search_after_round(ctx, 1, round_one_answers(result))
    row["seconds"] = round(time.perf_counter() - started, 2)
    final = ctx.pool
    row["final_holds"] = bool(answer_passages(final, gold))
    row["queries"] = [str(r.extra.get("query") or "") for r in ctx.transcript]
    row["added"] = [
        {
            "source": it.source,
            "title": it.title,
            "holds": bool(answer_passages(final.model_copy(update={"items": [it]}), gold)),
        }
        for it in final.items
        if it.found_by is not None
    ]
    row["tokens"] = sum(r.prompt_tokens + r.completion_tokens for r in ctx.transcript)
    row["warnings"] = list(final.warnings)
    return row


async def measure(
    ws: Workspace,
    run: str,
    models: RoleModels,
    builder: PoolBuilder,
    *,
    limit: int | None = None,
    per_search: int = 3,
    max_pool: int = 20,
    progress: bool = True,
) -> dict[str, Any]:
    results = ws.load_results(run)
    transcripts = ws.load_transcripts(run)
    order = sorted(
        (r for r in results.values() if r.status == "ok" and r.id in transcripts), key=lambda r: r.index
    )
    if limit is not None:
        order = order[:limit]
    rows = []
    for i, rec in enumerate(order, start=1):
        rows.append(
            await replay_one(
                rec.id,
                rec.gold,
                transcripts[rec.id],
                models,
                builder,
                per_search=per_search,
                max_pool=max_pool,
            )
        )
        if progress:
            first = statistics.mean(float(r["first_holds"]) for r in rows)
            final = statistics.mean(float(r["final_holds"]) for r in rows)
            print(f"{i}/{len(order)}: answer in pool {first:.3f} → {final:.3f}", flush=True)
    return summarize(rows)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    first = [float(r["first_holds"]) for r in rows]
    final = [float(r["final_holds"]) for r in rows]
    went_on = [r for r in rows if r["went_on"]]
    searched = [q for r in went_on for q in r["queries"] if q]
    added = [a for r in rows for a in r["added"]]
    return {
        "questions": len(rows),
        "debates_past_round_1": len(went_on),
        "answer_in_first_pool": round(statistics.mean(first), 4) if rows else None,
        "answer_in_final_pool": round(statistics.mean(final), 4) if rows else None,
        "final_minus_first": ci_summary(paired_bootstrap(first, final)) if rows else None,
        "past_round_1": {
            "answer_in_first_pool": round(statistics.mean(float(r["first_holds"]) for r in went_on), 4)
            if went_on
            else None,
            "answer_in_final_pool": round(statistics.mean(float(r["final_holds"]) for r in went_on), 4)
            if went_on
            else None,
        },
        "searches_written_per_debate": round(len(searched) / len(went_on), 3) if went_on else None,
        "items_added_per_question": round(len(added) / len(rows), 3) if rows else None,
        "added_items_holding_an_answer": sum(1 for a in added if a["holds"]),
        "added_by_source": dict(Counter(a["source"] for a in added)),
        "search_tokens_per_debate": round(statistics.mean(r["tokens"] for r in went_on), 1)
        if went_on
        else None,
        "search_seconds_per_debate": round(statistics.mean(r["seconds"] for r in went_on), 2)
        if went_on
        else None,
        "examples": [
            {"id": r["id"], "queries": r["queries"], "added": [a["title"] for a in r["added"]]}
            for r in went_on[:8]
        ],
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> list[str]:
    d = result["final_minus_first"]
    past = result["past_round_1"]

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.1f}"

    r = result
    lines = [
        *report_head(
            "Searches during the debate, replayed on recorded debates: answer in pool",
            f"`{r['command']}`",
            f"{r['questions']} recorded debates of `{r['evaluation']}` (run `{r['run']}`); model "
            f"`{r['model']}`; {r['machine']}; {r['date']}. One search per debater after round 1, at most "
            f"{r['per_search']} new items per search and {r['max_pool']} in the pool.",
        ),
        "| questions | past round 1 | answer in first pool % | answer in final pool % "
        "| final − first, points [95 % CI] | searches per debate | items added per question "
        "| added items holding an answer | search tokens per debate | search s per debate |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {r['questions']} | {r['debates_past_round_1']} | {pct(r['answer_in_first_pool'])} "
        f"| {pct(r['answer_in_final_pool'])} | {100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, "
        f"{100 * d['high']:+.1f}] | {r['searches_written_per_debate']} | {r['items_added_per_question']} "
        f"| {r['added_items_holding_an_answer']} | {r['search_tokens_per_debate']} "
        f"| {r['search_seconds_per_debate']} |",
        "",
        f"Over the debates that went past round 1 alone: answer in pool {pct(past['answer_in_first_pool'])} "
        f"% → {pct(past['answer_in_final_pool'])} %. Added items by source: "
        + (", ".join(f"{k} {v}" for k, v in r["added_by_source"].items()) or "none")
        + ".",
        "",
        "Examples (the first debates that searched):",
        "",
    ]
    for ex in result["examples"]:
        lines.append(f"- `{ex['id']}`: searched {ex['queries']!r}; added {ex['added']!r}")
    lines += ["", "![answer in pool, first and final](answer_in_pool.png)"]
    return lines


def plot(result: dict[str, Any], path: Path) -> Path:
    fig, ax = figure((5.5, 3.6))
    groups = ["all questions", "past round 1"]
    firsts = [result["answer_in_first_pool"] or 0.0, result["past_round_1"]["answer_in_first_pool"] or 0.0]
    finals = [result["answer_in_final_pool"] or 0.0, result["past_round_1"]["answer_in_final_pool"] or 0.0]
    xs = range(len(groups))
    ax.bar([x - 0.2 for x in xs], [100 * v for v in firsts], 0.4, label="first pool")
    ax.bar([x + 0.2 for x in xs], [100 * v for v in finals], 0.4, label="final pool")
    ax.set_xticks(list(xs), groups)
    ax.set_ylabel("answer in pool, %")
    ax.set_title(f"Searches during the debate ({result['questions']} questions)")
    ax.legend()
    return save(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = study_parser(__doc__)
    ap.add_argument("--evaluation", type=Path, default=ROOT / "reports" / "evidence")
    ap.add_argument("--run", default="madke")
    ap.add_argument("--llm-url", required=True, help="OpenAI-compatible /v1 serving the debate's model")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--limit", type=int, default=None, help="the first N recorded debates")
    ap.add_argument("--per-search-items", type=int, default=3)
    ap.add_argument("--max-pool-items", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "pool-search" / "replay")
    args = ap.parse_args(argv)
    # lazy: the in-process retriever loads the index, the encoder and Qdrant's engine (seconds)
    from retriever.local import LocalPoolBuilder
    from retriever.settings import RetrieverSettings
    from services.llm import OpenAIChatClient

    async def run() -> dict[str, Any]:
        builder = LocalPoolBuilder.open(RetrieverSettings())
        try:
            async with OpenAIChatClient(args.llm_url.rstrip("/"), args.model) as client:
                return await measure(
                    Workspace(args.evaluation),
                    args.run,
                    SingleModel(client),
                    builder,
                    limit=args.limit,
                    per_search=args.per_search_items,
                    max_pool=args.max_pool_items,
                )
        finally:
            close = getattr(builder, "close", None)
            if close is not None:
                close()

    result = asyncio.run(run())
    result.update(
        command=command_line("bench.pool_search", argv),
        evaluation=str(args.evaluation.resolve().relative_to(ROOT))
        if args.evaluation.resolve().is_relative_to(ROOT)
        else str(args.evaluation),
        run=args.run,
        model=args.model,
        machine=machine(),
        date=utc_date(),
        per_search=args.per_search_items,
        max_pool=args.max_pool_items,
    )
    write_json(args.out / "bench.json", result)
    plot(result, args.out / "answer_in_pool.png")
    print(write_markdown(args.out / "bench.md", markdown(result)))
    return result


if __name__ == "__main__":
    main()

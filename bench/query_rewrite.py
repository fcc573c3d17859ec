"""Does a query written by the LLM put the answer into the pool? answer-in-pool@k with and without it.

Run (from the repository root, after `parley index build`, against any OpenAI-compatible server; here the
embedded default served by `parley llm serve` or the one an evaluation started):

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.query_rewrite --questions data/nq_open_vital_dev.jsonl \
        --split even --limit 100 --llm-url http://127.0.0.1:8080/v1 --out reports/query-rewrite

For each question the model writes, at temperature 0 and a fixed seed (so a question's rewrite, and so
its pool, is deterministic for a given model and prompt),

- **keywords**: a short web-search query; the retrievers get the question followed by it;
- **passage** (query2doc / HyDE): two or three sentences that answer the question as an encyclopaedia
  would; the retrievers get the question followed by it (the dense encoder reads its first 256 tokens);

and the first stage (hybrid dense + BM25, as configured) searches with the question alone and with each
rewrite. Reported: answer-in-pool@k (k = 1, 3, 5, 10, 20, 50; the pool ``POST /v1/pools`` would hold for
``k_wiki=k``: near-duplicates removed by the service's rule), the paired bootstrap 95 % CI of each
rewrite against the question alone at @5 and @10, and the rewrite's cost per question: prompt and
completion tokens and seconds of the model call. Writes ``bench.json``, ``bench.md`` and
``answer_in_pool.png`` to ``--out``.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import httpx

from bench.harness.cli import add_llm_bench_args, study_parser
from bench.harness.llm import chat
from bench.harness.reports import report_head
from bench.harness.retrieval import (
    llm_bench_inputs,
    pool_has_answer,
    print_progress,
    run_facts,
    write_pool_report,
)
from bench.harness.stats import call_costs, ci_summary
from bench.pool_quality import CONFIGS, KS, retriever_for
from evaluation.metrics import paired_bootstrap
from retriever.runtime import RetrieverRuntime
from retriever.settings import RetrieverSettings

ROOT = Path(__file__).resolve().parent.parent
DEPTH = max(KS)
# Operator-side prompts (the experiment's, not a client's): short, and asking for plain text only.
PROMPTS = {
    "keywords": (
        "Write one web search query, a few keywords and nothing else, that would find the Wikipedia "
        "passage answering this question.\nQuestion: {question}\nQuery:",
        32,
    ),
    "passage": (
        "Write two or three sentences from a Wikipedia article that answer this question. Write only the "
        "sentences.\nQuestion: {question}\nPassage:",
        96,
    ),
}


async def rewrite(client: httpx.AsyncClient, model: str, kind: str, question: str) -> dict[str, Any]:
    """One rewrite: its text, tokens and seconds."""
    template, max_tokens = PROMPTS[kind]
    return await chat(client, model, template.format(question=question), max_tokens)


async def measure(
    settings: RetrieverSettings,
    questions: list[dict[str, Any]],
    llm_url: str,
    model: str,
    kinds: tuple[str, ...] = tuple(PROMPTS),
) -> dict[str, Any]:
    rt = RetrieverRuntime.open(settings)
    wiki = retriever_for(CONFIGS["hybrid"], rt)
    assert wiki is not None
    in_pool: dict[str, dict[int, list[float]]] = {n: {k: [] for k in KS} for n in ("question", *kinds)}
    costs: dict[str, list[dict[str, Any]]] = {n: [] for n in kinds}
    examples: list[dict[str, str]] = []
    try:
        rt.warm()
        async with httpx.AsyncClient(base_url=llm_url, timeout=300) as client:
            for i, q in enumerate(questions):
                queries = {"question": q["question"]}
                for kind in kinds:
                    r = await rewrite(client, model, kind, q["question"])
                    costs[kind].append(r)
                    queries[kind] = f"{q['question']} {r['text']}"
                for name, query in queries.items():
                    hits = await wiki.search(query, DEPTH, "hybrid", with_vectors=True)
                    for k in KS:
                        in_pool[name][k].append(
                            float(pool_has_answer(hits, k, q["answers"], settings.dedupe_cosine))
                        )
                if i < 5:
                    examples.append({"question": q["question"], **{k: costs[k][-1]["text"] for k in kinds}})
                print_progress(i + 1, len(questions), in_pool, 5)
    finally:
        await rt.aclose()
    table: dict[str, Any] = {}
    for name, per_k in in_pool.items():
        row: dict[str, Any] = {"answer_in_pool": {k: round(statistics.mean(v), 4) for k, v in per_k.items()}}
        if name != "question":
            row["vs_question"] = {
                f"@{k}": ci_summary(paired_bootstrap(in_pool["question"][k], per_k[k])) for k in (5, 10)
            }
            row["cost"] = call_costs(costs[name])
        table[name] = row
    return {"questions": len(questions), "configs": table, "examples": examples}


def markdown(result: dict[str, Any]) -> list[str]:
    """The report's lines: answer-in-pool@k with and without each rewrite, its cost, examples."""
    cfgs = result["configs"]
    lines = [
        *report_head("LLM query rewrite: answer-in-pool@k", f"`{result['command']}`"),
        f"{result['questions']} questions of {result['questions_file']}; model `{result['model']}` at "
        f"{result['llm_url']}; first stage: hybrid as configured; {result['machine']}; {result['date']}.",
        "",
        "| query | "
        + " | ".join(f"@{k}" for k in KS)
        + " | @5 vs question, 95 % CI | @10 vs question, 95 % CI "
        "| rewrite tokens (prompt + completion) | rewrite s p50 / p95 |",
        "|---" * (len(KS) + 5) + "|",
    ]
    for name, row in cfgs.items():
        aip = " | ".join(f"{row['answer_in_pool'][k]:.3f}" for k in KS)
        if name == "question":
            lines.append(f"| question alone | {aip} | — | — | 0 | 0 |")
            continue
        d5, d10, c = row["vs_question"]["@5"], row["vs_question"]["@10"], row["cost"]
        lines.append(
            f"| question + {name} | {aip} | {d5['diff']:+.3f} [{d5['low']:+.3f}, {d5['high']:+.3f}] "
            f"| {d10['diff']:+.3f} [{d10['low']:+.3f}, {d10['high']:+.3f}] "
            f"| {c['prompt_tokens']:.0f} + {c['completion_tokens']:.0f} "
            f"| {c['seconds_p50']} / {c['seconds_p95']} |"
        )
    lines += ["", "Examples (the first questions):", ""]
    for ex in result["examples"]:
        written = "; ".join(f"{k}: {v!r}" for k, v in ex.items() if k != "question")
        lines.append(f"- **{ex['question']}** {written}")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = study_parser(__doc__)
    add_llm_bench_args(ap, ROOT / "reports" / "query-rewrite")
    ap.add_argument("--kinds", default=",".join(PROMPTS), help=f"comma-separated, of {', '.join(PROMPTS)}")
    args = ap.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or any(k not in PROMPTS for k in kinds):
        raise SystemExit(f"--kinds: one or more of {', '.join(PROMPTS)}")
    settings, questions = llm_bench_inputs(args)
    result = asyncio.run(measure(settings, questions, args.llm_url.rstrip("/"), args.model, kinds))
    result.update(run_facts("bench.query_rewrite", argv, args))
    title = f"LLM query rewrite, {result['questions']} questions"
    print(write_pool_report(args.out, result, markdown(result), KS, title=title, log_x=True))


if __name__ == "__main__":
    main()

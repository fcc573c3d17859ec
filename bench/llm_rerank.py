"""Does the model order a short candidate list better than fusion? The LLM as a listwise reranker.

Run (from the repository root, after `parley index build`, against any OpenAI-compatible server; here the
embedded default served by `parley llm serve` or the one an evaluation started):

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.llm_rerank --questions data/nq_open_vital_dev.jsonl \
        --split even --limit 100 --llm-url http://127.0.0.1:8080/v1 --out reports/llm-rerank

For each question the first stage (hybrid dense + BM25, as configured) finds the candidates: the pool
``POST /v1/pools`` would hold for ``k_wiki=N`` (top N, near-duplicates removed by the service's rule;
``--candidates``, 10 by default). The model reads them numbered (title and the first
``--passage-words`` words of each) after the question and answers with the numbers of the passages most
likely to hold the answer, best first (RankGPT's listwise form), at temperature 0 and a fixed seed, so a
question's order is deterministic for a given model. Its order, completed by the candidates it did not
name in their first-stage order, is the reranked list; a reply without a usable number keeps the
first-stage order and is counted as unparseable.

Reported: answer-in-pool@k (k = 1, 3, 5 and N) of the first-stage order and of the model's, the paired
bootstrap 95 % CI of the difference at each k below N (at N both lists hold the same passages), the
share of unparseable replies, and the reranker's cost per question: prompt and completion tokens and
seconds of the model call (p50/p95). Writes ``bench.json``, ``bench.md`` and ``answer_in_pool.png`` to
``--out``.
"""

from __future__ import annotations

import asyncio
import re
import statistics
from pathlib import Path
from typing import Any

import httpx

from bench.harness.cli import add_llm_bench_args, study_parser
from bench.harness.llm import chat
from bench.harness.reports import report_head
from bench.harness.retrieval import (
    has_answer,
    llm_bench_inputs,
    pool_of,
    print_progress,
    run_facts,
    write_pool_report,
)
from bench.harness.stats import call_costs, ci_summary
from bench.pool_quality import CONFIGS, DEPTH, retriever_for
from evaluation.metrics import paired_bootstrap
from retriever.pools import _Candidate
from retriever.runtime import RetrieverRuntime
from retriever.settings import RetrieverSettings

ROOT = Path(__file__).resolve().parent.parent
# Operator-side prompt (the experiment's, not a client's): the passages, then what to answer, then the
# question last, so the numbers are the last thing read before the reply.
PROMPT = (
    "Below are {n} numbered passages from Wikipedia.\n\n{passages}\n\n"
    "Which passages are most likely to contain the answer to the question? Reply with the passage "
    "numbers only, the most likely first, separated by commas (for example: 3, 1, 7).\n"
    "Question: {question}\nPassage numbers:"
)
MAX_TOKENS = 40


def words(text: str, limit: int) -> str:
    cut = text.split()
    return " ".join(cut[:limit]) + (" …" if len(cut) > limit else "")


def rerank_prompt(question: str, candidates: list[_Candidate], passage_words: int) -> str:
    passages = "\n\n".join(
        f"[{i}] {c.title}: {words(c.text, passage_words)}" for i, c in enumerate(candidates, start=1)
    )
    return PROMPT.format(n=len(candidates), passages=passages, question=words(question, 64))


def parse_order(reply: str, n: int) -> list[int] | None:
    """The 0-based candidate order the reply names (valid, first mention only), the rest appended in
    their first-stage order; None when the reply names no candidate."""
    named: list[int] = []
    for m in re.finditer(r"\d+", reply):
        i = int(m.group()) - 1
        if 0 <= i < n and i not in named:
            named.append(i)
    if not named:
        return None
    return named + [i for i in range(n) if i not in named]


async def measure(
    settings: RetrieverSettings,
    questions: list[dict[str, Any]],
    llm_url: str,
    model: str,
    candidates: int,
    passage_words: int,
) -> dict[str, Any]:
    ks = sorted({k for k in (1, 3, 5, candidates) if k <= candidates})
    rt = RetrieverRuntime.open(settings)
    wiki = retriever_for(CONFIGS["hybrid"], rt)
    assert wiki is not None
    in_pool: dict[str, dict[int, list[float]]] = {n: {k: [] for k in ks} for n in ("first stage", "llm")}
    costs: list[dict[str, Any]] = []
    unparseable = 0
    examples: list[dict[str, Any]] = []
    try:
        rt.warm()
        async with httpx.AsyncClient(base_url=llm_url, timeout=300) as client:
            for i, q in enumerate(questions):
                hits = await wiki.search(q["question"], DEPTH, "hybrid", with_vectors=True)
                pool = pool_of(hits, candidates, settings.dedupe_cosine)
                reply = await chat(
                    client, model, rerank_prompt(q["question"], pool, passage_words), MAX_TOKENS
                )
                costs.append(reply)
                order = parse_order(reply["text"], len(pool))
                if order is None:
                    unparseable += 1
                    order = list(range(len(pool)))
                reranked = [pool[j] for j in order]
                for name, ranked in (("first stage", pool), ("llm", reranked)):
                    for k in ks:
                        in_pool[name][k].append(float(has_answer([c.text for c in ranked[:k]], q["answers"])))
                if i < 5:
                    examples.append({"question": q["question"], "reply": reply["text"], "order": order})
                print_progress(i + 1, len(questions), in_pool, 1)
    finally:
        await rt.aclose()
    table: dict[str, Any] = {
        name: {"answer_in_pool": {k: round(statistics.mean(v), 4) for k, v in per_k.items()}}
        for name, per_k in in_pool.items()
    }
    table["llm"]["vs_first_stage"] = {
        f"@{k}": ci_summary(paired_bootstrap(in_pool["first stage"][k], in_pool["llm"][k]))
        for k in ks
        if k < candidates
    }
    table["llm"]["cost"] = {**call_costs(costs), "unparseable": round(unparseable / len(questions), 4)}
    return {
        "questions": len(questions),
        "candidates": candidates,
        "passage_words": passage_words,
        "ks": ks,
        "configs": table,
        "examples": examples,
    }


def markdown(result: dict[str, Any]) -> list[str]:
    """The report's lines: answer-in-pool@k of both orders, their differences, the cost, examples."""
    ks, cfgs = result["ks"], result["configs"]
    llm = cfgs["llm"]
    cost = llm["cost"]
    lines = [
        *report_head("The model as a listwise reranker: answer-in-pool@k", f"`{result['command']}`"),
        f"{result['questions']} questions of {result['questions_file']}; the first stage's top "
        f"{result['candidates']} (hybrid, as configured) reordered by `{result['model']}` at "
        f"{result['llm_url']}, "
        f"{result['passage_words']} words of each passage; {result['machine']}; {result['date']}.",
        "",
        "| order | " + " | ".join(f"@{k}" for k in ks) + " |",
        "|---" * (len(ks) + 1) + "|",
    ]
    for name, row in cfgs.items():
        lines.append(f"| {name} | " + " | ".join(f"{row['answer_in_pool'][k]:.3f}" for k in ks) + " |")
    lines += ["", "| llm − first stage | difference | 95 % CI | excludes 0 |", "|---|---|---|---|"]
    for at, d in llm["vs_first_stage"].items():
        lines.append(f"| {at} | {d['diff']:+.3f} | [{d['low']:+.3f}, {d['high']:+.3f}] | {d['excludes_0']} |")
    lines += [
        "",
        f"Cost per question: {cost['prompt_tokens']:.0f} prompt + {cost['completion_tokens']:.0f} completion "
        f"tokens, {cost['seconds_p50']} s p50 / {cost['seconds_p95']} s p95; unparseable replies "
        f"{cost['unparseable']:.1%} (kept the first-stage order).",
        "",
        "Examples (the first questions):",
        "",
    ]
    for ex in result["examples"]:
        lines.append(f"- **{ex['question']}** reply {ex['reply']!r} → order {[i + 1 for i in ex['order']]}")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = study_parser(__doc__)
    add_llm_bench_args(ap, ROOT / "reports" / "llm-rerank")
    ap.add_argument(
        "--candidates", type=int, default=10, help="the first stage's top N the model orders (2–20)"
    )
    ap.add_argument("--passage-words", type=int, default=60, help="words of each passage the model reads")
    args = ap.parse_args(argv)
    if not 2 <= args.candidates <= 20:
        raise SystemExit("--candidates: 2 to 20 (the prompt holds every candidate)")
    if not 10 <= args.passage_words <= 300:
        raise SystemExit("--passage-words: 10 to 300")
    settings, questions = llm_bench_inputs(args)
    result = asyncio.run(
        measure(
            settings, questions, args.llm_url.rstrip("/"), args.model, args.candidates, args.passage_words
        )
    )
    result.update(run_facts("bench.llm_rerank", argv, args))
    title = f"LLM listwise rerank of the top {result['candidates']}, {result['questions']} questions"
    print(write_pool_report(args.out, result, markdown(result), result["ks"], title=title, tick_every_x=True))


if __name__ == "__main__":
    main()

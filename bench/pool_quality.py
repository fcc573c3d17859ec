"""Does the pool hold the answer? answer-in-pool@k and recall@k per retrieval configuration, with latency.

Run (from the repository root, after `parley index build` and, for the second stage,
`PARLEY_RETRIEVER_RERANK_MODEL=all-mpnet-base-v2 parley index build --rerank`):

    HF_HUB_OFFLINE=1 PARLEY_RETRIEVER_RERANK_MODEL=all-mpnet-base-v2 .venv/bin/python -m bench.pool_quality \
        --questions data/nq_open_vital_dev.jsonl --out reports/pool-quality

For every question of ``--questions`` (JSONL with ``question`` and ``answers``) and every configuration:

- **answer-in-pool@k** (k = 1, 3, 5, 10, 20, 50): a SQuAD-normalised gold alias occurs as whole words in
  the text of one of the pool's passages, where the pool is exactly what ``POST /v1/pools`` would hold
  for ``k_wiki=k, k_web=0``: the configuration's top k, near-duplicates removed by the service's own rule;
- **recall@k**: the share of the question's answer-bearing passages in the top k, where the
  answer-bearing passages are those found in the top 50 of *any* configuration (pooled judgements, as
  TREC does when nobody labelled the whole corpus); questions with none are left out;
- per-stage latency p50/p95 (query encoding, dense, BM25, fusion, the second stage's encoding and
  rescoring, total) of each search, on this machine, one question at a time;
- the paired bootstrap 95 % CI (``evaluation.metrics.paired_bootstrap``) of each configuration's
  answer-in-pool@5 and @10 against the first one;
- the latency of the pool service itself (cold ``build_pool``, k_wiki 5) with the settings as configured.

``--search-texts`` takes the passages a model wrote for the questions (an evaluation folder run with
``--set search_query='"passage"'``, whose ``pools.passage-*.jsonl`` records each written passage, or
that file itself); the ``+passage`` configurations then search for the question followed by its
passage, as ``POST /v1/pools`` does with ``search_text``, and every configuration is measured on the
questions that have one, so the pairs stay paired. Without it those configurations are skipped.

Writes ``bench.json``, ``bench.md`` and ``answer_in_pool.png`` (answer-in-pool against k, one line per
configuration) to ``--out``. ``--split even|odd`` keeps every other question (tune on one half, report on
the other).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.cli import add_question_args, study_parser
from bench.harness.questions import load_questions
from bench.harness.reports import command_line, machine, report_head, utc_date
from bench.harness.retrieval import (
    has_answer,
    pool_has_answer,
    questions_file,
    retriever_settings,
    write_pool_report,
)
from bench.harness.stats import ci_summary, percentile
from evaluation.metrics import paired_bootstrap
from retriever.query_text import search_query, searched_text
from retriever.runtime import RetrieverRuntime
from retriever.search import WikiRetriever
from retriever.settings import RetrieverSettings, SearchMode

ROOT = Path(__file__).resolve().parent.parent
KS = (1, 3, 5, 10, 20, 50)
DEPTH = max(KS)
STAGES = ("embed_ms", "dense_ms", "bm25_ms", "fuse_ms", "rerank_encode_ms", "rerank_ms", "total_ms")


@dataclass(frozen=True)
class Config:
    """One retrieval configuration: a search mode, the second stage on or off, and setting overrides."""

    name: str
    mode: SearchMode
    rerank: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    second_encoder_only: bool = False  # dense search over the second stage's own collection
    with_passage: bool = False  # search for the question followed by the passage a model wrote for it
    note: str = ""


CONFIGS: dict[str, Config] = {
    c.name: c
    for c in (
        Config("hybrid", "hybrid", note="first stage alone: MiniLM + BM25, weighted RRF (k 5, BM25 0.5)"),
        Config("dense", "dense", note="MiniLM alone"),
        Config("bm25", "bm25", note="BM25 alone (Lucene, title + text)"),
        Config(
            "hybrid-rrf60",
            "hybrid",
            overrides={"rrf_k": 60, "rrf_bm25_weight": 1.0},
            note="textbook RRF (k 60, equal weights)",
        ),
        Config(
            "dense-second",
            "dense",
            second_encoder_only=True,
            note="the second stage's encoder alone (PARLEY_RETRIEVER_RERANK_MODEL)",
        ),
        Config(
            "hybrid+rescore",
            "hybrid",
            rerank=True,
            overrides={"rerank_candidates": 0},
            note="first stage's top 50 reordered by the second stage (no new candidates)",
        ),
        Config(
            "hybrid+second",
            "hybrid",
            rerank=True,
            note="the second stage as configured (by default the top 50 + its 20 nearest, RRF k 10)",
        ),
        Config(
            "hybrid+passage",
            "hybrid",
            with_passage=True,
            note="first stage, searching for the question and the passage the model wrote",
        ),
        Config(
            "hybrid+second+passage",
            "hybrid",
            rerank=True,
            with_passage=True,
            note="first and second stage, searching for the question and the written passage",
        ),
    )
}


def retriever_for(
    config: Config, rt: RetrieverRuntime, *, have_passages: bool = False
) -> WikiRetriever | None:
    """A WikiRetriever with the configuration's settings over the runtime's stores (None: not available:
    no second stage configured, or no written passages for a ``+passage`` configuration)."""
    if (config.second_encoder_only or config.rerank) and rt.reranker is None:
        return None
    if config.with_passage and not have_passages:
        return None
    if config.second_encoder_only:
        assert rt.reranker is not None
        stage = rt.settings.rerank_settings()
        return WikiRetriever(stage, rt.reranker.store, rt.reranker.embedder, None)
    settings = rt.settings.model_copy(update=config.overrides)
    return WikiRetriever(settings, rt.passages, rt.embedder, rt.wiki.bm25, rt.reranker)


async def run_config(
    wiki: WikiRetriever, config: Config, questions: list[dict[str, Any]], dedupe_cosine: float
) -> dict[str, Any]:
    in_pool: dict[int, list[float]] = {k: [] for k in KS}
    ranked: list[list[str]] = []
    texts: dict[str, str] = {}
    stages: dict[str, list[float]] = {s: [] for s in STAGES}

    def query(q: dict[str, Any]) -> str:
        return search_query(q["question"], q.get("search_text") if config.with_passage else None)

    for q in questions[:5]:  # warm-up: first JVM queries, ONNX sessions' first shapes
        await wiki.search(query(q), DEPTH, config.mode, with_vectors=True, rerank=config.rerank)
    for q in questions:
        timings: dict[str, float] = {}
        t = time.perf_counter()
        hits = await wiki.search(
            query(q), DEPTH, config.mode, with_vectors=True, timings=timings, rerank=config.rerank
        )
        timings["total_ms"] = (time.perf_counter() - t) * 1000
        for s in STAGES:
            if s in timings:
                stages[s].append(timings[s])
        for k in KS:
            in_pool[k].append(float(pool_has_answer(hits, k, q["answers"], dedupe_cosine)))
        ranked.append([h.pid for h in hits])
        texts.update({h.pid: h.text for h in hits})
    return {
        "in_pool": in_pool,
        "ranked": ranked,
        "texts": texts,
        "latency_ms": {
            s: {"p50": round(percentile(v, 50), 1), "p95": round(percentile(v, 95), 1)}
            for s, v in stages.items()
            if v
        },
    }


def pooled_recall(
    runs: dict[str, dict[str, Any]], questions: list[dict[str, Any]]
) -> tuple[dict[str, dict[int, float]], int]:
    """recall@k against the answer-bearing passages of all configurations' top 50, per configuration."""
    texts: dict[str, str] = {}
    for r in runs.values():
        texts.update(r["texts"])
    relevant: list[set[str]] = []
    for i, q in enumerate(questions):
        union = {pid for r in runs.values() for pid in r["ranked"][i]}
        relevant.append({pid for pid in union if has_answer([texts[pid]], q["answers"])})
    judged = [i for i, rel in enumerate(relevant) if rel]
    out: dict[str, dict[int, float]] = {}
    for name, r in runs.items():
        out[name] = {
            k: statistics.mean(len(relevant[i] & set(r["ranked"][i][:k])) / len(relevant[i]) for i in judged)
            if judged
            else 0.0
            for k in KS
        }
    return out, len(judged)


async def pool_latency(rt: RetrieverRuntime, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """Cold ``build_pool`` (k_wiki 5, Wikipedia only) as the service runs it, settings as configured."""
    rt.pools.sweep(now=time.time() + 2 * rt.settings.pool_ttl_s)  # an empty cache: every pool is built
    lat: list[float] = []
    stages: dict[str, list[float]] = {}
    for q in questions:
        t = time.perf_counter()
        pool = await rt.pools.build_pool(q["question"], k_wiki=5, k_web=0)
        lat.append((time.perf_counter() - t) * 1000)
        for key, v in pool.timings_ms.items():
            stages.setdefault(key, []).append(v)
    return {
        "questions": len(lat),
        "second_stage": rt.reranker.name if rt.reranker is not None else None,
        "p50": round(percentile(lat, 50), 1),
        "p95": round(percentile(lat, 95), 1),
        "stage_p50": {k: round(percentile(v, 50), 1) for k, v in stages.items()},
        "stage_p95": {k: round(percentile(v, 95), 1) for k, v in stages.items()},
    }


async def measure(
    settings: RetrieverSettings, questions: list[dict[str, Any]], names: list[str], latency_questions: int
) -> dict[str, Any]:
    rt = RetrieverRuntime.open(settings)
    try:
        rt.warm()
        runs: dict[str, dict[str, Any]] = {}
        skipped: list[str] = []
        have_passages = all("search_text" in q for q in questions)
        for name in names:
            config = CONFIGS[name]
            wiki = retriever_for(config, rt, have_passages=have_passages)
            if wiki is None:
                skipped.append(name)
                continue
            t = time.perf_counter()
            runs[name] = await run_config(wiki, config, questions, settings.dedupe_cosine)
            print(
                f"{name:16s} in-pool@5 {statistics.mean(runs[name]['in_pool'][5]):.3f} "
                f"@10 {statistics.mean(runs[name]['in_pool'][10]):.3f} ({time.perf_counter() - t:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
        recall, judged = pooled_recall(runs, questions)
        base = next(iter(runs))
        table = {}
        for name, r in runs.items():
            table[name] = {
                "note": CONFIGS[name].note,
                "answer_in_pool": {k: round(statistics.mean(v), 4) for k, v in r["in_pool"].items()},
                "recall": {k: round(v, 4) for k, v in recall[name].items()},
                "latency_ms": r["latency_ms"],
                "vs_first": {
                    f"@{k}": ci_summary(paired_bootstrap(runs[base]["in_pool"][k], r["in_pool"][k]))
                    for k in (5, 10)
                },
            }
        return {
            "questions": len(questions),
            "judged_questions": judged,
            "baseline": base,
            "configs": table,
            "skipped": skipped,
            "pool_latency_ms": await pool_latency(rt, questions[:latency_questions]),
        }
    finally:
        await rt.aclose()


def write_reports(out: Path, result: dict[str, Any]) -> str:
    """``bench.json``, ``bench.md`` and ``answer_in_pool.png`` in ``out``; the Markdown's text."""
    title = f"Pool holds a gold answer ({result['questions_file']}, n={result['questions']})"
    return write_pool_report(
        out, result, "\n".join(markdown(result)), KS, title=title, xlabel="k (passages in the pool)",
        log_x=True, figsize=(6.5, 4.2), markersize=3, legend_fontsize=8,
    )  # fmt: skip


def markdown(result: dict[str, Any]) -> list[str]:
    """The report's lines: answer-in-pool@k, recall@k and latency per configuration."""
    cfgs = result["configs"]
    written = (
        [
            f"Written passages (the `+passage` configurations, and the questions that have one): "
            f"`{result['search_texts']}`."
        ]
        if result.get("search_texts")
        else []
    )
    lines = [
        *report_head(
            "Does the pool hold the answer?",
            f"Command: `{result['command']}`  ",
            f"Machine: {result['machine']}; {result['date']}  ",
            f"Questions: {result['questions']} ({result['questions_file']}); recall@k over the "
            f"{result['judged_questions']} with an answer-bearing passage in some configuration's top 50.",
            *written,
        ),
        "## answer-in-pool@k (the pool of k_wiki = k, near-duplicates removed)",
        "",
        "| configuration | " + " | ".join(f"@{k}" for k in KS) + f" | @5 vs {result['baseline']} (95 % CI) |",
        "|---|" + "---|" * (len(KS) + 1),
    ]
    for name, c in cfgs.items():
        ci = c["vs_first"]["@5"]
        mark = "" if ci["excludes_0"] else " (may be noise)"
        lines.append(
            f"| {name} | "
            + " | ".join(f"{c['answer_in_pool'][k]:.3f}" for k in KS)
            + f" | {ci['diff']:+.3f} [{ci['low']:+.3f}, {ci['high']:+.3f}]{mark} |"
        )
    lines += [
        "",
        "## recall@k (pooled judgements)",
        "",
        "| configuration | " + " | ".join(f"@{k}" for k in KS) + " |",
    ]
    lines.append("|---|" + "---|" * len(KS))
    for name, c in cfgs.items():
        lines.append(f"| {name} | " + " | ".join(f"{c['recall'][k]:.3f}" for k in KS) + " |")
    lines += [
        "",
        "## Latency per search of the top 50, ms (p50 / p95, one question at a time)",
        "",
        "| configuration | " + " | ".join(s.removesuffix("_ms") for s in STAGES) + " |",
        "|---|" + "---|" * len(STAGES),
    ]
    for name, c in cfgs.items():
        lat = c["latency_ms"]
        cells = [f"{lat[s]['p50']} / {lat[s]['p95']}" if s in lat else "–" for s in STAGES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    pl = result["pool_latency_ms"]
    lines += [
        "",
        f"Pool service, cold `build_pool` (k_wiki 5, second stage: {pl['second_stage'] or 'none'}, "
        f"{pl['questions']} questions): p50 {pl['p50']} ms, p95 **{pl['p95']} ms**; "
        f"stage p50 {pl['stage_p50']}, p95 {pl['stage_p95']}.",
        "",
        "Configurations: " + "; ".join(f"**{n}** {c['note']}" for n, c in cfgs.items()) + ".",
        *(
            [f"Skipped (no second stage configured): {', '.join(result['skipped'])}."]
            if result["skipped"]
            else []
        ),
        "",
        "![answer-in-pool@k](answer_in_pool.png)",
        "",
    ]
    return lines


def load_search_texts(path: Path) -> dict[str, str]:
    """Each question id's written passage, as the retriever searches it (``searched_text``), from an
    evaluation folder's one ``pools.passage-*.jsonl`` or from that file."""
    if path.is_dir():
        files = sorted(path.glob("pools.passage-*.jsonl"))
        if len(files) != 1:
            raise SystemExit(
                f"{path} holds {len(files)} pools.passage-*.jsonl files; name the one to use"
                if files
                else f"{path} has no pools.passage-*.jsonl: run the evaluation with search_query=passage"
            )
        path = files[0]
    texts: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            search = obj.get("search") or {}
            # What the debate searched with (``SearchPassage.from_record``): the cleaned passage in
            # ``extra``, never the raw reply; an empty one meant the question alone.
            text = (search.get("extra") or {}).get("search_text")
            item_id = str(obj["id"])
        except (json.JSONDecodeError, KeyError, AttributeError) as e:
            raise SystemExit(f"{path}:{n}: not a pool line with its search ({e})") from e
        cleaned = searched_text(text) if isinstance(text, str) else None
        if cleaned:
            texts[item_id] = cleaned
    return texts


def with_search_texts(questions: list[dict[str, Any]], texts: dict[str, str]) -> list[dict[str, Any]]:
    """The questions that have a written passage, each with it as ``search_text``."""
    return [{**q, "search_text": texts[str(q["id"])]} for q in questions if str(q.get("id")) in texts]


def main(argv: list[str] | None = None) -> None:
    ap = study_parser(__doc__)
    add_question_args(ap, ROOT / "reports" / "pool-quality")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--latency-questions", type=int, default=200)
    ap.add_argument("--data-dir", type=Path, default=None, help="override PARLEY_RETRIEVER_DATA_DIR")
    ap.add_argument(
        "--search-texts",
        type=Path,
        default=None,
        help="an evaluation folder run with search_query=passage (or its pools.passage-*.jsonl): "
        "the written passages the +passage configurations search with",
    )
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    settings = retriever_settings(args.data_dir)
    questions = load_questions(args.questions, args.split, args.limit)
    if args.search_texts is not None:
        asked = len(questions)
        questions = with_search_texts(questions, load_search_texts(args.search_texts))
        if not questions:
            raise SystemExit(f"none of the {asked} questions has a written passage in {args.search_texts}")
        print(f"{len(questions)} of {asked} questions have a written passage", file=sys.stderr)
    result = asyncio.run(measure(settings, questions, names, args.latency_questions))
    result.update(
        {
            "command": command_line("bench.pool_quality", argv, env="HF_HUB_OFFLINE=1"),
            "questions_file": questions_file(args),
            "search_texts": str(args.search_texts) if args.search_texts is not None else None,
            "machine": machine(),
            "date": utc_date(),
            "settings": {
                k: getattr(settings, k)
                for k in (
                    "rrf_k",
                    "rrf_bm25_weight",
                    "fusion_depth",
                    "dedupe_cosine",
                    "rerank_model",
                    "rerank_depth",
                    "rerank_candidates",
                    "rerank_rrf_k",
                    "rerank_first_stage_weight",
                )
            },
        }
    )
    print(write_reports(args.out, result))


if __name__ == "__main__":
    main()

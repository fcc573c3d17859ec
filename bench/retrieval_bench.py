"""Retrieval benchmark: index build speed, pool latency, and answer recall of dense / BM25 / hybrid.

Run (from the repository root; ~15 min on 2 cores for the full bundled corpus):

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python -m bench.retrieval_bench \
        --questions data/nq_open_vital_dev.jsonl --data-dir .parley/bench-index --out reports/retrieval

1. builds the dense + BM25 index of the full Vital Articles corpus in a fresh data dir (timed; the
   model load is timed separately so passages/s measures encoding + upserts);
2. pool latency p50/p95 over the first 200 questions of nq_open_vital_dev.jsonl, Wikipedia only
   (k_wiki=5, k_web=0), each question once (cold, no cache hits), then the same questions again
   (cache hits) — on the embedded store, in-process, as the service's handler runs it; then the same
   200 cold pools over HTTP through the real app under uvicorn;
3. answer recall@k (k = 1..20) over all questions for each mode: a hit when a gold alias, SQuAD-
   normalised, occurs as a whole-word sequence in the normalised text of one of the top-k passages
   (DPR's "has answer" convention: passage text, not title).

Writes ``bench.json``, ``bench.md`` and ``recall_at_k.png`` to ``--out``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script (``python bench/<this file>``, as its committed report and docs write it), Python
# puts bench/ on the path, not the repository: add the repository so the harness and the test helpers
# import as they do under ``python -m bench.<this module>``.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncio
import json
import shutil
import statistics
import time
from typing import Any

from bench.harness.cli import study_parser
from bench.harness.plots import curves
from bench.harness.questions import load_questions
from bench.harness.reports import command_line, machine, utc_date, write_json
from bench.harness.retrieval import has_answer
from bench.harness.stats import percentile
from retriever.corpus import read_vital
from retriever.indexer import build_index, index_stats, make_embedder
from retriever.runtime import RetrieverRuntime
from retriever.search import WikiRetriever
from retriever.settings import RetrieverSettings

ROOT = Path(__file__).resolve().parent.parent

MODES = ("dense", "bm25", "hybrid")
# A reference row: textbook RRF (k = 60, equal weights) next to the configured hybrid.
REFERENCE = "hybrid_rrf60_equal"
ROWS = (*MODES, REFERENCE)


def build(settings: RetrieverSettings, limit: int | None) -> dict[str, Any]:
    """The Vital index in a fresh data dir through ``build_index`` (one pass: passage store + BM25)."""
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    passages = list(read_vital(settings.passage_words, limit=limit))
    emb = make_embedder(settings)
    t = time.perf_counter()
    _ = emb.dim  # loads (and on first use exports) the encoder outside the timed build
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    report = build_index(settings, passages, corpus="vital", embedder=emb, progress=True)
    build_s = time.perf_counter() - t
    stats = index_stats(settings)
    return {
        "articles": limit or "all",
        "encoder": settings.encoder,
        "passages": report.passages,
        "model_load_s": round(load_s, 2),
        "dense_build_s": round(build_s, 1),
        "dense_passages_per_s": round(report.passages / build_s, 1),
        "bm25_build_s": 0.0,  # written in the same pass
        "bm25_docs": report.bm25_docs,
        "total_build_s": round(load_s + build_s, 1),
        "store_disk_mb": round((stats["store_disk_bytes"] or 0) / 2**20, 1),
        "bm25_disk_mb": round(stats["bm25_disk_bytes"] / 2**20, 1),
    }


async def evaluate(
    settings: RetrieverSettings, questions: list[dict[str, Any]], n_latency: int, kmax: int
) -> dict[str, Any]:
    rt = RetrieverRuntime.open(settings)
    try:
        rt.warm()
        # Start from an empty pool cache so "cold" really builds every pool (earlier runs left pools).
        rt.pools.sweep(now=time.time() + 2 * settings.pool_ttl_s)
        # Pool latency, Wikipedia only, default mode (hybrid when BM25 exists).
        lat_cold: list[float] = []
        lat_cached: list[float] = []
        stages: dict[str, list[float]] = {}
        for q in questions[:n_latency]:
            t = time.perf_counter()
            pool = await rt.pools.build_pool(q["question"], k_wiki=5, k_web=0)
            lat_cold.append((time.perf_counter() - t) * 1000)
            for key, v in pool.timings_ms.items():
                stages.setdefault(key, []).append(v)
        for q in questions[:n_latency]:
            t = time.perf_counter()
            pool = await rt.pools.build_pool(q["question"], k_wiki=5, k_web=0)
            lat_cached.append((time.perf_counter() - t) * 1000)
            assert pool.cached
        # Recall@k per mode over all questions.
        recall: dict[str, list[float]] = {}
        search_ms: dict[str, list[float]] = {}
        reference = WikiRetriever(
            settings.model_copy(update={"rrf_k": 60, "rrf_bm25_weight": 1.0}),
            rt.passages,
            rt.embedder,
            rt.wiki.bm25,
        )
        for mode in ROWS:
            hits_at = [0] * (kmax + 1)
            times = []
            wiki, used = (reference, "hybrid") if mode == REFERENCE else (rt.wiki, mode)
            for q in questions:
                t = time.perf_counter()
                hits = await wiki.search(q["question"], kmax, used)  # type: ignore[arg-type]
                times.append((time.perf_counter() - t) * 1000)
                texts = [h.text for h in hits]
                first = next((i for i in range(1, kmax + 1) if has_answer(texts[:i], q["answers"])), None)
                if first is not None:
                    for k in range(first, kmax + 1):
                        hits_at[k] += 1
            recall[mode] = [hits_at[k] / len(questions) for k in range(1, kmax + 1)]
            search_ms[mode] = times
        return {
            "pool_latency_ms": {
                "questions": len(lat_cold),
                "mode": rt.wiki.default_mode(),
                "cold_p50": round(percentile(lat_cold, 50), 1),
                "cold_p95": round(percentile(lat_cold, 95), 1),
                "cold_mean": round(statistics.mean(lat_cold), 1),
                "cached_p50": round(percentile(lat_cached, 50), 1),
                "cached_p95": round(percentile(lat_cached, 95), 1),
                "stage_p50": {k: round(percentile(v, 50), 1) for k, v in stages.items()},
            },
            "search_latency_ms_p50": {m: round(percentile(v, 50), 1) for m, v in search_ms.items()},
            "search_latency_ms_p95": {m: round(percentile(v, 95), 1) for m, v in search_ms.items()},
            "recall_questions": len(questions),
            "recall_at_k": {m: [round(x, 4) for x in r] for m, r in recall.items()},
        }
    finally:
        await rt.aclose()


def http_latency(settings: RetrieverSettings, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """The same cold pools through the real service: uvicorn on a free port, one client, sequential POSTs.

    A fresh pools collection keeps the earlier in-process run's cache out of the measurement.
    """
    import socket
    import threading

    import httpx
    import uvicorn

    from retriever.app import create_app

    fresh = settings.model_copy(update={"pools_collection": f"bench_http_{int(time.time())}", "warmup": True})
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(fresh), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    lat: list[float] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for q in questions:
                t = time.perf_counter()
                r = client.post("/v1/pools", json={"question": q["question"], "k_wiki": 5, "k_web": 0})
                lat.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
                assert not r.json()["cached"]
    finally:
        server.should_exit = True
        thread.join(timeout=60)
    return {
        "questions": len(lat),
        "p50": round(percentile(lat, 50), 1),
        "p95": round(percentile(lat, 95), 1),
    }


def write_reports(out: Path, result: dict[str, Any]) -> None:
    """``bench.json``, ``bench.md`` and ``recall_at_k.png`` in ``out``."""
    write_json(out / "bench.json", result)
    ev, b, rrf = result["eval"], result["build"], result["rrf"]
    r = ev["recall_at_k"]
    lines = [
        "# Retrieval benchmark",
        "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}; date {result['date']}",
        "",
        "## Index build (full bundled Vital Articles corpus)",
        "",
        *([f"Built by: `{b['command']}`", ""] if b.get("command") else []),
        "| encoder | passages | model load | build (dense + BM25, one pass) | passages/s | store on disk "
        "| BM25 on disk |",
        "|---|---|---|---|---|---|---|",
        f"| {b.get('encoder', 'torch')} | {b['passages']} | {b['model_load_s']} s | {b['dense_build_s']} s "
        f"| {b['dense_passages_per_s']} | {b['store_disk_mb']} MB | {b['bm25_disk_mb']} MB |",
        "",
        f"## Pool latency (Wikipedia only, k_wiki=5, mode {ev['pool_latency_ms']['mode']}, "
        f"{ev['pool_latency_ms']['questions']} questions, embedded store, in-process)",
        "",
        "| | p50 | p95 |",
        "|---|---|---|",
        f"| cold (built) | {ev['pool_latency_ms']['cold_p50']} ms | {ev['pool_latency_ms']['cold_p95']} ms |",
        f"| cached | {ev['pool_latency_ms']['cached_p50']} ms | {ev['pool_latency_ms']['cached_p95']} ms |",
        f"| cold, over HTTP (uvicorn, POST /v1/pools) | {result['http_latency_ms']['p50']} ms "
        f"| {result['http_latency_ms']['p95']} ms |",
        "",
        f"Stage medians (cold): {ev['pool_latency_ms']['stage_p50']}",
        "",
        f"## Answer recall ({ev['recall_questions']} questions of nq_open_vital_dev)",
        "",
        "| mode | R@1 | R@5 | R@10 | R@20 | search p50 | search p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in ROWS:
        lines.append(
            f"| {m} | {r[m][0]:.3f} | {r[m][4]:.3f} | {r[m][9]:.3f} | {r[m][-1]:.3f} "
            f"| {ev['search_latency_ms_p50'][m]} ms | {ev['search_latency_ms_p95'][m]} ms |"
        )
    lines += [
        "",
        f"hybrid = weighted RRF, k={rrf['k']}, BM25 weight {rrf['bm25_weight']} (dense 1), "
        f"top-{rrf['depth']} of each; {REFERENCE} = textbook RRF (k=60, equal weights), for reference.",
        "",
        "![recall@k](recall_at_k.png)",
        "",
    ]
    (out / "bench.md").write_text("\n".join(lines), encoding="utf-8")
    curves(
        out / "recall_at_k.png",
        list(range(1, len(r[ROWS[0]]) + 1)),
        {m: r[m] for m in ROWS},
        xlabel="k (passages)",
        ylabel="answer recall@k",
        title=f"Answer recall on nq_open_vital_dev (n={ev['recall_questions']})",
        markersize=3,
    )


def main() -> None:
    ap = study_parser(__doc__)
    ap.add_argument("--data-dir", type=Path, default=ROOT / ".parley" / "bench-index")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "retrieval")
    ap.add_argument("--questions", type=Path, required=True, help="NQ-open JSONL (question, answers)")
    ap.add_argument("--limit", type=int, default=None, help="articles to index (default: all)")
    ap.add_argument("--latency-questions", type=int, default=200)
    ap.add_argument("--kmax", type=int, default=20)
    ap.add_argument("--skip-build", action="store_true", help="reuse the index in --data-dir")
    ap.add_argument("--encoder", choices=["onnx-int8", "onnx-fp32", "torch"], default=None)
    args = ap.parse_args()

    extra = {"encoder": args.encoder} if args.encoder else {}
    settings = RetrieverSettings(data_dir=args.data_dir.resolve(), warmup=False, **extra)
    if args.skip_build:  # keep the figures (and the command) of the run that built the index
        old = json.loads((args.out / "bench.json").read_text())
        build_res = old["build"]
        build_res.setdefault("command", old.get("command"))
    else:
        build_res = build(settings, args.limit)
    print(json.dumps(build_res, indent=2), flush=True)
    questions = load_questions(args.questions)
    ev = asyncio.run(evaluate(settings, questions, args.latency_questions, args.kmax))
    http_res = http_latency(settings, questions[: args.latency_questions])
    print("http", http_res, flush=True)
    result = {
        "command": command_line("bench.retrieval_bench", env="HF_HUB_OFFLINE=1"),
        "machine": machine(),
        "date": utc_date(),
        "build": build_res,
        "rrf": {"k": settings.rrf_k, "bm25_weight": settings.rrf_bm25_weight, "depth": settings.fusion_depth},
        "eval": ev,
        "http_latency_ms": http_res,
    }
    write_reports(args.out, result)
    print(json.dumps(ev, indent=2))


if __name__ == "__main__":
    main()

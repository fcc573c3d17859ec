"""Scale benchmark of the retriever: ingestion, memory, disk, reopen, query latency, ANN recall and
pool latency at 100k and 1M passages, plus the CPU encoders side by side and a 21M projection.

Run (from the repository root; about 30 minutes on 2 cores for both sizes):

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.scale_bench --sizes 100000,1000000 --out reports/scale

Data: deterministic synthetic passages (``parley_testing.synthetic_corpus``: ~600 characters, a unique
marker word each). Vectors: the real encoder's for the first ``--real-sample`` passages, clustered
synthetic vectors (low-dimensional latent clusters projected to 384-d, the structure of sentence
embeddings) for the rest; the report says so. Each phase runs in its own process so its peak RSS is its
own: ingest (``parley index build`` path with precomputed vectors, BM25 in the same pass), serve
(reopen, first answer, dense/hybrid latency, ANN recall@10 against the store's exact search), pools
(the retriever service under uvicorn, ``POST /v1/pools`` end to end, its RSS read from /proc).
The encoder phase runs on real Vital passages: sentence-transformers alone (today's path) against the
ONNX int8 encoder alone and against the whole build with it in 1 and 2 processes, in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.plots import figure, save
from bench.harness.procfs import memory_mib
from bench.harness.stats import interpolated_percentile
from parley_testing.synthetic_corpus import passage_text, vectors_like, write_jsonl
from services.processes import stop_process

ROOT = Path(__file__).resolve().parent.parent


def _settings(data: Path, **kw: Any) -> Any:
    from retriever.settings import RetrieverSettings

    return RetrieverSettings(data_dir=data, warmup=False, **kw)


# ---------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------


def real_vectors(work: Path, sample: int) -> np.ndarray:
    """The real encoder's vectors of the first ``sample`` synthetic passages (computed once)."""
    cache = work / f"real-{sample}.npy"
    if cache.exists():
        return np.asarray(np.load(cache), dtype=np.float32)
    from retriever.encoders import make_embedder

    emb = make_embedder(_settings(work / "unused"))
    vecs = emb.embed([". ".join(passage_text(i)) for i in range(sample)])
    work.mkdir(parents=True, exist_ok=True)
    np.save(cache, vecs)
    return vecs


def prepare(work: Path, n: int, real_sample: int) -> tuple[Path, Path]:
    """Corpus JSONL and vector shards for ``n`` passages (reused when already there)."""
    corpus, shards = work / f"corpus-{n}.jsonl", work / f"vectors-{n}"
    done = work / f"prepared-{n}.json"
    if done.exists():
        return corpus, shards
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    if not corpus.exists():
        write_jsonl(corpus, n)
    shutil.rmtree(shards, ignore_errors=True)
    shards.mkdir()
    real = real_vectors(work, real_sample)[: min(real_sample, n)]
    np.save(shards / "part-00000.npy", real)
    step = 100_000
    for i, start in enumerate(range(real_sample, n, step), start=1):
        np.save(shards / f"part-{i:05d}.npy", vectors_like(real, min(step, n - start), start=start))
    done.write_text(json.dumps({"n": n, "real_sample": real_sample, "seconds": time.perf_counter() - t}))
    return corpus, shards


# ---------------------------------------------------------------------------------------------------
# Phases (each in its own process: ``python -m bench.scale_bench _phase ...``)
# ---------------------------------------------------------------------------------------------------


def phase_ingest(data: Path, corpus: Path, shards: Path) -> dict[str, Any]:
    from retriever.indexer import build_index, index_stats
    from retriever.ingest import FileSource

    shutil.rmtree(data, ignore_errors=True)
    peak = _PeakMemory()
    s = _settings(data, commit_every=20_000)
    src = FileSource(corpus, kind="jsonl", corpus="synthetic", max_words=s.passage_words)
    t = time.perf_counter()
    report = build_index(s, src, corpus="synthetic", vectors=shards, verify_vectors=False, progress=False)
    total_s = time.perf_counter() - t
    ing = report.ingest
    assert ing is not None
    st = index_stats(s)
    return {
        "passages": report.passages,
        "stream_s": round(ing.seconds, 1),
        "stream_passages_per_s": round(report.passages / ing.seconds, 1),
        "optimize_s": round(total_s - ing.seconds, 1),
        "total_s": round(total_s, 1),
        "total_passages_per_s": round(report.passages / total_s, 1),
        "store_disk_mb": round((st["store_disk_bytes"] or 0) / 2**20, 1),
        "bm25_disk_mb": round(st["bm25_disk_bytes"] / 2**20, 1),
        "memory_mib": memory_mib(),
        "peak_mib": peak.stop(),
    }


class _PeakMemory:
    """Samples /proc/self/status every 0.2 s: the peaks of anonymous and file-backed resident memory
    apart (VmHWM mixes them, and memory-mapped store files count while they are read)."""

    def __init__(self) -> None:
        import threading

        self.peak = {"RssAnon": 0.0, "RssFile": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            mem = memory_mib()
            for k in self.peak:
                self.peak[k] = max(self.peak[k], mem.get(k, 0.0))

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return self.peak


def phase_serve(data: Path, n: int, real_sample: int, queries: int) -> dict[str, Any]:
    import asyncio

    from retriever.runtime import RetrieverRuntime

    s = _settings(data)
    t = time.perf_counter()
    rt = RetrieverRuntime.open(s)
    first_q = ". ".join(passage_text(min(real_sample, n) // 2))
    hits = asyncio.run(rt.wiki.search(first_q, 5, "dense"))
    reopen_s = time.perf_counter() - t
    assert hits and hits[0].pid == f"synthetic:s{min(real_sample, n) // 2}", hits[:1]
    rng = np.random.default_rng(3)
    real_idx = rng.integers(0, min(real_sample, n), queries // 2)
    real_q = rt.embedder.embed([passage_text(int(i))[1][:200] for i in real_idx])
    real = real_vectors(data.parent, real_sample)
    syn_q = vectors_like(real, queries - len(real_idx), start=10**9)  # new points from the same mix
    qvecs = np.vstack([real_q, syn_q])
    dense_ms: list[float] = []
    recall: dict[str, list[float]] = {"real": [], "synthetic": []}
    for k, q in enumerate(qvecs):
        t = time.perf_counter()
        ann = rt.passages.search(q, 10)
        dense_ms.append((time.perf_counter() - t) * 1000)
        if k % 3 == 0:  # exact search reads every vector: a third of the queries
            exact = rt.passages.search(q, 10, exact=True)
            kind = "real" if k < len(real_q) else "synthetic"
            recall[kind].append(len({h.id for h in ann} & {h.id for h in exact}) / 10)
    texts = [passage_text(int(i))[1][:200] for i in rng.integers(0, n, queries)]
    e2e_dense, e2e_hybrid = [], []

    async def timed() -> None:
        await rt.wiki.search(texts[0], 5, "hybrid")  # opens the JVM searcher outside the timings
        for text in texts:
            t = time.perf_counter()
            await rt.wiki.search(text, 5, "dense")
            e2e_dense.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await rt.wiki.search(text, 5, "hybrid")
            e2e_hybrid.append((time.perf_counter() - t) * 1000)

    asyncio.run(timed())
    mem = memory_mib()
    rt.close()
    lat = {
        "p50": interpolated_percentile(dense_ms, 50),
        "p95": interpolated_percentile(dense_ms, 95),
        "p99": interpolated_percentile(dense_ms, 99),
    }
    return {
        "reopen_first_answer_s": round(reopen_s, 2),
        "dense_store_ms": lat,
        "dense_with_embedding_ms": {
            p: interpolated_percentile(e2e_dense, int(p[1:])) for p in ("p50", "p95", "p99")
        },
        "hybrid_ms": {p: interpolated_percentile(e2e_hybrid, int(p[1:])) for p in ("p50", "p95", "p99")},
        "ann_recall_at_10": round(float(np.mean(recall["real"] + recall["synthetic"])), 4),
        "ann_recall_at_10_by_query": {k: round(float(np.mean(v)), 4) for k, v in recall.items() if v},
        "recall_queries": len(recall["real"]) + len(recall["synthetic"]),
        "memory_mib": mem,
    }


def phase_pools(data: Path, n: int, requests: int) -> dict[str, Any]:
    import httpx

    from parley_testing.scripted_llm import free_port

    # Cold pools only: a pools shard left by an earlier run would answer these questions from its cache.
    shutil.rmtree(data / "edge" / "knowledge_pools", ignore_errors=True)
    port = free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PARLEY_RETRIEVER_DATA_DIR": str(data),
        "PARLEY_RETRIEVER_PORT": str(port),
        "PARLEY_RETRIEVER_LOG_LEVEL": "warning",
    }
    proc = subprocess.Popen([sys.executable, "-m", "parley_cli", "retriever"], cwd=ROOT, env=env)
    lat: list[float] = []
    stages: dict[str, list[float]] = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    if client.get("/healthz").json().get("index_ready"):
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            rng = np.random.default_rng(5)
            for i in rng.integers(0, n, requests):
                q = f"Which topic has marker zq{i}x? " + passage_text(int(i))[1][:120]
                t = time.perf_counter()
                r = client.post("/v1/pools", json={"question": q, "k_wiki": 5, "k_web": 0})
                lat.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
                for stage, ms in (r.json().get("timings_ms") or {}).items():
                    stages.setdefault(stage, []).append(float(ms))
        mem = memory_mib(proc.pid)
    finally:
        stop_process(proc, 60)
    return {
        "requests": len(lat),
        "p50_ms": interpolated_percentile(lat, 50),
        "p95_ms": interpolated_percentile(lat, 95),
        "stage_p50_ms": {k: interpolated_percentile(v, 50) for k, v in stages.items()},
        "stage_p95_ms": {k: interpolated_percentile(v, 95) for k, v in stages.items()},
        "service_memory_mib": mem,
    }


def phase_encoders(work: Path, passages: int) -> dict[str, Any]:
    """Passages/s of today's sentence-transformers encoder alone vs the ONNX int8 path, one run."""
    from retriever.corpus import read_vital
    from retriever.encoders import make_embedder
    from retriever.indexer import build_index

    items = list(read_vital(100))[:passages]
    texts = [p.embed_text() for p in items]
    out: dict[str, Any] = {"passages": len(items)}
    st = make_embedder(_settings(work / "enc", encoder="torch"))
    onnx = make_embedder(_settings(work / "enc"))
    _ = st.dim, onnx.dim
    t = time.perf_counter()
    st.embed(texts)
    out["torch_alone_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
    t = time.perf_counter()
    onnx.embed(texts)
    out["onnx_int8_alone_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
    for workers in (1, 2):
        data = work / f"enc-build-{workers}"
        shutil.rmtree(data, ignore_errors=True)
        s = _settings(data, commit_every=1000)
        t = time.perf_counter()
        build_index(s, items, corpus="vital", workers=workers, progress=False)
        out[f"onnx_int8_build_{workers}proc_per_s"] = round(len(items) / (time.perf_counter() - t), 1)
        shutil.rmtree(data, ignore_errors=True)
    base = out["torch_alone_per_s"]
    out["ratios_vs_torch_alone"] = {
        k: round(v / base, 2) for k, v in out.items() if k.endswith("_per_s") and k != "torch_alone_per_s"
    }
    return out


def run_phase(args: list[str]) -> dict[str, Any]:
    """One phase in a fresh process; its JSON result is the last line it prints."""
    res = subprocess.run(
        [sys.executable, "-m", "bench.scale_bench", "_phase", *args],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RuntimeError(f"phase {args[0]} failed:\n{res.stderr[-3000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


# ---------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------


def projection(sizes: dict[int, dict[str, Any]], enc: dict[str, Any] | None) -> list[str]:
    """21M passages from the largest measured size, scaled linearly (optimize as n log n)."""
    n = max(sizes)
    r = sizes[n]
    f = 21_000_000 / n
    anon = {k: v["pools"]["service_memory_mib"].get("RssAnon", 0.0) / 1024 for k, v in sizes.items()}
    if len(anon) > 1:  # linear in the passages: fixed part (encoder, JVM, service) + per-passage part
        lo = min(anon)
        per_passage = (anon[n] - anon[lo]) / (n - lo)
        ram, how = anon[n] + per_passage * (21e6 - n), f"linear fit of service RssAnon at {lo:,} and {n:,}"
    else:
        ram, how = anon[n] * f, f"service RssAnon at {n:,} scaled linearly (an upper bound)"
    disk = (r["ingest"]["store_disk_mb"] + r["ingest"]["bm25_disk_mb"]) * f / 1024
    optimize_h = r["ingest"]["optimize_s"] * f * np.log(21e6) / np.log(n) / 3600
    import_h = 21e6 / r["ingest"]["stream_passages_per_s"] / 3600
    lines = [
        "| 21M passages | projection | from |",
        "|---|---|---|",
        f"| RAM while serving | ~{ram:.1f} GB resident (int8 codes, HNSW links, ids, encoder, JVM); original "
        f"vectors and payloads stay on disk, paged in as read | {how} |",
        f"| disk | ~{disk:.0f} GB (store + BM25) | {n:,} scaled linearly |",
        f"| import of precomputed vectors | ~{import_h:.1f} h streaming + ~{optimize_h:.1f} h HNSW build "
        f"| {r['ingest']['stream_passages_per_s']:,.0f} passages/s; HNSW build scaled n log n |",
    ]
    if enc is not None:
        best = max(enc["onnx_int8_build_1proc_per_s"], enc["onnx_int8_build_2proc_per_s"])
        lines.append(
            f"| encoding on 2 cores (ONNX int8) | ~{21e6 / best / 86400:.1f} days "
            f"| {best} passages/s measured |"
        )
    lines.append(
        "| encoding on one GPU | not measured here (no GPU on this machine): hours at the thousands of "
        "passages/s a GPU gives MiniLM; `parley index build --device cuda` or vectors imported as .npy "
        "| - |"
    )
    return lines


def write_report(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    sizes = {int(k): v for k, v in result["sizes"].items()}
    lines = [
        "# Retriever at scale",
        "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}; date {result['date']}. Layout: Qdrant Edge {result['edge']}, "
        "HNSW m 16, ef_construct 100, hnsw_ef 512, int8 scalar codes in RAM, oversampling 2 with "
        "rescoring, vectors and payloads on disk; BM25 (Lucene) written in the same pass.",
        "",
        f"Data: synthetic passages; the first {result['real_sample']:,} carry the real encoder's vectors, "
        "the rest random convex mixes of three of those plus noise, so all lie where the encoder's "
        "vectors lie. Texts: Zipf-distributed pseudo-words over a 30,000-word vocabulary. ANN recall is "
        "against the store's exact search, over queries "
        "embedded from passage texts and over new mixed vectors.",
        "",
        "| passages | ingest (precomputed vectors) | HNSW build | peak RSS ingesting | disk (store + BM25) "
        "| reopen + first answer | dense p50/p95/p99 | dense + embed p95 | hybrid p50/p95/p99 "
        "| ANN recall@10 | POST /v1/pools p50/p95 | service RSS (anon / file) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, r in sorted(sizes.items()):
        ing, sv, pl = r["ingest"], r["serve"], r["pools"]
        d, h, m = sv["dense_store_ms"], sv["hybrid_ms"], pl["service_memory_mib"]
        lines.append(
            f"| {n:,} | {ing['stream_passages_per_s']:,.0f} passages/s ({ing['stream_s']} s) "
            f"| {ing['optimize_s']} s "
            f"| {ing['memory_mib']['VmHWM'] / 1024:.2f} GB "
            f"(anon {ing.get('peak_mib', {}).get('RssAnon', 0) / 1024:.2f}) "
            f"| {ing['store_disk_mb'] / 1024:.2f} + {ing['bm25_disk_mb'] / 1024:.2f} GB "
            f"| {sv['reopen_first_answer_s']} s | {d['p50']} / {d['p95']} / {d['p99']} ms "
            f"| {sv['dense_with_embedding_ms']['p95']} ms | {h['p50']} / {h['p95']} / {h['p99']} ms "
            f"| {sv['ann_recall_at_10']} | {pl['p50_ms']} / {pl['p95_ms']} ms "
            f"| {m.get('RssAnon', 0) / 1024:.2f} / {m.get('RssFile', 0) / 1024:.2f} GB |"
        )
    enc = result.get("encoders")
    if enc:
        rt = enc["ratios_vs_torch_alone"]
        lines += [
            "",
            f"## CPU encoders, side by side ({enc['passages']} real Vital passages, one run)",
            "",
            "| path | passages/s | vs sentence-transformers alone |",
            "|---|---|---|",
            f"| sentence-transformers (torch) encoder alone | {enc['torch_alone_per_s']} | 1.00 |",
            f"| ONNX int8 encoder alone | {enc['onnx_int8_alone_per_s']} | {rt['onnx_int8_alone_per_s']} |",
            f"| whole build, ONNX int8, 1 process | {enc['onnx_int8_build_1proc_per_s']} "
            f"| {rt['onnx_int8_build_1proc_per_s']} |",
            f"| whole build, ONNX int8, 2 processes | {enc['onnx_int8_build_2proc_per_s']} "
            f"| {rt['onnx_int8_build_2proc_per_s']} |",
        ]
    lines += ["", "## 21M passages, projected", "", *projection(sizes, enc), "", "![scale](scale.png)", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    plot(out, sizes)


def plot(out: Path, sizes: dict[int, dict[str, Any]]) -> None:
    """Query latency, the service's memory and the ingest rate against the corpus size."""
    ns = sorted(sizes)
    fig, axes = figure((12, 3.6), nrows=1, ncols=3)
    for key, label in (("dense_store_ms", "dense (store)"), ("hybrid_ms", "hybrid (+ embed, BM25)")):
        axes[0].plot(ns, [sizes[n]["serve"][key]["p95"] for n in ns], marker="o", label=f"{label} p95")
    axes[0].plot(ns, [sizes[n]["pools"]["p95_ms"] for n in ns], marker="o", label="POST /v1/pools p95")
    axes[0].set_xscale("log")
    axes[0].set_ylabel("ms")
    axes[0].set_title("query latency")
    axes[0].legend(fontsize=7)
    axes[1].bar(
        [f"{n:,}" for n in ns], [sizes[n]["pools"]["service_memory_mib"].get("RssAnon", 0) for n in ns]
    )
    axes[1].set_title("service RSS (anonymous), MiB")
    axes[2].bar([f"{n:,}" for n in ns], [sizes[n]["ingest"]["stream_passages_per_s"] for n in ns])
    axes[2].set_title("ingest, precomputed vectors (passages/s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    save(fig, out / "scale.png", dpi=110)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_phase":
        name, rest = sys.argv[2], sys.argv[3:]
        if name == "ingest":
            res = phase_ingest(Path(rest[0]), Path(rest[1]), Path(rest[2]))
        elif name == "serve":
            res = phase_serve(Path(rest[0]), int(rest[1]), int(rest[2]), int(rest[3]))
        elif name == "pools":
            res = phase_pools(Path(rest[0]), int(rest[1]), int(rest[2]))
        else:
            res = phase_encoders(Path(rest[0]), int(rest[1]))
        print(json.dumps(res))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "scale")
    ap.add_argument("--work-dir", type=Path, default=ROOT / ".parley" / "scale")
    ap.add_argument("--real-sample", type=int, default=5000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--pool-requests", type=int, default=200)
    ap.add_argument("--encoder-passages", type=int, default=3000, help="0 skips the encoder comparison")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep the indexes and the ingest and encoder figures of the last run in --out; measure the rest",
    )
    args = ap.parse_args()
    work = args.work_dir.resolve()
    result: dict[str, Any] = {
        "command": " ".join(["HF_HUB_OFFLINE=1", "python -m bench.scale_bench", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), "
        f"Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "edge": "0.9.0",
        "real_sample": args.real_sample,
        "sizes": {},
    }
    previous = json.loads((args.out / "bench.json").read_text()) if args.reuse else {}
    result["sizes"] = dict(previous.get("sizes", {}))  # sizes not measured again keep their figures
    if previous.get("encoders"):
        result["encoders"] = previous["encoders"]
    elif args.encoder_passages:
        result["encoders"] = run_phase(["encoders", str(work), str(args.encoder_passages)])
        print("encoders", result["encoders"], flush=True)
    for n in (int(x) for x in args.sizes.split(",")):
        corpus, shards = prepare(work, n, args.real_sample)
        data = work / f"index-{n}"
        kept = previous.get("sizes", {}).get(str(n), {}).get("ingest")
        r = {"ingest": kept or run_phase(["ingest", str(data), str(corpus), str(shards)])}
        print(n, "ingest", r["ingest"], flush=True)
        r["serve"] = run_phase(["serve", str(data), str(n), str(args.real_sample), str(args.queries)])
        print(n, "serve", r["serve"], flush=True)
        r["pools"] = run_phase(["pools", str(data), str(n), str(args.pool_requests)])
        print(n, "pools", r["pools"], flush=True)
        result["sizes"][str(n)] = r
        write_report(args.out, result)
    write_report(args.out, result)


if __name__ == "__main__":
    main()

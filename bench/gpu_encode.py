"""Passage encoding on a GPU (or the CPU): the pipelined encoder's stages measured one by one.

Run on a machine with a GPU (from the repository root):

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.gpu_encode --device cuda --passages 200000

and on the CPU, for the same pipeline's figures at a CPU's scale:

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.gpu_encode --device cpu --passages 2000

What it measures, on ~100-word passages (the bundled Vital corpus, repeated up to ``--passages``, or
``--texts``, one passage per line):

1. **tokenizer**: the tokenizer stage alone (its worker pool, already started) over the passages;
2. **end to end**: ``PipelinedEmbedder.embed_stream`` over all passages, from a cold start (the model
   loads while the tokenizer works), as ``parley index encode`` runs it; the model's own rate is its
   device time in that run (CUDA events; on a CPU the forward passes' wall time), the tokenizer's is
   its workers' time, so the smaller of the two is the bottleneck;
3. **precision**: the same ``--check`` passages in ``--precision`` and in fp32, lowest and mean cosine;
4. optionally (``--baseline N``) sentence-transformers' own ``encode`` on N passages, as before.

It writes ``gpu_encode.json`` and ``gpu_encode.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from retriever.gpu_encoder import PipelinedEmbedder


def load_texts(path: Path | None, n: int, words: int = 100) -> list[str]:
    """``n`` passages of exactly ``words`` words (DPR's ``psgs_w100`` shape): the file's lines (one
    passage each) or the bundled Vital corpus, run together and cut, repeated as needed."""
    if path is not None:
        base = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        from retriever.corpus import read_vital

        base = [p.embed_text() for p in read_vital(100)]
    stream = " ".join(base).split()
    cut = [" ".join(stream[i : i + words]) for i in range(0, len(stream) - words + 1, words)]
    return [cut[i % len(cut)] for i in range(n)]


def device_name(device: str) -> str:
    if device == "cpu":
        return f"CPU: {os.cpu_count()} cores ({platform.processor() or platform.machine()})"
    import torch

    return str(torch.cuda.get_device_name(torch.device(device)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    texts = load_texts(args.texts, args.passages, args.words)
    words = float(np.mean([len(t.split()) for t in texts[:5000]]))
    common = {
        "model_path": str(args.model) if args.model else None,
        "device": args.device,
        "tokenize_workers": args.workers,
        "window": args.window,
        "batch_tokens": args.batch_tokens,
    }
    result: dict[str, Any] = {
        "device": args.device,
        "device_name": None,
        "passages": len(texts),
        "mean_words": words,
        "precision": args.precision,
        "settings": {k: v for k, v in common.items() if k != "model_path"},
    }

    # 2. End to end from a cold start, first: the start-up is part of what a user waits for.
    chunk = 8192
    enc = PipelinedEmbedder(**common, precision=args.precision)
    t0 = time.perf_counter()
    got = 0
    last = t0
    for vecs in enc.embed_stream(texts[i : i + chunk] for i in range(0, len(texts), chunk)):
        got += len(vecs)
        if time.perf_counter() - last > 5:
            last = time.perf_counter()
            print(f"  {got:,} passages · {enc.stats.line()}", flush=True)
    wall = time.perf_counter() - t0
    s = enc.stats
    steady = (len(texts) / (wall - s.first_batch_s)) if s.first_batch_s and wall > s.first_batch_s else None
    result["device_name"] = device_name(args.device)
    result["end_to_end"] = {
        "seconds": wall,
        "passages_per_s": len(texts) / wall,
        "after_first_batch_passages_per_s": steady,
        "stats": s.as_dict(),
        "summary": s.summary(),
    }
    print("end to end:", s.summary(), flush=True)

    # 1. The tokenizer stage alone, on the same (already started) pool.
    sample = texts[: min(len(texts), args.tokenizer_sample)]
    windows, seconds = enc.tokenize_only(sample)
    tokens = sum(w.tokens for w in windows)
    result["tokenizer"] = {
        "passages": len(sample),
        "seconds": seconds,
        "passages_per_s": len(sample) / seconds,
        "mean_tokens": tokens / len(sample),
        "workers": s.tokenize_workers,
    }
    print(
        f"tokenizer alone: {len(sample) / seconds:,.0f} passages/s with {s.tokenize_workers} workers",
        flush=True,
    )
    result["model"] = {"passages_per_s": s.model_rate, "device_seconds": s.model_s, "precision": s.precision}
    enc.close()

    # 3. Reduced precision against fp32 on the same passages.
    check = texts[: min(len(texts), args.check)]
    if args.precision != "fp32" and check:
        ref = PipelinedEmbedder(**common, precision="fp32")
        low = PipelinedEmbedder(**common, precision=args.precision, check_precision=False)
        a, b = ref.embed(check), low.embed(check)
        cos = (a * b).sum(1)
        result["precision_check"] = {
            "passages": len(check),
            "min_cosine": float(cos.min()),
            "mean_cosine": float(cos.mean()),
            "fp32_model_passages_per_s": ref.stats.model_rate,
            f"{args.precision}_model_passages_per_s": low.stats.model_rate,
        }
        print(f"{args.precision} vs fp32 on {len(check)} passages: min cosine {cos.min():.6f}", flush=True)
        ref.close()
        low.close()

    # 4. sentence-transformers' own encode, for comparison.
    if args.baseline:
        from sentence_transformers import SentenceTransformer

        from retriever.embedder import bundled_model_path

        st = SentenceTransformer(str(args.model or bundled_model_path()), device=args.device)
        base = texts[: args.baseline]
        st.encode(base[:256], batch_size=256)
        t1 = time.perf_counter()
        st.encode(base, batch_size=256, normalize_embeddings=True, show_progress_bar=False)
        result["sentence_transformers"] = {
            "passages": len(base),
            "passages_per_s": len(base) / (time.perf_counter() - t1),
            "batch_size": 256,
            "precision": "fp32",
        }
        print(f"sentence-transformers encode: {result['sentence_transformers']['passages_per_s']:,.0f} p/s")
    return result


def markdown(r: dict[str, Any]) -> str:
    e2e, tok, model = r["end_to_end"], r["tokenizer"], r["model"]
    s = e2e["stats"]
    rows = [
        (
            "tokenizer alone",
            f"{tok['passages_per_s']:,.0f}",
            f"{tok['workers']} worker{'s' if tok['workers'] != 1 else ''}, "
            f"{tok['mean_tokens']:.0f} tokens/passage",
        ),
        ("model (device time in the run)", f"{model['passages_per_s']:,.0f}", f"{model['precision']}"),
        (
            "end to end, cold start",
            f"{e2e['passages_per_s']:,.0f}",
            f"{e2e['seconds']:.1f} s for {r['passages']:,} passages",
        ),
    ]
    if e2e["after_first_batch_passages_per_s"]:
        rows.append(
            ("end to end after the first batch", f"{e2e['after_first_batch_passages_per_s']:,.0f}", "")
        )
    if "sentence_transformers" in r:
        b = r["sentence_transformers"]
        rows.append(
            (
                "sentence-transformers encode",
                f"{b['passages_per_s']:,.0f}",
                f"fp32, batch {b['batch_size']}, {b['passages']:,} passages",
            )
        )
    lines = [
        f"# Passage encoding on {r['device_name']} ({r['device']})",
        "",
        f"{r['passages']:,} passages of {r['mean_words']:.0f} words on average; precision {r['precision']}; "
        f"settings {r['settings']}.",
        "",
        "| stage | passages/s | notes |",
        "|---|---:|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in rows],
        "",
        f"Start-up: model loaded in {s['load_s']:.1f} s on its own thread; first batch on the device "
        f"{s['first_batch_s']:.1f} s after the start; the model waited {s['starved_s']:.1f} s for tokens; "
        f"padding {100 * (1 - s['tokens'] / max(1, s['padded_tokens'])):.1f}% of computed tokens.",
    ]
    if "precision_check" in r:
        p = r["precision_check"]
        lines += [
            "",
            f"{r['precision']} against fp32 on {p['passages']:,} passages: "
            f"lowest cosine {p['min_cosine']:.6f}, "
            f"mean {p['mean_cosine']:.7f}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--precision", choices=["fp16", "bf16", "fp32"], default=None,
                    help="default: fp16 on a GPU, bf16 on the CPU")  # fmt: skip
    ap.add_argument("--workers", type=int, default=None, help="tokenizer processes (default: cores less two)")
    ap.add_argument("--words", type=int, default=100, help="words per passage")
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--batch-tokens", type=int, default=None, help="default: 65536 on a GPU, 8192 on the CPU")
    ap.add_argument("--check", type=int, default=2000, help="passages for the precision comparison")
    ap.add_argument("--tokenizer-sample", type=int, default=100_000)
    ap.add_argument("--baseline", type=int, default=0, help="also time sentence-transformers on N passages")
    ap.add_argument("--texts", type=Path, default=None, help="one passage per line instead of Vital")
    ap.add_argument("--model", type=Path, default=None, help="sentence-transformers folder (default bundled)")
    ap.add_argument("--out", type=Path, default=Path("reports/gpu_encode"))
    args = ap.parse_args()
    if args.precision is None:
        args.precision = "bf16" if args.device == "cpu" else "fp16"
    if args.batch_tokens is None:
        args.batch_tokens = 8192 if args.device == "cpu" else 65536
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_encode.json").write_text(json.dumps(result, indent=2, default=str))
    (args.out / "gpu_encode.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

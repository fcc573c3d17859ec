"""Decoding levers of llama-server on this machine: speculative decoding against plain decoding.

A batch of debates spends much of its time decoding (bench/throughput.py: the compiled server
evaluates prompts 1.45x as fast as the prebuilt one, yet the batch gains 1.12-1.19x), so this measures
what llama.cpp's server offers there, one variant at a time on the same prompts, greedy, one slot:

- ``base``: plain decoding;
- ``draft``: ``--spec-type draft-simple`` with a smaller model of the same tokenizer as draft
  (``--draft-model``, the packaged qwen2.5-coder-0.5b for the default 1.5B), ``--draft-max`` tokens;
- ``ngram``: ``--spec-type ngram-simple`` (drafts from n-grams already in the context; no model).

Reported per variant and prompt: completion tokens, the server's decode rate (its ``timings``), wall
seconds, and whether the text equals ``base``'s (greedy speculative decoding must not change it);
wall-time ratio against ``base``. Writes ``speculative.json`` and ``speculative.md`` to ``--out``.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.speculative --out reports/speculative
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness.cli import study_parser
from bench.harness.processes import wait_http
from bench.harness.reports import command_line, report_head, table_head, write_json, write_markdown
from parley_testing.scripted_llm import free_port
from services.processes import stop_process

PROMPTS = [
    "Who wrote the novel Pride and Prejudice? Explain briefly in three sentences, then give the answer "
    "in brackets.",
    "Name the planets of the solar system in order from the sun, one per line, with one fact about each.",
    "Agent A says the Eiffel Tower is in Paris; agent B agrees. Summarize their debate in four sentences "
    "and state the final answer in brackets.",
]
VARIANTS = ("base", "draft", "ngram")


def variant_args(name: str, draft: Path, draft_max: int, threads: int) -> list[str]:
    if name == "base":
        return []
    if name == "draft":
        return ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(draft_max),
                "-td", str(threads)]  # fmt: skip
    if name == "ngram":
        return ["--spec-type", "ngram-simple"]
    raise ValueError(f"unknown variant {name!r} (one of {', '.join(VARIANTS)})")


def run_variant(binary: Path, model: Path, extra: list[str], threads: int, log: Path) -> list[dict[str, Any]]:
    port = free_port()
    cmd = [str(binary), "-m", str(model), "--port", str(port), "-t", str(threads), "-c", "4096",
           "--parallel", "1", *extra]  # fmt: skip
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    rows = []
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout_s=180, proc=proc, log=log)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            for text in PROMPTS:
                body = {"messages": [{"role": "user", "content": text}], "max_tokens": 160,
                        "temperature": 0, "cache_prompt": False}  # fmt: skip
                started = time.perf_counter()
                reply = client.post("/v1/chat/completions", json=body).raise_for_status().json()
                rows.append(
                    {
                        "completion_tokens": reply["usage"]["completion_tokens"],
                        "decode_tokens_per_s": round(
                            reply.get("timings", {}).get("predicted_per_second", 0.0), 2
                        ),
                        "wall_s": round(time.perf_counter() - started, 2),
                        "text": reply["choices"][0]["message"]["content"],
                    }
                )
    finally:
        stop_process(proc, 30)
    return rows


def summarise(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per variant: total wall seconds, the ratio base/variant (> 1: faster), texts equal to base's."""
    base = results["base"]
    base_wall = sum(r["wall_s"] for r in base)
    out = []
    for name, rows in results.items():
        wall = sum(r["wall_s"] for r in rows)
        out.append(
            {
                "variant": name,
                "wall_s": round(wall, 2),
                "speed_vs_base": round(base_wall / wall, 2) if wall else None,
                "decode_tokens_per_s": [r["decode_tokens_per_s"] for r in rows],
                "same_text_as_base": sum(r["text"] == b["text"] for r, b in zip(rows, base, strict=True)),
                "prompts": len(rows),
            }
        )
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        *report_head(
            "Speculative decoding on this machine",
            f"{report['model']} (draft {report['draft']}), llama-server `{report['binary']}`, "
            f"{report['threads']} threads, {report['cpu_count']} CPUs; {len(PROMPTS)} prompts, greedy, "
            f"one slot. Command: `{report['command']}`",
        ),
        *table_head("variant", "wall s", "× base (speed)", "decode tok/s per prompt", "same text as base"),
    ]
    for s in report["summary"]:
        rates = ", ".join(f"{r:.1f}" for r in s["decode_tokens_per_s"])
        lines.append(
            f"| {s['variant']} | {s['wall_s']} | {s['speed_vs_base']} | {rates} | "
            f"{s['same_text_as_base']}/{s['prompts']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="packaged model name or .gguf path")
    parser.add_argument("--draft-model", default="qwen2.5-coder-0.5b", help="the draft (same tokenizer)")
    parser.add_argument("--draft-max", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=Path("reports/speculative"))
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if "base" not in variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants: a list of {', '.join(VARIANTS)} that includes base")
    from services.llm import LLMSettings, find_llama_server, resolve_model

    binary = find_llama_server()
    if binary is None:
        parser.error("no llama-server: run `make native-llm` (the variants are llama-server options)")
    cache = LLMSettings().cache_dir
    model, _, _ = resolve_model(args.model, cache)
    draft, _, _ = resolve_model(args.draft_model, cache)
    args.out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="parley-speculative-"))
    results = {}
    for name in ["base", *[v for v in variants if v != "base"]]:
        extra = variant_args(name, draft, args.draft_max, args.threads)
        results[name] = run_variant(binary, model, extra, args.threads, logs / f"server-{name}.log")
        print(name, [(r["completion_tokens"], r["decode_tokens_per_s"], r["wall_s"]) for r in results[name]])
    report = {
        "model": args.model,
        "draft": args.draft_model,
        "binary": str(binary),
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "command": command_line("bench.speculative", argv),
        "logs": str(logs),
        "summary": summarise(results),
        "results": results,
    }
    write_json(args.out / "speculative.json", report)
    print(write_markdown(args.out / "speculative.md", markdown(report)))
    return report


if __name__ == "__main__":
    main()

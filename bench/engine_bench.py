"""Engine benchmark.

(a) Scheduling overhead: a 2-agent, 3-round MADKE debate against the scripted server with a fixed
    latency per call; wall time divided by the critical-path bound (per round: selection + debate of the
    slowest agent, then the judge; plus the summary = 10 call latencies), concurrent vs --sequential.
(b) The embedded model: one MADKE debate on the sample question — wall time, calls, prompt and
    completion tokens, and prompt tokens the llama.cpp server reused from its prefix cache.

    .venv/bin/python -m bench.engine_bench [--latency 0.2] [--repeats 3] [--skip-embedded]
        [--model qwen2.5-coder-0.5b] [--styles paper,robust] [--out reports/engine]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from engine.config import DebateConfig
from engine.context import SingleModel
from engine.runner import run_debate
from parley_testing.scripted_llm import ScriptedLLM
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm import OpenAIChatClient

QUESTION = "On what date in 1969 did Neil Armstrong first set foot on the moon?"


def fixed_pool() -> KnowledgePool:
    items = [
        KnowledgeItem(
            n=i,
            source="wikipedia" if i <= 5 else "web",
            title=f"Item {i}",
            text=f"Passage {i} about the Apollo programme and July 20, 1969.",
        )
        for i in range(1, 11)
    ]
    return KnowledgePool(pool_id="bench", question=QUESTION, items=items)


async def scripted_debate(server: ScriptedLLM, sequential: bool) -> float:
    async with OpenAIChatClient(server.base_url, "scripted", max_concurrency=8) as client:
        started = time.perf_counter()
        result = await run_debate(
            QUESTION, fixed_pool(), DebateConfig(sequential=sequential), SingleModel(client)
        )
        wall = time.perf_counter() - started
    assert result.rounds == 3 and result.usage.calls == 16
    return wall


def bench_scheduling(latency: float, repeats: int) -> dict[str, Any]:
    bound = 10 * latency  # 3 rounds x (select + debate + judge) + summary
    out: dict[str, Any] = {"latency_s": latency, "critical_path_s": bound}
    with ScriptedLLM(latency_s=latency) as server:
        server.on("select knowledge", "[1], [2]")
        server.on("respond with [Yes]", "[No]")
        server.on("Question:", "The answer is [July 20, 1969].")
        for mode, sequential in (("concurrent", False), ("sequential", True)):
            walls = [asyncio.run(scripted_debate(server, sequential)) for _ in range(repeats)]
            out[mode] = {"wall_s_median": statistics.median(walls), "ratio": statistics.median(walls) / bound}
    return out


def real_pool() -> KnowledgePool:
    """The pool the demo would use (in-process retriever) when the index exists, else a fixed one."""
    try:
        from retriever.local import LocalPoolBuilder, ensure_index
        from retriever.settings import RetrieverSettings

        settings = RetrieverSettings()
        ensure_index(settings, progress=True)
        builder = LocalPoolBuilder.open(settings)
        return asyncio.run(builder.build_pool(QUESTION, k_wiki=5, k_web=5))
    except ImportError:
        return fixed_pool()


def bench_embedded(model: str, styles: list[str]) -> dict[str, Any]:
    from services.llm import LLMSettings, build_role_models, embedded_server

    settings = LLMSettings()
    pool = real_pool()
    results: dict[str, Any] = {"model": model, "pool_items": len(pool.items)}
    # The embedded default server (bench.embedded_speed compares its builds side by side); it reports
    # the prompt tokens it served from cache in every reply's usage.
    with embedded_server(
        model, settings.cache_dir, n_ctx=settings.embedded_ctx, kind=settings.embedded_server
    ) as server:
        for style in styles:
            models = build_role_models(settings, served=server.served())

            async def one(models: Any = models, style: str = style) -> Any:
                try:
                    return await run_debate(QUESTION, pool, DebateConfig(prompt_style=style, seed=1), models)
                finally:
                    await models.aclose()

            started = time.perf_counter()
            result = asyncio.run(one())
            wall = time.perf_counter() - started
            results[style] = {
                "wall_s": round(wall, 1),
                "answer": result.answer,
                "rounds": result.rounds,
                "calls": result.usage.calls,
                "prompt_tokens": result.usage.prompt_tokens,
                "completion_tokens": result.usage.completion_tokens,
                "server": server.kind,
                "prefix_cache_reused_tokens": result.usage.cached_tokens,
                "prefix_cache_reused_share": round(
                    result.usage.cached_tokens / max(result.usage.prompt_tokens, 1), 3
                ),
                "by_role": {k: v.model_dump() for k, v in result.usage_by_role.items()},
            }
            print(json.dumps({style: results[style]}, indent=1), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-embedded", action="store_true")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--styles", default="paper,robust")
    parser.add_argument("--out", type=Path, default=Path("reports/engine"))
    args = parser.parse_args()
    report: dict[str, Any] = {"scheduling": bench_scheduling(args.latency, args.repeats)}
    print(json.dumps(report["scheduling"], indent=1), flush=True)
    if not args.skip_embedded:
        report["embedded"] = bench_embedded(args.model, args.styles.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    name = "engine_bench.json" if args.skip_embedded else f"engine_bench_{args.model}.json"
    (args.out / name).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()

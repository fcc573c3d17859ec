"""Evaluation harness benchmark: what the harness itself costs, apart from the LLM.

Runs ``single`` and ``madke`` over the first N NQ-open dev questions against the scripted
OpenAI-compatible server (zero latency, so the time measured is engine + harness + disk) with a fixed
in-memory two-item pool per question, then:

- items/s per run for a fresh evaluation (scoring, fsynced append per item, compaction);
- the time a resumed invocation needs to find that nothing is left to do (no LLM calls);
- the time to rebuild metrics.json, report.md and the three PNG plots from the folder (10,000
  bootstrap resamples per comparison).

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.eval_bench --data nq_open_vital_dev.jsonl [--limit 100]
        [--out reports/eval-bench]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.context import SingleModel
from evaluation.harness import EvalRequest, evaluate, rebuild_report
from parley_testing.scripted_llm import ScriptedLLM, request_text
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm import OpenAIChatClient


class StaticPools:
    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        items = [
            KnowledgeItem(n=1, source="wikipedia", title="A", text=f"About {question}."),
            KnowledgeItem(n=2, source="web", title="B", text=f"More on {question}."),
        ]
        return KnowledgePool(pool_id="static", question=question, items=items)


def reply(body: dict[str, Any]) -> str:
    text = request_text(body)
    if "Please select knowledge" in text:
        return "[1]"
    if "respond with [Yes]" in text:
        return "[Yes]"
    return "The answer is [Paris]."


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True, help="NQ-open JSONL (question, answers)")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("reports/eval-bench"))
    args = parser.parse_args()
    # The evaluation folder itself is scratch; only the figures are kept under --out.
    work = Path(tempfile.mkdtemp(prefix="parley-eval-bench-"))
    figures: dict[str, Any] = {"limit": args.limit}
    with ScriptedLLM() as llm:
        llm.on(lambda body: True, reply)
        models = SingleModel(OpenAIChatClient(llm.base_url, "scripted"))
        for protocol in ("single", "madke"):
            request = EvalRequest(
                dataset=args.data,
                out=work,
                protocols=[protocol],
                limit=args.limit,
                progress=False,
                plots=False,
            )
            started = time.perf_counter()
            await evaluate(request, models=models, pool_builder=StaticPools())
            seconds = time.perf_counter() - started
            figures[f"{protocol}_items_per_s"] = round(args.limit / seconds, 1)
        calls = len(llm.requests)
        started = time.perf_counter()
        await evaluate(
            EvalRequest(
                dataset=args.data,
                out=work,
                protocols=["single", "madke"],
                limit=args.limit,
                progress=False,
                plots=False,
            ),
            models=models,
            pool_builder=StaticPools(),
        )
        figures["resume_nothing_left_s"] = round(time.perf_counter() - started, 3)
        figures["resume_llm_calls"] = len(llm.requests) - calls
    started = time.perf_counter()
    rebuild_report(work, plots=True)
    figures["report_rebuild_with_plots_s"] = round(time.perf_counter() - started, 2)
    shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eval_bench.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

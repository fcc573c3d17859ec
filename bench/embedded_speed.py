"""Embedded model speed: llama-cpp-python's single-cache server vs llama-server with slots, side by side.

The same questions, the same pools and the same MADKE configuration (robust style, the embedded
default) run once per server path, one question at a time as a user would:

- ``baseline``: llama-cpp-python's server (one KV cache, one request at a time), as before;
- ``slots``: llama.cpp's llama-server with one KV-cache slot per prompt family (the selection, each
  agent, the panel), affinity per call, a bounded host-memory prompt cache and concurrent requests.

Reported per path: wall time per question, calls, prompt tokens evaluated vs served from cache,
completion tokens and seconds per role, answer quality (contains, F1), and the physical floor: the
prompt tokens a perfect prefix cache would still have to evaluate (each call's text beyond its longest
common prefix with an earlier call of the same debate) divided by the measured prompt throughput.
llama-cpp-python reports no cached tokens, so the baseline's are read from its log per call.

    .venv/bin/python -m bench.embedded_speed --dataset ../shared/data/nq_open_vital_dev.jsonl \\
        --pools reports/styles-1.5b/pools.jsonl --questions 10 --out reports/embedded-speed
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from debate_worker.engine.config import DebateConfig
from debate_worker.engine.result import DebateResult
from debate_worker.engine.runner import run_debate
from debate_worker.evaluation.metrics import contains_match, f1_score
from services.embedded_llm import EmbeddedLLMServer, ServerKind, embedded_from_settings
from services.knowledge import KnowledgePool
from services.llm import ChatCompletion, ChatMessage, ChatModel
from services.llm_factory import build_role_models
from services.settings import LLMSettings

PATHS: dict[str, ServerKind] = {"baseline": "llama-cpp-python", "slots": "llama-server"}


class LogAccounted:
    """A ``ChatModel`` that reads llama-cpp-python's log after each call for the tokens it reused.

    The server answers one request at a time; the lock keeps the log lines of one call together."""

    def __init__(self, inner: ChatModel, server: EmbeddedLLMServer, lock: asyncio.Lock) -> None:
        self._inner = inner
        self._server = server
        self._lock = lock

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def endpoint(self) -> str:
        return self._inner.endpoint

    async def complete(self, messages: Sequence[ChatMessage], **kw: Any) -> ChatCompletion:
        async with self._lock:
            offset = self._server.log_offset()
            out = await self._inner.complete(messages, **kw)
            await asyncio.sleep(0.05)  # the server flushes its log line after the reply
            stats = self._server.prefix_cache_stats(offset)
        return dataclasses.replace(out, cached_tokens=stats["reused_tokens"])


class LogAccountedModels:
    def __init__(self, inner: Any, server: EmbeddedLLMServer) -> None:
        self._inner = inner
        self._server = server
        self._lock = asyncio.Lock()

    def for_role(self, role: str, agent: int | None = None) -> ChatModel:
        return LogAccounted(self._inner.for_role(role, agent), self._server, self._lock)

    async def aclose(self) -> None:
        await self._inner.aclose()


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def floor_tokens(result: DebateResult) -> float:
    """Prompt tokens that must be evaluated at least once: per call, the share of its prompt text
    beyond its longest common prefix with any earlier call of the debate."""
    seen: list[str] = []
    total = 0.0
    for rec in sorted(result.transcript, key=lambda r: r.round):
        text = "\n".join(f"{m['role']}:{m['content']}" for m in rec.messages or [])
        if not text:
            continue
        shared = max((common_prefix(text, s) for s in seen), default=0)
        total += rec.prompt_tokens * (1 - shared / len(text))
        seen.append(text)
    return total


async def prompt_throughput(models: Any) -> float:
    """Prompt tokens per second evaluated on a fresh prompt (nothing of it cached)."""
    filler = " ".join(f"w{i}" for i in range(150))
    model = models.for_role("judge")
    started = time.perf_counter()
    out = await model.complete(
        [{"role": "user", "content": f"{time.time()} {filler}"}], temperature=0.0, max_tokens=1
    )
    return out.prompt_tokens / (time.perf_counter() - started)


def item_row(item: dict[str, Any], result: DebateResult, wall: float) -> dict[str, Any]:
    return {
        "id": item["id"],
        "wall_s": round(wall, 1),
        "answer": result.answer,
        "contains": contains_match(result.answer, item["answers"]),
        "f1": f1_score(result.answer, item["answers"]),
        "rounds": result.rounds,
        "floor_tokens": round(floor_tokens(result), 1),
        "by_role": {
            role: {
                "calls": u.calls,
                "prompt_tokens": u.prompt_tokens,
                "cached_tokens": u.cached_tokens,
                "completion_tokens": u.completion_tokens,
                "seconds": round(u.seconds, 1),
            }
            for role, u in result.usage_by_role.items()
        },
    }


async def run_paths(
    names: list[str],
    items: list[dict[str, Any]],
    pools: dict[str, KnowledgePool],
    settings: LLMSettings,
    out: Path,
) -> list[dict[str, Any]]:
    """Both servers up at once, the questions interleaved (each question on every path before the
    next, the order alternating): whatever else the machine does weighs on both paths alike."""
    config = DebateConfig(prompt_style="robust")
    runs: dict[str, dict[str, Any]] = {
        name: {"path": name, "server": PATHS[name], "items": []} for name in names
    }
    with contextlib.ExitStack() as stack:
        models: dict[str, Any] = {}
        for name in names:
            # The operator's embedded settings, only the server kind changed per path.
            kind_settings = settings.model_copy(update={"embedded_server": PATHS[name]})
            server = stack.enter_context(embedded_from_settings(kind_settings))
            base = build_role_models(settings, served=server.served())
            models[name] = LogAccountedModels(base, server) if name == "baseline" else base
            runs[name]["prompt_tokens_per_s"] = round(await prompt_throughput(base), 1)
        try:
            for k, item in enumerate(items):
                for name in names if k % 2 == 0 else reversed(names):
                    started = time.perf_counter()
                    result = await run_debate(item["question"], pools[item["id"]], config, models[name])
                    wall = time.perf_counter() - started
                    runs[name]["items"].append(item_row(item, result, wall))
                    write_outputs([runs[n] for n in names], out)  # a stopped run keeps what finished
                    print(
                        f"{name} {item['id']}: {wall:.1f}s, {result.rounds} rounds, {result.answer!r}",
                        flush=True,
                    )
        finally:
            for m in models.values():
                await m.aclose()
    return [runs[name] for name in names]


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    rows = run["items"]
    roles: dict[str, dict[str, float]] = {}
    for row in rows:
        for role, u in row["by_role"].items():
            acc = roles.setdefault(role, dict.fromkeys(u, 0.0))
            for k, v in u.items():
                acc[k] += v
    prompt = sum(r["prompt_tokens"] for r in roles.values())
    cached = sum(r["cached_tokens"] for r in roles.values())
    floor = sum(r["floor_tokens"] for r in rows)
    n = len(rows)
    return {
        "path": run["path"],
        "server": run["server"],
        "questions": n,
        "wall_s_per_q": round(statistics.mean(r["wall_s"] for r in rows), 1),
        "contains": round(statistics.mean(r["contains"] for r in rows), 3),
        "f1": round(statistics.mean(r["f1"] for r in rows), 3),
        "rounds": round(statistics.mean(r["rounds"] for r in rows), 2),
        "prompt_tokens": int(prompt),
        "cached_tokens": int(cached),
        "cached_share": round(cached / prompt, 3) if prompt else 0.0,
        "evaluated_tokens": int(prompt - cached),
        "prompt_tokens_per_s": run["prompt_tokens_per_s"],
        "floor_tokens_per_q": round(floor / n, 1),
        "floor_s_per_q": round(floor / n / run["prompt_tokens_per_s"], 1),
        "by_role": {role: {k: round(v, 1) for k, v in u.items()} for role, u in roles.items()},
    }


def report(summaries: list[dict[str, Any]]) -> str:
    lines = [
        "| path | server | s/q | ratio | prompt tok | cached | cached % | evaluated | floor s/q | "
        "contains | F1 | rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = summaries[0]["wall_s_per_q"]
    for s in summaries:
        lines.append(
            f"| {s['path']} | {s['server']} | {s['wall_s_per_q']} | {s['wall_s_per_q'] / base:.2f} | "
            f"{s['prompt_tokens']} | {s['cached_tokens']} | {100 * s['cached_share']:.0f} | "
            f"{s['evaluated_tokens']} | {s['floor_s_per_q']} | {s['contains']:.2f} | {s['f1']:.2f} | "
            f"{s['rounds']} |"
        )
    lines.append("")
    lines.append("| path | role | calls | prompt tok | cached | completion tok | seconds |")
    lines.append("|---|---|---|---|---|---|---|")
    for s in summaries:
        for role, u in s["by_role"].items():
            lines.append(
                f"| {s['path']} | {role} | {u['calls']:.0f} | {u['prompt_tokens']:.0f} | "
                f"{u['cached_tokens']:.0f} | {u['completion_tokens']:.0f} | {u['seconds']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, required=True, help="NQ-open JSONL")
    ap.add_argument("--pools", type=Path, required=True, help="an eval folder's pools.jsonl")
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--paths", default="baseline,slots")
    ap.add_argument("--out", type=Path, default=Path("reports/embedded-speed"))
    args = ap.parse_args()
    settings = LLMSettings()
    pools = {}
    for line in args.pools.read_text().splitlines():
        obj = json.loads(line)
        pools[obj["id"]] = KnowledgePool.model_validate(obj["pool"])
    items = [json.loads(x) for x in args.dataset.read_text().splitlines() if x.strip()]
    items = [it for it in items if it["id"] in pools][: args.questions]
    args.out.mkdir(parents=True, exist_ok=True)
    runs = asyncio.run(run_paths(args.paths.split(","), items, pools, settings, args.out))
    print(write_outputs(runs, args.out))


def write_outputs(runs: list[dict[str, Any]], out: Path) -> str:
    """Raw runs, the summary and the report for the questions every path has finished."""
    done = min(len(r["items"]) for r in runs)
    for run in runs:
        (out / f"{run['path']}.json").write_text(json.dumps(run, indent=1))
    if not done:
        return ""
    summaries = [summarise({**r, "items": r["items"][:done]}) for r in runs]
    (out / "summary.json").write_text(json.dumps(summaries, indent=1))
    table = report(summaries)
    (out / "report.md").write_text(table)
    return table


if __name__ == "__main__":
    main()

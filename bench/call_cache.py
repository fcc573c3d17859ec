"""What the call cache costs per call: a miss (key, lookup, store) and a hit (key, lookup, replay).

Run:

    .venv/bin/python -m bench.call_cache --calls 2000 --out reports/call-cache

A model that answers at once (no network, no server) sits behind ``CachedChatModel`` with a real
``SqliteCallStore`` in a temporary folder, so the time measured is the cache's own: each call's wall
time through the wrapper minus nothing, for ``--calls`` distinct prompts of the length of a MADKE
debater's prompt (about 2,000 characters) sent once (misses), then the same prompts again (hits).
Reported: p50/p95/max in milliseconds for each, and the store's size per call. Writes ``bench.json``
and ``bench.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.reports import command_line, machine, report_head, utc_date, write_json, write_markdown
from bench.harness.stats import percentile
from services.call_cache import CachedChatModel, CacheStats, SqliteCallStore
from services.chat_model import ChatCompletion, ChatMessage

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Knowledge: " + "The river flows through the city and into the sea. " * 40


class InstantModel:
    """A ``ChatModel`` that answers at once: what remains of a call's time is the cache's."""

    model = "instant"
    endpoint = "memory://instant"

    async def complete(self, messages: Sequence[ChatMessage], **_: Any) -> ChatCompletion:
        return ChatCompletion(
            text='{"answer": "Paris"}',
            model=self.model,
            prompt_tokens=500,
            completion_tokens=8,
            latency_ms=0.0,
        )


async def measure(calls: int, folder: Path) -> dict[str, Any]:
    store = SqliteCallStore(folder / "calls.sqlite")
    model = CachedChatModel(InstantModel(), store, "instant@bench", stats=CacheStats())
    prompts = [[{"role": "user", "content": f"{PROMPT} Question {i}?"}] for i in range(calls)]
    timings: dict[str, list[float]] = {"miss": [], "hit": []}
    for kind in ("miss", "hit"):
        if kind == "hit":
            model = CachedChatModel(InstantModel(), store, "instant@bench", stats=CacheStats())
        for messages in prompts:
            started = time.perf_counter()
            reply = await model.complete(messages, temperature=0.5)  # type: ignore[arg-type]
            timings[kind].append((time.perf_counter() - started) * 1000)
            assert reply.from_cache == (kind == "hit")
    size = store.size_bytes
    store.close()
    return {
        "calls": calls,
        "prompt_chars": len(prompts[0][0]["content"]),
        **{
            kind: {
                "p50_ms": round(statistics.median(ms), 3),
                "p95_ms": round(percentile(ms, 95), 3),
                "max_ms": round(max(ms), 3),
            }
            for kind, ms in timings.items()
        },
        "bytes_per_call": round(size / calls, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "call-cache")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        result = asyncio.run(measure(args.calls, Path(folder)))
    result.update(command=command_line("bench.call_cache", argv), machine=machine(), date=utc_date())
    write_json(args.out / "bench.json", result)
    lines = [
        *report_head(
            "The call cache's own cost per call",
            f"`{result['command']}`; {result['calls']} distinct prompts of {result['prompt_chars']} "
            f"characters, a model that answers at once; {result['machine']}; {result['date']}.",
        ),
        "| call | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|",
        *(
            f"| {kind} | {result[kind]['p50_ms']} | {result[kind]['p95_ms']} | {result[kind]['max_ms']} |"
            for kind in ("miss", "hit")
        ),
        "",
        f"Store: {result['bytes_per_call']} bytes per call.",
    ]
    print(write_markdown(args.out / "bench.md", lines))
    return result


if __name__ == "__main__":
    main()

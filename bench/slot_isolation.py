"""Does the embedded llama.cpp server keep concurrent requests apart? Pinned slots against its choice.

llama.cpp's server (the `make native-llm` build of this repository's pinned sources; ``--server``
picks the prebuilt one) mixes requests when a request asks for a slot (`id_slot`) that is busy with
another one and a host-memory prompt cache is on (`--cache-ram`): choosing the slot, the server saves the busy
slot's state and loads the cached prompt closest to the new request into it while the other request
is still generating there, and defers the new one. The request in flight then goes on from another
conversation's keys and values. Parley used to pin each prompt family (the selections, each agent's
turns, the panel) to a slot; two debates at once, or one debate's two selections, pinned one slot twice.

This runs conversations that each ask for an access code held only in their own prompt
(``parley_testing.isolation``), several at once, twice each (the second time the prompt cache holds
near matches), through the embedded server with Parley's own flags, in two modes:

- ``pinned``: each prompt family sent to a fixed slot (``id_slot`` = family), as Parley did;
- ``server-chosen``: no ``id_slot``; the server gives each request an idle slot, the one whose cached
  prompt shares the longest prefix (what Parley's client does now).

Reported per mode: calls, replies naming another conversation's code, replies missing their own,
prompt tokens served from the cache, wall seconds. Writes ``slot_isolation.json``, ``.md`` and ``.png``.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.slot_isolation --out reports/slot-isolation
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any, Literal, cast

import httpx

from bench.harness.plots import pyplot, save
from parley_testing.isolation import REPLY_SCHEMA, Conversation, conversations, judge
from services.llm import ServerKind, embedded_server

MODES = ("pinned", "server-chosen")


async def run_mode(
    base_url: str,
    convs: list[Conversation],
    *,
    pinned: bool,
    families: int,
    rounds: int,
    concurrency: int,
    max_tokens: int,
    seed: int,
) -> dict[str, Any]:
    """Every conversation's families, ``rounds`` times, in a shuffled order, ``concurrency`` at once."""
    rng = random.Random(seed)
    jobs = [
        (i, f)
        for _ in range(rounds)
        for i in rng.sample(range(len(convs)), len(convs))
        for f in range(families)
    ]
    gate = asyncio.Semaphore(concurrency)
    rows: list[dict[str, Any]] = []

    async def one(client: httpx.AsyncClient, i: int, family: int) -> None:
        body: dict[str, Any] = {
            "messages": convs[i].messages(family),
            "temperature": 0,
            "max_tokens": max_tokens,
            "cache_prompt": True,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": REPLY_SCHEMA},
            },
        }
        if pinned:
            body["id_slot"] = family
        async with gate:
            reply = (await client.post("/chat/completions", json=body)).raise_for_status().json()
        text = reply["choices"][0]["message"]["content"] or ""
        verdict = judge(text, convs[i], convs)
        timings = reply.get("timings", {})
        rows.append(
            {
                "conversation": i,
                "family": family,
                "own": verdict.own,
                "foreign": list(verdict.foreign),
                "prompt_tokens": reply["usage"]["prompt_tokens"],
                "cached_tokens": timings.get("cache_n", 0),
                "reply": text,
            }
        )

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        await asyncio.gather(*(one(client, i, f) for i, f in jobs))
    wall = time.perf_counter() - started
    prompt = sum(r["prompt_tokens"] for r in rows)
    return {
        "calls": len(rows),
        "foreign": sum(1 for r in rows if r["foreign"]),
        "missing_own": sum(1 for r in rows if not r["own"]),
        "cached_share": round(sum(r["cached_tokens"] for r in rows) / prompt, 3) if prompt else 0.0,
        "wall_s": round(wall, 1),
        "examples": [r for r in rows if r["foreign"] or not r["own"]][:5],
        "rows": rows,
    }


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [
        "# Do concurrent requests stay apart? Pinned slots against the server's choice",
        "",
        f"{s['conversations']} conversations x {s['families']} prompt families x {s['rounds']} rounds, "
        f"{s['concurrency']} requests at once, greedy, on `{s['model']}` served by {s['server']} with "
        f"Parley's flags (`{s['command']}`); {report['machine']}. Command: `{report['command']}`",
        "",
        "| mode | calls | replies with another conversation's code | replies without their own code "
        "| prompt tokens from cache | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for mode, r in report["modes"].items():
        lines.append(
            f"| {mode} | {r['calls']} | {r['foreign']} ({r['foreign'] / r['calls']:.1%}) | "
            f"{r['missing_own']} ({r['missing_own'] / r['calls']:.1%}) | {r['cached_share']:.0%} | "
            f"{r['wall_s']} |"
        )
    lines += ["", "Replies of the first mode that went wrong (at most five):", ""]
    first = next(iter(report["modes"].values()))
    lines += [
        f"- conversation {e['conversation']}, family {e['family']}: `{e['reply'][:160]}`"
        for e in first["examples"]
    ]
    lines += ["", "![replies mixed per mode](slot_isolation.png)", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    modes = list(report["modes"])
    foreign = [100 * r["foreign"] / r["calls"] for r in report["modes"].values()]
    missing = [100 * r["missing_own"] / r["calls"] for r in report["modes"].values()]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(len(modes))
    ax.bar([i - 0.2 for i in x], foreign, width=0.4, label="another conversation's code")
    ax.bar([i + 0.2 for i in x], missing, width=0.4, label="own code missing")
    ax.set_xticks(list(x), modes)
    ax.set_ylabel("% of replies")
    ax.set_title("Replies mixed with another request")
    ax.legend()
    save(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="a packaged model or a .gguf path")
    p.add_argument("--server", choices=["auto", "llama-server", "xllamacpp"], default="auto")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--conversations", type=int, default=24)
    p.add_argument("--families", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=80)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--cache-dir", type=Path, default=Path(os.environ.get("PARLEY_CACHE_DIR", ".parley/models"))
    )
    p.add_argument("--out", type=Path, default=Path("reports/slot-isolation"))
    a = p.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        p.error(f"unknown mode(s) {', '.join(unknown)} (one of {', '.join(MODES)})")
    convs = conversations(a.conversations, a.seed)
    kind = cast("ServerKind | Literal['auto']", a.server)  # argparse's choices
    report: dict[str, Any] = {"modes": {}}
    for mode in modes:
        # A fresh server per mode: neither inherits the other's prompt cache.
        with embedded_server(a.model, a.cache_dir, kind=kind, slots=a.families) as server:
            report["settings"] = {
                "model": server.alias,
                "server": server.kind,
                "command": " ".join(Path(c).name if c.startswith("/") else c for c in server.command()),
                **{
                    k: getattr(a, k)
                    for k in ("conversations", "families", "rounds", "concurrency", "max_tokens")
                },
            }
            print(f"{mode}: {a.conversations * a.families * a.rounds} calls …", file=sys.stderr, flush=True)
            result = asyncio.run(
                run_mode(
                    server.base_url,
                    convs,
                    pinned=mode == "pinned",
                    families=a.families,
                    rounds=a.rounds,
                    concurrency=a.concurrency,
                    max_tokens=a.max_tokens,
                    seed=a.seed,
                )
            )
            report["modes"][mode] = result
            print(
                f"{mode}: {result['foreign']} of {result['calls']} replies name another code", file=sys.stderr
            )
    report["machine"] = f"{os.cpu_count()} CPUs ({platform.machine()})"
    report["command"] = "python -m bench.slot_isolation " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "slot_isolation.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (a.out / "slot_isolation.md").write_text(markdown(report), encoding="utf-8")
    plot(report, a.out / "slot_isolation.png")
    print((a.out / "slot_isolation.md").read_text(encoding="utf-8"))
    return report


if __name__ == "__main__":
    main()

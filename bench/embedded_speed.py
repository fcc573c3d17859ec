"""Embedded model speed: the prebuilt llama.cpp server (xllamacpp) vs llama-server built here, side by side.

The same questions, the same pools and the same MADKE configuration (robust style, the embedded
default) run once per server path, one question at a time as a user would. Every path is llama.cpp's
server with one KV-cache slot per prompt family (the selection, each agent, the panel), affinity per
call, a bounded host-memory prompt cache and concurrent requests; they differ in the build:

- ``native``: llama-server compiled for this CPU by ``make native-llm`` (AVX-512 where the CPU has it),
  the optional upgrade, and the base the others' ratios are taken against when it is named first;
- ``xllamacpp``: the prebuilt wheel (any x86-64 CPU with AVX2), the default, no compiler;
- ``reuse`` (only when named): ``xllamacpp`` plus reuse of cached chunks past the common prefix
  (``PARLEY_LLM_EMBEDDED_CACHE_REUSE=64``), an approximation measured on its own;
- ``portable`` (only when named): llama-server compiled for any x86-64 CPU
  (``make native-llm LLAMA_SERVER_BUILD=portable``, ``--portable-bin``).

Reported per path: wall time per question, calls, prompt tokens evaluated vs served from cache (the
servers' own ``cached_tokens``), completion tokens and seconds per role, answer quality (contains, F1),
the prompt rate measured at the start, and the physical floor: the prompt tokens a perfect prefix
cache would still have to evaluate (each call's text beyond its longest common prefix with an earlier
call of the same debate) divided by that rate.

    .venv/bin/python -m bench.embedded_speed --dataset data/nq_open_vital_dev.jsonl \\
        --pools reports/styles-1.5b/pools.jsonl --questions 10 --paths native,xllamacpp \\
        --out reports/embedded-speed
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib.metadata
import json
import re
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.harness.plots import pyplot, save
from engine.config import DebateConfig
from engine.result import DebateResult
from engine.runner import run_debate
from evaluation.metrics import contains_match, f1_score, paired_bootstrap
from services.chat_model import ChatCompletion, ChatModel
from services.knowledge import KnowledgePool
from services.llm import LLMSettings, ServerKind, build_role_models, embedded_from_settings, find_llama_server

PATHS: dict[str, ServerKind] = {
    "native": "llama-server",
    "xllamacpp": "xllamacpp",
    "reuse": "xllamacpp",
    "portable": "llama-server",
}
# Settings a path changes besides the server kind: ``reuse`` is slots plus chunk reuse past the common
# prefix (``PARLEY_LLM_EMBEDDED_CACHE_REUSE``), a named option measured on its own.
PATH_SETTINGS: dict[str, dict[str, Any]] = {"reuse": {"embedded_cache_reuse": 64}}
# Where make native-llm caches its llama-server builds (the Makefile's LLAMA_CACHE).
LLAMA_CACHE = Path.home() / ".cache" / "parley"
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_llama_server.sh"


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


def fresh_text(words: int) -> str:
    """A prompt no earlier call shares a prefix with (it starts with the clock)."""
    return f"{time.time_ns()} " + " ".join(f"w{i}" for i in range(words))


async def timed(model: ChatModel, text: str, max_tokens: int) -> tuple[ChatCompletion, float]:
    started = time.perf_counter()
    out = await model.complete([{"role": "user", "content": text}], temperature=0.0, max_tokens=max_tokens)
    return out, time.perf_counter() - started


async def throughput(models: Any) -> dict[str, float]:
    """Prompt tokens per second on this machine, now: a short and a long fresh prompt, one generated
    token each, so the difference cancels the fixed cost of a request; the best of two tries."""
    model = models.for_role("judge")
    rates = []
    for _ in range(2):
        short, t_short = await timed(model, fresh_text(40), 1)
        long, t_long = await timed(model, fresh_text(400), 1)
        rates.append((long.prompt_tokens - short.prompt_tokens) / max(t_long - t_short, 1e-3))
    return {"prompt_tokens_per_s": round(max(rates), 1)}


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
    path_settings: Mapping[str, Mapping[str, Any]] = PATH_SETTINGS,
) -> list[dict[str, Any]]:
    """All servers up at once, the questions interleaved (each question on every path before the
    next, the order alternating): whatever else the machine does weighs on every path alike."""
    config = DebateConfig(prompt_style="robust")
    runs: dict[str, dict[str, Any]] = {
        name: {"path": name, "server": PATHS[name], "items": [], "failed": []} for name in names
    }
    with contextlib.ExitStack() as stack:
        models: dict[str, Any] = {}
        for name in names:
            # The operator's embedded settings; per path only the server kind and path_settings change.
            changes = path_settings.get(name, {})
            kind_settings = settings.model_copy(update={"embedded_server": PATHS[name], **changes})
            server = stack.enter_context(embedded_from_settings(kind_settings))
            if server.kind == "llama-server":
                binary = find_llama_server(kind_settings.embedded_server_bin)
                runs[name]["binary"] = str(binary)
                runs[name]["server"] = f"llama-server, {llama_server_build(binary)}"
            else:
                runs[name]["server"] = f"xllamacpp {importlib.metadata.version('xllamacpp')}"
            models[name] = build_role_models(settings, served=server.served())
            runs[name].update(await throughput(models[name]))
        try:
            for k, item in enumerate(items):
                for name in names if k % 2 == 0 else reversed(names):
                    started = time.perf_counter()
                    try:
                        result = await run_debate(item["question"], pools[item["id"]], config, models[name])
                    except Exception as exc:
                        runs[name]["failed"].append(
                            {"id": item["id"], "error": f"{type(exc).__name__}: {exc}"}
                        )
                        print(f"{name} {item['id']}: FAILED {exc!r}", flush=True)
                        continue
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
    completion = sum(r["completion_tokens"] for r in roles.values())
    floor = sum(r["floor_tokens"] for r in rows)
    n = len(rows)
    return {
        "path": run["path"],
        "server": run["server"],
        "questions": n,
        "failed": len(run.get("failed", [])),
        "wall_s_per_q": round(statistics.mean(r["wall_s"] for r in rows), 1),
        "contains": round(statistics.mean(r["contains"] for r in rows), 3),
        "f1": round(statistics.mean(r["f1"] for r in rows), 3),
        "rounds": round(statistics.mean(r["rounds"] for r in rows), 2),
        "prompt_tokens": int(prompt),
        "cached_tokens": int(cached),
        "cached_share": round(cached / prompt, 3) if prompt else 0.0,
        "evaluated_tokens": int(prompt - cached),
        "completion_tokens": int(completion),
        "prompt_tokens_per_s": run["prompt_tokens_per_s"],
        "floor_tokens_per_q": round(floor / n, 1),
        "floor_s_per_q": round(floor / n / run["prompt_tokens_per_s"], 1),
        "by_role": {role: {k: round(v, 1) for k, v in u.items()} for role, u in roles.items()},
    }


def paired_quality(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-question differences (other − base) in contains and F1 with 95 % paired-bootstrap intervals."""
    out: dict[str, Any] = {}
    for metric in ("contains", "f1", "wall_s"):
        ci = paired_bootstrap([float(r[metric]) for r in base], [float(r[metric]) for r in other])
        out[metric] = {"diff": round(ci.diff, 3), "low": round(ci.low, 3), "high": round(ci.high, 3)}
    out["same_answer"] = sum(
        a["answer"].strip().lower() == b["answer"].strip().lower() for a, b in zip(base, other, strict=True)
    )
    return out


def report(summaries: list[dict[str, Any]], paired: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| path | server | questions | s/q | ratio | rounds | s/round | prompt tok | cached | cached % | "
        "evaluated | completion tok | floor s/q | contains | F1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = summaries[0]["wall_s_per_q"]
    for s in summaries:
        lines.append(
            f"| {s['path']} | {s['server']} | {s['questions']} | {s['wall_s_per_q']} | "
            f"{s['wall_s_per_q'] / base:.2f} | {s['rounds']} | {s['wall_s_per_q'] / s['rounds']:.1f} | "
            f"{s['prompt_tokens']} | {s['cached_tokens']} | {100 * s['cached_share']:.0f} | "
            f"{s['evaluated_tokens']} | {s['completion_tokens']} | {s['floor_s_per_q']} | "
            f"{s['contains']:.2f} | {s['f1']:.2f} |"
        )
    lines += [
        "",
        "Floor: the prompt tokens a perfect prefix cache would still evaluate, per question, divided by "
        "the prompt rate measured when the run started (fresh prompts, request overhead cancelled): "
        + "; ".join(f"{s['path']} {s['prompt_tokens_per_s']} tok/s" for s in summaries)
        + ". Generation is not in it.",
        "",
        f"| compared with {summaries[0]['path']} | Δ contains [95 % CI] | Δ F1 [95 % CI] | "
        "Δ s/q [95 % CI] | same answer |",
        "|---|---|---|---|---|",
    ]
    for name, q in paired.items():
        cells = [f"{q[m]['diff']:+.3f} [{q[m]['low']:+.3f}, {q[m]['high']:+.3f}]" for m in ("contains", "f1")]
        w = q["wall_s"]
        cells.append(f"{w['diff']:+.1f} [{w['low']:+.1f}, {w['high']:+.1f}]")
        lines.append(f"| {name} | {' | '.join(cells)} | {q['same_answer']}/{summaries[0]['questions']} |")
    lines += [
        "",
        "| path | role | calls | prompt tok | cached | completion tok | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for role, u in s["by_role"].items():
            lines.append(
                f"| {s['path']} | {role} | {u['calls']:.0f} | {u['prompt_tokens']:.0f} | "
                f"{u['cached_tokens']:.0f} | {u['completion_tokens']:.0f} | {u['seconds']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict[str, Any]], summaries: list[dict[str, Any]], path: Path) -> None:
    """Seconds per question for each path (paired questions side by side) and the cached share."""
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):
        xs = [i + k * width for i in range(len(run["items"]))]
        ax.bar(xs, [r["wall_s"] for r in run["items"]], width=width, label=f"{run['path']} ({run['server']})")
        bx.bar([k], [100 * summaries[k]["cached_share"]], label=run["path"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(runs[0]["items"]))])
    ax.set_xticklabels([r["id"] for r in runs[0]["items"]], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("seconds per question (MADKE, robust, 1.5B)")
    # Above the bars, so no question's bar is hidden behind it.
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), ncol=len(runs), fontsize=8, frameon=False)
    bx.set_xticks(range(len(runs)))
    bx.set_xticklabels([r["path"] for r in runs])
    bx.set_ylabel("prompt tokens served from cache (%)")
    bx.set_ylim(0, 100)
    save(fig, path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, required=True, help="NQ-open JSONL")
    ap.add_argument("--pools", type=Path, required=True, help="an eval folder's pools.jsonl")
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument(
        "--paths", default="native,xllamacpp", help=f"some of {', '.join(PATHS)}; the first is the base"
    )
    ap.add_argument("--out", type=Path, default=Path("reports/embedded-speed"))
    ap.add_argument(
        "--portable-bin",
        type=Path,
        default=None,
        help="the portable llama-server for the portable path (default: the one make native-llm cached)",
    )
    args = ap.parse_args()
    # A question waits on its turn at a busy server: allow longer than an interactive read timeout.
    env = LLMSettings()
    settings = env.model_copy(update={"timeout_s": max(env.timeout_s, 900.0)})
    pools = {}
    for line in args.pools.read_text().splitlines():
        obj = json.loads(line)
        pools[obj["id"]] = KnowledgePool.model_validate(obj["pool"])
    items = [json.loads(x) for x in args.dataset.read_text().splitlines() if x.strip()]
    items = [it for it in items if it["id"] in pools][: args.questions]
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.paths.split(",")
    unknown = set(names) - set(PATHS)
    if unknown:
        ap.error(f"unknown paths {sorted(unknown)}; choose among {', '.join(PATHS)}")
    if "native" in names and find_llama_server(settings.embedded_server_bin) is None:
        ap.error("no native llama-server: run `make native-llm` (about 5 minutes on 2 cores)")
    portable = args.portable_bin or portable_llama_server()
    if "portable" in names and portable is None:
        ap.error(
            "no portable llama-server: run `make native-llm LLAMA_SERVER_BUILD=portable` or pass "
            "--portable-bin"
        )
    path_settings = {**PATH_SETTINGS, "portable": {"embedded_server_bin": portable}}
    runs = asyncio.run(run_paths(names, items, pools, settings, args.out, path_settings))
    print(write_outputs(runs, args.out))


def pinned_llama_cpp_version(script: Path = BUILD_SCRIPT) -> str:
    """The llama-cpp-python sdist whose llama.cpp ``make native-llm`` builds (the script's default)."""
    found = re.search(r"^pinned_version=([0-9.]+)$", script.read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"no pinned llama.cpp source version in {script}")
    return found.group(1)


def portable_llama_server(cache: Path = LLAMA_CACHE, version: str | None = None) -> Path | None:
    """The portable build ``make native-llm LLAMA_SERVER_BUILD=portable`` cached for the pinned
    llama.cpp source (the same llama.cpp as the native build), if there is one."""
    version = version or pinned_llama_cpp_version()
    binary = cache / f"llama-server-{version}" / "llama-server"
    return binary if binary.is_file() else None


def llama_server_build(binary: Path | None, cache: Path = LLAMA_CACHE) -> str:
    """Which of make native-llm's cached builds ``binary`` is (``native`` or ``portable``), else its path."""
    if binary is None:
        return "not found"
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    for cached in cache.glob("llama-server-*/llama-server"):
        if hashlib.sha256(cached.read_bytes()).hexdigest() == digest:
            return "native" if "-native-" in cached.parent.name else "portable"
    return str(binary)


def write_outputs(runs: list[dict[str, Any]], out: Path) -> str:
    """Raw runs, then the summary, report and plot over the questions every path has finished."""
    for run in runs:
        (out / f"{run['path']}.json").write_text(json.dumps(run, indent=1))
    common = set.intersection(*({r["id"] for r in run["items"]} for run in runs))
    if not common:
        return ""
    paired_runs = [{**run, "items": [r for r in run["items"] if r["id"] in common]} for run in runs]
    summaries = [summarise(r) for r in paired_runs]
    paired = {r["path"]: paired_quality(paired_runs[0]["items"], r["items"]) for r in paired_runs[1:]}
    (out / "summary.json").write_text(json.dumps({"paths": summaries, "paired": paired}, indent=1))
    table = report(summaries, paired)
    (out / "report.md").write_text(table)
    plot(paired_runs, summaries, out / "seconds_per_question.png")
    return table


if __name__ == "__main__":
    main()

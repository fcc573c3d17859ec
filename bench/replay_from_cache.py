"""A finished evaluation run again from the call cache alone: how many model calls it makes (the target
is none), whether its results are the same, and how long it takes.

Run (after the source run, with the same ``PARLEY_EVAL_CACHE_PATH``):

    .venv/bin/python -m bench.replay_from_cache --source reports/pool-search/e2e --label madke \\
        --out reports/call-cache/replay

The source folder's run (its protocol and full configuration from ``eval.json``) is run again by
``parley eval --cache-only`` into a scratch folder holding only the source's pools, on the source's
leading finished questions (``--limit`` caps them), against a scripted OpenAI-compatible server that
serves the source's model name, answers every chat call with an error and counts them: a call that
reached it would fail its item. Compared per question: the answer, the scores, the rounds, and every
transcript call's reply. Writes ``bench.json`` and
``bench.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.reports import command_line, machine, report_head, utc_date, write_json, write_markdown
from engine.config import HONOURED
from parley_testing.scripted_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parent.parent


def run_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The settings of a stored run that ``parley eval --config`` takes back (what its protocol uses)."""
    honoured = HONOURED[spec["protocol"]] | {"prompt_style", "seed", "max_tokens", "temperature"}
    return {k: v for k, v in spec["config"].items() if k in honoured and k != "protocol"}


def leading_finished(folder: Path, label: str) -> int:
    """How many of the folder's first questions the run finished without a gap."""
    order = [json.loads(line)["id"] for line in (folder / "items.jsonl").read_text().splitlines() if line]
    done = {
        r["id"]
        for r in (
            json.loads(line) for line in (folder / "results" / f"{label}.jsonl").read_text().splitlines()
        )
        if r["status"] == "ok"
    }
    count = 0
    for item_id in order:
        if item_id not in done:
            break
        count += 1
    return count


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _results(folder: Path, label: str) -> dict[str, dict[str, Any]]:
    rows = (json.loads(line) for line in _lines(folder / "results" / f"{label}.jsonl"))
    return {r["id"]: r for r in rows if r["status"] == "ok"}


def _replies(folder: Path, label: str) -> dict[str, list[str]]:
    out = {}
    for line in _lines(folder / "transcripts" / f"{label}.jsonl"):
        record = json.loads(line)
        out[record["id"]] = [call["text"] for call in record["result"]["transcript"]]
    return out


def compare(source: Path, replay: Path, label: str, ids: Sequence[str]) -> dict[str, Any]:
    """Per question: the same answer, scores, rounds and transcript replies?"""
    a, b = _results(source, label), _results(replay, label)
    ra, rb = _replies(source, label), _replies(replay, label)
    same = [i for i in ids if i in b and all(a[i][k] == b[i][k] for k in ("answer", "scores", "rounds"))]
    same_calls = [i for i in ids if ra.get(i) == rb.get(i)]
    replayed = sum(b[i]["cached_calls"] for i in ids if i in b)
    calls = sum(b[i]["calls"] for i in ids if i in b)
    return {
        "questions": len(ids),
        "finished": sum(1 for i in ids if i in b),
        "identical_results": len(same),
        "identical_transcripts": len(same_calls),
        "calls": calls,
        "replayed_calls": replayed,
        "differing": [i for i in ids if i not in same][:10],
    }


def cache_size(path: Path) -> dict[str, Any]:
    """The cache file's entries and their bytes (what ``SqliteCallStore`` bounds)."""
    import sqlite3

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        # model calls only: the pools the cache also keeps are not what a run's calls cost
        query = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM calls WHERE key NOT LIKE 'pool-%'"
        entries, size = db.execute(query).fetchone()
    finally:
        db.close()
    return {
        "entries": entries,
        "mb": round(size / 2**20, 2),
        "bytes_per_entry": round(size / max(entries, 1)),
    }


def estimate_mb(folder: Path, bytes_per_entry: float) -> dict[str, Any]:
    """The cache a whole results folder would fill: its calls times the bytes per cached reply."""
    calls = 0
    for path in sorted((folder / "results").glob("*.jsonl")):
        calls += sum(json.loads(line).get("calls", 0) for line in _lines(path))
    return {"folder": str(folder), "calls": calls, "mb": round(calls * bytes_per_entry / 2**20, 1)}


def _model_of(folder: Path, label: str) -> str:
    transcript = next(iter(_lines(folder / "transcripts" / f"{label}.jsonl")), None)
    if transcript is None:
        raise SystemExit(f"{folder}: run {label} has no transcript to take the model's name from")
    return str(json.loads(transcript)["result"]["transcript"][0]["model"] or "local")


def _copy_pools(source: Path, scratch: Path) -> None:
    """The source's pools, as a resumed run would read them: the prompts are then the source's even
    where the index has changed since (a run made before pools were cached kept them only there)."""
    scratch.mkdir(parents=True, exist_ok=True)
    for pools in source.glob("pools*.jsonl"):
        shutil.copy(pools, scratch / pools.name)


def run_against_a_failing_server(args: list[str], model: str, cache: Path | None) -> tuple[float, int]:
    """``parley eval ARGS --cache-only`` with every model call answered by an error; returns the
    seconds it took and how many calls reached the server."""
    with ScriptedLLM(model=model) as llm:
        llm.fail_for(86_400, status=500)  # any call that reaches the model fails its question
        env = {**os.environ, "PARLEY_LLM_BASE_URL": llm.base_url, "PARLEY_LLM_MODEL": model}
        env["PARLEY_LLM_MAX_ATTEMPTS"] = "1"
        env["HF_HUB_OFFLINE"] = "1"
        if cache is not None:
            env["PARLEY_EVAL_CACHE_PATH"] = str(cache)
        command = [
            sys.executable,
            "-m",
            "parley_cli",
            "eval",
            *args,
            "--cache-only",
            "--no-progress",
            "--no-plots",
        ]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
        seconds = time.perf_counter() - started
        reached = len(llm.requests)
    if done.returncode not in (0, 3):
        raise SystemExit(f"parley eval failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, reached


def replay(
    source: Path, label: str, limit: int | None, scratch: Path, cache: Path | None, skip: int = 0
) -> dict[str, Any]:
    manifest = json.loads((source / "eval.json").read_text())
    spec = next(r for r in manifest["runs"] if r["label"] == label)
    n = leading_finished(source, label)
    if limit is not None:
        n = min(n, limit)
    if n == 0:
        raise SystemExit(f"{source}: run {label} has no finished leading questions")
    model = _model_of(source, label)
    items = [json.loads(line) for line in _lines(source / "items.jsonl") if line][skip:n]
    ids = [item["id"] for item in items]
    _copy_pools(source, scratch)
    # The questions to replay as a dataset of their own (the first ``skip`` were answered before the
    # cache kept their calls, or under older keys: they would only fail).
    if all(it.get("kind", "qa") == "qa" for it in items):
        dataset = scratch.parent / "questions.jsonl"
        rows = ({"id": it["id"], "question": it["question"], "answers": it["answers"]} for it in items)
        dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
        args = ["--dataset", str(dataset)]
    elif skip:
        raise SystemExit("--skip replays open questions only (this run's dataset has other kinds)")
    else:
        args = ["--dataset", manifest["dataset"], "--limit", str(n)]
    args += ["--protocols", spec["protocol"]]
    args += ["--config", json.dumps(run_config(spec)), "--out", str(scratch)]
    seconds, reached = run_against_a_failing_server(args, model, cache)
    return {
        "source": str(source),
        "label": label,
        "skipped": skip,
        "model": model,
        "seconds": round(seconds, 1),
        "model_calls_reaching_the_server": reached,
        **compare(source, scratch, spec["label"], ids),
    }


def replay_study(path: Path, scratch: Path, cache: Path | None) -> dict[str, Any]:
    """A whole experiment file again, from the cache, into ``scratch``: every cell's every run compared."""
    from evaluation.experiment import load_experiment  # lazy: only this mode reads experiment files

    experiment = load_experiment(path)
    sources = {cell.label: cell.folder for cell in experiment.cells}
    first = experiment.cells[0]
    labels = [json.loads((first.folder / "eval.json").read_text())["runs"][0]["label"]]
    model = _model_of(first.folder, labels[0])
    replayed = load_experiment(path, out=scratch)
    for cell in replayed.cells:
        _copy_pools(sources[cell.label], cell.folder)
    seconds, reached = run_against_a_failing_server(
        ["--experiment", str(path), "--out", str(scratch)], model, cache
    )
    totals: dict[str, Any] = {
        "questions": 0,
        "finished": 0,
        "identical_results": 0,
        "identical_transcripts": 0,
    }
    totals |= {"calls": 0, "replayed_calls": 0, "differing": []}
    for cell in replayed.cells:
        source = sources[cell.label]
        for run in json.loads((source / "eval.json").read_text())["runs"]:
            ids = list(_results(source, run["label"]))
            found = compare(source, cell.folder, run["label"], ids)
            for key in (
                "questions",
                "finished",
                "identical_results",
                "identical_transcripts",
                "calls",
                "replayed_calls",
            ):
                totals[key] += found[key]
            totals["differing"] += [f"{cell.label}/{run['label']}/{i}" for i in found["differing"]]
    study = json.loads((experiment.out / "study.json").read_text())
    again = json.loads((scratch / "study.json").read_text())
    same_report = [(r["id"], r["accuracy"]) for r in study["runs"]] == [
        (r["id"], r["accuracy"]) for r in again["runs"]
    ]
    return {
        "source": str(path),
        "label": f"{len(replayed.cells)} cells",
        "model": model,
        "seconds": round(seconds, 1),
        "model_calls_reaching_the_server": reached,
        "same_study_accuracies": same_report,
        **totals,
        "differing": totals["differing"][:10],
    }


def markdown(result: dict[str, Any], argv: Sequence[str]) -> list[str]:
    r = result
    lines = report_head(
        "A finished run replayed from the call cache",
        f"Measured {utc_date()} on {machine()} by `{command_line('bench.replay_from_cache', argv)}`.",
    )
    what = f"run `{r['label']}`" if "same_study_accuracies" not in r else f"every run of its {r['label']}"
    if r.get("skipped"):
        what += f", from its question {r['skipped'] + 1} on"
    lines += [
        f"Source: `{r['source']}`, {what} ({r['model']}), {r['questions']} questions in all.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| model calls that reached the server | {r['model_calls_reaching_the_server']} |",
        f"| calls replayed from the cache | {r['replayed_calls']:,} of {r['calls']:,} |",
        f"| questions finished | {r['finished']} of {r['questions']} |",
        f"| identical answer, scores and rounds | {r['identical_results']} of {r['questions']} |",
        f"| identical transcript replies | {r['identical_transcripts']} of {r['questions']} |",
        f"| wall time of the replay | {r['seconds']} s |",
    ]
    if "same_study_accuracies" in r:
        lines.append(
            f"| the study report's accuracies identical | {'yes' if r['same_study_accuracies'] else 'no'} |"
        )
    if "cache" in r:
        c = r["cache"]
        lines.append(
            f"| the cache file | {c['entries']:,} entries, {c['mb']} MB ({c['bytes_per_entry']:,} B each) |"
        )
    if "estimate" in r:
        e = r["estimate"]
        lines.append(
            f"| estimated cache for `{e['folder']}` | {e['mb']} MB ({e['calls']:,} calls at that size each) |"
        )
    if r["differing"]:
        lines += ["", f"Differing (first 10): {', '.join(r['differing'])}"]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--source", type=Path, help="a finished results folder")
    target.add_argument("--experiment", type=Path, help="a finished study: its experiment file")
    parser.add_argument("--label", default="madke", help="the run to replay")
    parser.add_argument("--limit", type=int, default=None, help="at most this many leading questions")
    parser.add_argument(
        "--skip", type=int, default=0, help="compare from this question on (the first ones run, not compared)"
    )
    parser.add_argument("--cache", type=Path, default=None, help="the cache file (PARLEY_EVAL_CACHE_PATH)")
    parser.add_argument(
        "--estimate-for", type=Path, default=None, help="a results folder whose whole cache size to estimate"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    cache = args.cache or Path(
        os.environ.get("PARLEY_EVAL_CACHE_PATH") or ROOT / ".parley" / "call-cache.sqlite"
    )
    size = cache_size(cache) if cache.exists() else None
    with tempfile.TemporaryDirectory(prefix="parley-replay-") as scratch:
        if args.experiment is not None:
            result = replay_study(args.experiment, Path(scratch) / "replay", args.cache)
        else:
            result = replay(
                args.source, args.label, args.limit, Path(scratch) / "replay", args.cache, args.skip
            )
    if size is not None:
        result["cache"] = size
        if args.estimate_for is not None:
            result["estimate"] = estimate_mb(args.estimate_for, size["bytes_per_entry"])
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "bench.json", result)
    print(write_markdown(args.out / "bench.md", markdown(result, sys.argv[1:] if argv is None else argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

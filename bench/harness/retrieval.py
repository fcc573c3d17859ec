"""What the retrieval studies share: whether passages hold a gold answer, the pool the service would
keep of a ranked list, their settings and inputs, their report files and the facts those carry."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.plots import curves
from bench.harness.questions import load_questions
from bench.harness.reports import command_line, machine, utc_date, write_json, write_markdown
from evaluation.metrics import contains_match
from retriever.pools import _Candidate, dedupe
from retriever.search import PassageHit
from retriever.settings import RetrieverSettings


def has_answer(texts: list[str], aliases: list[str]) -> bool:
    """Whether any normalised alias occurs as whole words in any normalised text: the rule the
    evaluation's ``contains`` scores answers by, applied to passages."""
    return any(contains_match(t, aliases) for t in texts)


def pool_of(hits: Sequence[PassageHit], k: int, dedupe_cosine: float) -> list[_Candidate]:
    """The pool ``POST /v1/pools`` would keep for ``k_wiki=k``: the top k, near-duplicates removed by
    the service's own rule."""
    return dedupe(
        [_Candidate("wikipedia", h.title, h.text, h.url, h.score, h.vector) for h in hits[:k]], dedupe_cosine
    )


def pool_has_answer(hits: Sequence[PassageHit], k: int, aliases: list[str], dedupe_cosine: float) -> bool:
    """Whether the pool of ``k_wiki=k`` (top k, near-duplicates removed as the service does) holds it."""
    return has_answer([c.text for c in pool_of(hits, k, dedupe_cosine)], aliases)


def retriever_settings(data_dir: Path | None) -> RetrieverSettings:
    """The retriever's settings as configured, with ``--data-dir`` over its data folder; no warm-up (a
    study warms what it measures itself)."""
    chosen: dict[str, Any] = {"data_dir": data_dir} if data_dir else {}
    return RetrieverSettings(warmup=False, **chosen)


def llm_bench_inputs(args: argparse.Namespace) -> tuple[RetrieverSettings, list[dict[str, Any]]]:
    """The retriever settings and questions ``cli.add_llm_bench_args`` options name (the model server
    is required)."""
    if not args.llm_url:
        raise SystemExit("--llm-url (or PARLEY_LLM_BASE_URL) names the model's OpenAI-compatible endpoint")
    return retriever_settings(args.data_dir), load_questions(args.questions, args.split, args.limit)


def questions_file(args: argparse.Namespace) -> str:
    """The question file's name as the reports print it, with the half a ``--split`` kept."""
    return str(args.questions.name + (f" ({args.split} half)" if args.split else ""))


def run_facts(module: str, argv: Sequence[str] | None, args: argparse.Namespace) -> dict[str, str]:
    """What an LLM-in-the-search report says about its run: the command, the questions, the model, the
    machine, the date."""
    return {
        "command": command_line(module, argv, env="HF_HUB_OFFLINE=1"),
        "questions_file": questions_file(args),
        "llm_url": args.llm_url,
        "model": args.model,
        "machine": machine(),
        "date": utc_date(),
    }


def write_pool_report(
    out: Path, result: dict[str, Any], markdown: str | Sequence[str], ks: Sequence[int], *, title: str,
    xlabel: str = "k (pool size)", **curve_options: Any,
) -> str:  # fmt: skip
    """An answer-in-pool study's three files in ``out``: ``bench.json`` (the result), ``bench.md`` and
    ``answer_in_pool.png`` (each configuration's answer-in-pool@k over ``ks``); the Markdown's text."""
    write_json(out / "bench.json", result)
    text = write_markdown(out / "bench.md", markdown)
    series: dict[str, Sequence[float]] = {
        name: [c["answer_in_pool"][k] for k in ks] for name, c in result["configs"].items()
    }
    curves(out / "answer_in_pool.png", ks, series, xlabel=xlabel, ylabel="answer-in-pool@k", title=title,
           **curve_options)  # fmt: skip
    return text


def print_progress(done: int, total: int, in_pool: dict[str, dict[int, list[float]]], k: int) -> None:
    """Every tenth question, each configuration's answer-in-pool@``k`` so far, on stderr: an hours-long
    study shows where it is heading."""
    if done % 10 == 0:
        shares = " ".join(f"{name} @{k} {statistics.mean(v[k]):.3f}" for name, v in in_pool.items())
        print(f"{done}/{total} {shares}", file=sys.stderr, flush=True)

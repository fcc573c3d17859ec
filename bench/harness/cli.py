"""The command-line options studies share, so the same option means the same thing in every study."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def study_parser(doc: str | None, *, prog: str | None = None) -> argparse.ArgumentParser:
    """A parser whose ``--help`` prints the study's module docstring as written (its run commands
    keep their line breaks)."""
    return argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_question_args(ap: argparse.ArgumentParser, out: Path) -> None:
    """The question file, where the report goes, and which questions: ``--split even|odd`` keeps every
    other one (tune on one half, report on the other), ``--limit`` the first N."""
    ap.add_argument("--questions", type=Path, required=True, help="JSONL: question, answers")
    ap.add_argument("--out", type=Path, default=out)
    ap.add_argument("--split", choices=["even", "odd"], default=None)
    ap.add_argument("--limit", type=int, default=None)


def add_llm_bench_args(ap: argparse.ArgumentParser, out: Path) -> None:
    """The options every LLM-in-the-search study takes: the questions and the OpenAI-compatible model
    server (``PARLEY_LLM_BASE_URL``/``PARLEY_LLM_MODEL`` by default), and the index to search."""
    add_question_args(ap, out)
    ap.add_argument(
        "--llm-url", default=os.environ.get("PARLEY_LLM_BASE_URL", ""), help="OpenAI-compatible /v1"
    )
    ap.add_argument("--model", default=os.environ.get("PARLEY_LLM_MODEL", "qwen2.5-coder-1.5b"))
    ap.add_argument("--data-dir", type=Path, default=None, help="override PARLEY_RETRIEVER_DATA_DIR")

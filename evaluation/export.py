"""A results folder as Parquet tables others can load: ``parley eval --out FOLDER --export DIR``.

Four tables, one file each, with the column types and descriptions of ``TABLES`` (the one place the
schema is stated; the export's README and docs/evaluation.md list it):

- ``items``: the questions and their gold answers;
- ``results``: one row per run × question: the answer, every score, cost, status;
- ``calls``: one row per model call of every transcript (role, round, agent, reply, tokens, latency,
  whether the call cache replayed it);
- ``pools``: one row per knowledge item of a question's first pool, and one per item a run's debaters
  found with their searches during the debate (who, after which round, with what search).

The folder is also a Hugging Face ``datasets`` layout: its ``README.md`` starts with the YAML header
that names each table as a configuration, so ``datasets.load_dataset(DIR, "results")`` reads it, and
``pyarrow.parquet.read_table(DIR / "results.parquet")`` or pandas read any table without Parley.
pyarrow is the ``export`` extra (``pip install 'parley[export]'``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.store import Workspace, WorkspaceError
from services.knowledge import KnowledgeItem

SCHEMA_VERSION = 2  # 2: pools gained the items debaters found during the debate


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # string, int64, float64, bool, list<string>, list<int64>
    description: str


@dataclass(frozen=True)
class Table:
    name: str
    description: str
    columns: tuple[Column, ...]


TABLES: tuple[Table, ...] = (
    Table(
        "items",
        "the questions, in the dataset's order",
        (
            Column("id", "string", "the question's id (unique in the folder)"),
            Column("question", "string", "the question as asked"),
            Column("answers", "list<string>", "gold answers (aliases)"),
            Column("kind", "string", "qa, mc (multiple choice), fever, kks, numeric"),
            Column("line", "int64", "1-based line in the dataset file (0 for a JSON array)"),
        ),
    ),
    Table(
        "results",
        "one row per run and question",
        (
            Column("run", "string", "the run's label (protocol, or protocol-style)"),
            Column("id", "string", "the question's id"),
            Column("protocol", "string", "the debate protocol"),
            Column("prompt_style", "string", "paper or robust"),
            Column("status", "string", "ok or failed"),
            Column("error", "string", "why a failed item failed (null when ok)"),
            Column("answer", "string", "the final answer"),
            Column("correct", "float64", "the folder's primary metric (1.0 correct, 0.0 wrong)"),
            Column("strict_contains", "float64", "a gold alias on word boundaries in a short answer"),
            Column("contains", "float64", "a gold alias anywhere in the answer"),
            Column("em", "float64", "exact match after normalisation"),
            Column("f1", "float64", "token F1 against the best alias"),
            Column("rounds", "int64", "rounds debated"),
            Column("consensus", "bool", "the judge stopped the debate on agreement"),
            Column("calls", "int64", "model calls"),
            Column("cached_calls", "int64", "calls the call cache replayed (among calls)"),
            Column("prompt_tokens", "int64", "prompt tokens of all calls"),
            Column("completion_tokens", "int64", "completion tokens of all calls"),
            Column("seconds", "float64", "wall-clock seconds for the question"),
            Column("degraded", "list<string>", "steps that ran degraded (a fallback endpoint, a default)"),
        ),
    ),
    Table(
        "calls",
        "one row per model call of every transcript",
        (
            Column("run", "string", "the run's label"),
            Column("id", "string", "the question's id"),
            Column("seq", "int64", "0-based position of the call in the transcript"),
            Column("round", "int64", "1-based round; 0 for calls outside the rounds"),
            Column("role", "string", "select, debater, judge, summarizer, vote, query, …"),
            Column("agent", "int64", "0-based agent (null for judge and summarizer)"),
            Column("model", "string", "the model that answered"),
            Column("text", "string", "the reply"),
            Column("answer", "string", "the answer parsed from the reply"),
            Column("verdict", "bool", "judge: consensus reached"),
            Column("selected", "list<int64>", "select: pool numbers chosen"),
            Column("parse_error", "string", "why the reply could not be read"),
            Column("prompt_tokens", "int64", "prompt tokens"),
            Column("completion_tokens", "int64", "completion tokens"),
            Column("latency_ms", "float64", "the call's latency"),
            Column("from_cache", "bool", "replayed from the call cache"),
        ),
    ),
    Table(
        "pools",
        "one row per item of each question's first pool (the pool every run read), and one per item a "
        "run's debaters added with their searches",
        (
            Column("id", "string", "the question's id"),
            Column("n", "int64", "the item's number as the agents saw it"),
            Column("source", "string", "wikipedia or web"),
            Column("title", "string", "the passage's title"),
            Column("text", "string", "the passage"),
            Column("url", "string", "where it came from, if known"),
            Column("score", "float64", "the retriever's score"),
            Column(
                "run",
                "string",
                "null for the pool built before the debate (every run read it); "
                "the run whose debater's search added the item",
            ),
            Column("found_by_agent", "int64", "0-based agent whose search added the item (else null)"),
            Column("found_round", "int64", "the round after which it searched (0: before the first)"),
            Column("found_query", "string", "the search the agent wrote"),
        ),
    ),
)


class ExportError(WorkspaceError):
    """A folder that cannot be exported, or pyarrow missing."""


def _arrow_type(pa: Any, name: str) -> Any:
    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "list<string>": pa.list_(pa.string()),
        "list<int64>": pa.list_(pa.int64()),
    }
    return types[name]


def arrow_schema(table: Table) -> Any:
    """The table's pyarrow schema, each field's description in its metadata."""
    import pyarrow as pa  # lazy: pyarrow is the export extra, loaded only to export

    return pa.schema(
        [
            pa.field(c.name, _arrow_type(pa, c.type), metadata={"description": c.description})
            for c in table.columns
        ],
        metadata={"parley.table": table.name, "parley.schema_version": str(SCHEMA_VERSION)},
    )


def _items(ws: Workspace) -> Iterator[dict[str, Any]]:
    for item in ws.load_items():
        yield {
            "id": item.id,
            "question": item.question,
            "answers": item.answers,
            "kind": item.kind,
            "line": item.line,
        }


def _results(ws: Workspace, labels: list[str]) -> Iterator[dict[str, Any]]:
    for label in labels:
        for record in ws.load_results(label).values():
            scores = record.scores
            yield {
                "run": label,
                "id": record.id,
                "protocol": record.protocol,
                "prompt_style": record.prompt_style,
                "status": record.status,
                "error": record.error,
                "answer": record.answer,
                "correct": scores.correct if scores else None,
                "strict_contains": scores.strict_contains if scores else None,
                "contains": scores.contains if scores else None,
                "em": scores.em if scores else None,
                "f1": scores.f1 if scores else None,
                "rounds": record.rounds,
                "consensus": record.consensus,
                "calls": record.calls,
                "cached_calls": record.cached_calls,
                "prompt_tokens": record.prompt_tokens,
                "completion_tokens": record.completion_tokens,
                "seconds": record.seconds,
                "degraded": record.degraded,
            }


def _calls(ws: Workspace, labels: list[str]) -> Iterator[dict[str, Any]]:
    for label in labels:
        for item_id, result in ws.load_transcripts(label).items():
            for seq, call in enumerate(result.transcript):
                yield {
                    "run": label,
                    "id": item_id,
                    "seq": seq,
                    "round": call.round,
                    "role": call.role,
                    "agent": call.agent,
                    "model": call.model,
                    "text": call.text,
                    "answer": call.answer,
                    "verdict": call.verdict,
                    "selected": call.selected,
                    "parse_error": call.parse_error,
                    "prompt_tokens": call.prompt_tokens,
                    "completion_tokens": call.completion_tokens,
                    "latency_ms": call.latency_ms,
                    "from_cache": call.from_cache,
                }


def _pool_row(item_id: str, it: KnowledgeItem, run: str | None) -> dict[str, Any]:
    found = it.found_by
    return {
        "id": item_id,
        "n": it.n,
        "source": it.source,
        "title": it.title,
        "text": it.text,
        "url": it.url,
        "score": it.score,
        "run": run,
        "found_by_agent": found.agent if found else None,
        "found_round": found.round if found else None,
        "found_query": found.query if found else None,
    }


def _pools(ws: Workspace, labels: list[str]) -> Iterator[dict[str, Any]]:
    """Each question's first pool once, then what each run's searches added to it (a run's final pool
    is in its transcripts; its first items are the shared pool's)."""
    for item_id, pool in ws.load_pools().items():
        for it in pool.items:
            yield _pool_row(item_id, it, None)
    for label in labels:
        for item_id, result in ws.load_transcripts(label).items():
            for it in result.pool.items:
                if it.found_by is not None:
                    yield _pool_row(item_id, it, label)


def export_folder(root: Path, dest: Path) -> dict[str, int]:
    """Write the four tables of the results folder ``root`` into ``dest`` (with its README); returns
    the rows per table."""
    try:  # lazy: pyarrow is the export extra, loaded only to export
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("--export needs pyarrow: pip install 'parley[export]' (or pyarrow)") from None
    ws = Workspace(root)
    manifest = ws.load_manifest()
    if manifest is None:
        raise ExportError(f"{root} holds no evaluation (no eval.json)")
    labels = [r.label for r in manifest.runs]
    rows = {
        "items": list(_items(ws)),
        "results": list(_results(ws, labels)),
        "calls": list(_calls(ws, labels)),
        "pools": list(_pools(ws, labels)),
    }
    dest.mkdir(parents=True, exist_ok=True)
    counts = {}
    for table in TABLES:
        schema = arrow_schema(table)
        data = pa.Table.from_pylist(rows[table.name], schema=schema)
        pq.write_table(data, dest / f"{table.name}.parquet", compression="zstd")
        counts[table.name] = data.num_rows
    meta = {
        "schema_version": SCHEMA_VERSION,
        "source": str(root),
        "dataset": manifest.dataset,
        "primary": manifest.primary,
        "runs": labels,
        "rows": counts,
    }
    (dest / "export.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    (dest / "README.md").write_text(readme(meta), encoding="utf-8")
    return counts


def schema_markdown() -> str:
    """The tables and their columns as Markdown (the export's README and docs/evaluation.md)."""
    lines: list[str] = []
    for table in TABLES:
        lines += [
            f"**{table.name}.parquet**: {table.description}.",
            "",
            "| column | type | meaning |",
            "|---|---|---|",
        ]
        lines += [f"| `{c.name}` | {c.type} | {c.description} |" for c in table.columns]
        lines.append("")
    return "\n".join(lines)


def readme(meta: dict[str, Any]) -> str:
    header = ["---", "configs:"]
    for i, table in enumerate(TABLES):
        header += [f"- config_name: {table.name}", f"  data_files: {table.name}.parquet"]
        if i == 1:
            header.append("  default: true")
    header += ["---", ""]
    body = [
        f"# Parley evaluation: {Path(str(meta['dataset'])).name}",
        "",
        f"Runs: {', '.join(meta['runs'])}. Primary metric: {meta['primary']}. Schema version "
        f'{meta["schema_version"]}. Load a table with `datasets.load_dataset(PATH, "results")` or '
        '`pyarrow.parquet.read_table("results.parquet")`.',
        "",
        schema_markdown(),
    ]
    return "\n".join(header + body)

"""The output folder of an evaluation: append-only JSONL files that make interrupted runs resumable.

Layout::

    OUT/eval.json                 manifest: dataset, runs (label, protocol, style, config), primary metric
    OUT/items.jsonl               the items evaluated (the report can be rebuilt without the dataset),
                                  with the pools published with them (MADKE's files)
    OUT/pools.jsonl               one retrieved pool per item, built once, shared by every run
    OUT/pools.<key>.jsonl         the same for runs with ``search_query=passage`` (one file per
                                  ``search_key``): each pool with the call that wrote its passage
    OUT/results/<label>.jsonl     one line per item: answer, gold, scores, rounds, calls, tokens, seconds
    OUT/transcripts/<label>.jsonl the full DebateResult per item (``transcript_ref`` points here)
    OUT/api/<label>.json          the batch id of an ``--api`` run, so a resumed run keeps polling it
    OUT/invocations.jsonl         one line per run and invocation that finished items: its wall-clock
                                  seconds and what it finished (questions per hour, across resumes)

Every line is written and flushed as soon as its item finishes; the last line for an id wins, and a
torn last line (a crash mid-write) is ignored. Resuming therefore redoes nothing that finished and
retries everything that failed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from engine.config import DebateConfig
from engine.result import DebateResult, TranscriptRecord
from evaluation.items import Item
from evaluation.judge import JudgeVerdict
from evaluation.scoring import Scores
from services.knowledge import KnowledgePool

_SAFE_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
QUESTION_POOLS = "question"  # the pools searched for the question alone (pools.jsonl)


class RunSpec(BaseModel):
    """One column of the report: a protocol in a prompt style with its full engine configuration."""

    label: str
    protocol: str
    prompt_style: str
    config: dict[str, Any]
    budget_of: str | None = Field(
        default=None,
        description="same-budget vote baseline: the run whose per-question token use this run may spend",
    )


class Manifest(BaseModel):
    dataset: str
    format: str
    limit: int | None = None
    select: str | None = Field(default=None, description="--slice: the split of the dataset's questions run")
    primary: str = "em"
    runs: list[RunSpec]
    judge_model: str | None = None
    problems: list[str] = Field(default_factory=list, description="dataset lines skipped, with numbers")
    compare: list[tuple[str, str]] = Field(default_factory=list, description="extra --compare pairs")
    preset: str | None = Field(default=None, description="the paper preset the runs were planned from")
    benchmark: str | None = Field(default=None, description="benchmark name for the published figures")
    pool_source: str = Field(
        default="retriever", description="file: the dataset's own pools; retriever: pools built by Parley"
    )
    pool_items_dropped: int = Field(default=0, description="published pool entries without text, dropped")
    created_at: str = Field(default_factory=lambda: now_iso())
    updated_at: str = Field(default_factory=lambda: now_iso())


class ResultRecord(BaseModel):
    """One line of ``results/<label>.jsonl``."""

    id: str
    index: int
    run: str
    protocol: str
    prompt_style: str
    status: Literal["ok", "failed"]
    error: str | None = None
    question: str
    gold: list[str]
    kind: str = "qa"
    answer: str | None = None
    answer_source: str | None = None
    final_answers: list[str | None] = Field(default_factory=list)
    consistent: bool | None = None
    rounds: int = 0
    consensus: bool | None = None
    scores: Scores | None = None
    judge: JudgeVerdict | None = None
    calls: int = 0
    cached_calls: int = Field(default=0, description="calls replayed from the call cache (among calls)")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    budget_tokens: int | None = Field(default=None, description="same-budget runs: the debate's tokens")
    samples: int | None = Field(default=None, description="same-budget runs: votes sampled")
    transcript_ref: str | None = None
    degraded: list[str] = Field(
        default_factory=list,
        description="the debate's degraded steps: a fallback endpoint answered, or a judge's or "
        "summarizer's reply was unreadable",
    )
    attempt: int = 1
    finished_at: str = Field(default_factory=lambda: now_iso())


def _changed_settings(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The settings that differ between two run configurations. A setting one of them lacks counts
    as the engine's default: a run recorded before a setting existed (which then behaved as its
    default) resumes under a version that records it."""
    fields = DebateConfig.model_fields

    def value(config: dict[str, Any], key: str) -> Any:
        if key in config:
            return config[key]
        field = fields.get(key)
        return None if field is None or field.is_required() else field.get_default(call_default_factory=True)

    return sorted(k for k in set(before) | set(now) if value(before, k) != value(now, k))


class WorkspaceError(RuntimeError):
    """The output folder holds results that do not fit this command (another config for a label)."""


class Invocation(BaseModel):
    """One invocation's work on one run: its wall-clock time and the items it finished. Per-item
    ``seconds`` are latencies (several items overlap at ``--concurrency`` > 1); these give throughput."""

    run: str
    started_at: str
    wall_s: float = Field(ge=0)
    ok: int = Field(ge=0)
    failed: int = Field(ge=0)
    concurrency: int = Field(ge=1)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_label(label: str) -> str:
    if not _SAFE_LABEL.match(label):
        raise ValueError(f"run label {label!r} may only contain letters, digits, '.', '_' and '-'")
    return label


def _append(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(obj, ensure_ascii=False) + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """JSON objects of a JSONL file, skipping a torn or garbled line instead of failing the resume."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class Workspace:
    """Reads and writes one evaluation's output folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    # -- manifest and items ---------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "eval.json"

    def load_manifest(self) -> Manifest | None:
        if not self.manifest_path.exists():
            return None
        return Manifest.model_validate_json(self.manifest_path.read_text(encoding="utf-8"))

    def save_manifest(self, manifest: Manifest) -> None:
        _atomic_write(self.manifest_path, manifest.model_dump_json(indent=2))

    def merge_manifest(self, new: Manifest) -> Manifest:
        """Keep earlier runs, add new ones; refuse a label whose configuration changed.

        Mixing answers from two configurations under one label would make its numbers meaningless,
        so a changed config needs a fresh ``--out`` (or ``--fresh``).
        """
        old = self.load_manifest()
        if old is None:
            self.save_manifest(new)
            return new
        if old.primary != new.primary:
            raise WorkspaceError(
                f"{self.root} was scored with --primary {old.primary}; use that, or a new --out"
            )
        if old.select != new.select:
            raise WorkspaceError(
                f"{self.root} holds the questions of --slice {old.select or '(none: the whole file)'}; "
                f"--slice {new.select or '(none)'} is another split: use that, or a new --out"
            )
        if old.pool_source != new.pool_source:
            raise WorkspaceError(
                f"{self.root} was run with --pool {old.pool_source}; its answers used other knowledge "
                f"than --pool {new.pool_source} would; use that, or a new --out"
            )
        runs = {r.label: r for r in old.runs}
        for spec in new.runs:
            prev = runs.get(spec.label)
            changed = _changed_settings(prev.config, spec.config) if prev is not None else []
            if changed:
                raise WorkspaceError(
                    f"{self.root} already holds run {spec.label!r} with a different configuration "
                    f"(changed: {', '.join(changed)}); use a new --out or --fresh"
                )
            runs[spec.label] = spec
        merged = new.model_copy(
            update={"runs": list(runs.values()), "created_at": old.created_at, "updated_at": now_iso()}
        )
        self.save_manifest(merged)
        return merged

    @property
    def items_path(self) -> Path:
        return self.root / "items.jsonl"

    def save_items(self, items: list[Item]) -> None:
        """Record the evaluated items, keeping ones from earlier invocations (a larger --limit later)."""
        known = {it.id: it for it in self.load_items()}
        for it in items:
            known[it.id] = it
        _atomic_write(self.items_path, "".join(it.model_dump_json() + "\n" for it in known.values()))

    def load_items(self) -> list[Item]:
        out = []
        for obj in _read_lines(self.items_path):
            try:
                out.append(Item.model_validate(obj))
            except ValidationError:
                continue
        return out

    # -- pools ----------------------------------------------------------------------------------
    @property
    def pools_path(self) -> Path:
        return self.root / "pools.jsonl"

    def pools_path_for(self, key: str = QUESTION_POOLS) -> Path:
        """Pools searched for the question alone in ``pools.jsonl``; those searched with a passage
        (``engine.search_passage.search_key``) in a file of their own per key."""
        return self.pools_path if key == QUESTION_POOLS else self.root / f"pools.{check_label(key)}.jsonl"

    def load_pools(self, key: str = QUESTION_POOLS) -> dict[str, KnowledgePool]:
        return {item_id: pool for item_id, (pool, _) in self.load_pools_with_search(key).items()}

    def load_pools_with_search(
        self, key: str = QUESTION_POOLS
    ) -> dict[str, tuple[KnowledgePool, TranscriptRecord | None]]:
        """Each item's pool and the call that wrote the passage it was searched with (None: none)."""
        pools: dict[str, tuple[KnowledgePool, TranscriptRecord | None]] = {}
        for obj in _read_lines(self.pools_path_for(key)):
            try:
                search = obj.get("search")
                pools[str(obj["id"])] = (
                    KnowledgePool.model_validate(obj["pool"]),
                    TranscriptRecord.model_validate(search) if search is not None else None,
                )
            except (KeyError, ValidationError):
                continue
        return pools

    def save_pool(
        self,
        item_id: str,
        pool: KnowledgePool,
        *,
        key: str = QUESTION_POOLS,
        search: TranscriptRecord | None = None,
    ) -> None:
        line: dict[str, Any] = {"id": item_id, "pool": pool.model_dump(mode="json")}
        if search is not None:
            line["search"] = search.model_dump(mode="json")
        _append(self.pools_path_for(key), line)

    # -- results and transcripts ----------------------------------------------------------------
    def results_path(self, label: str) -> Path:
        return self.root / "results" / f"{check_label(label)}.jsonl"

    def transcripts_path(self, label: str) -> Path:
        return self.root / "transcripts" / f"{check_label(label)}.jsonl"

    def load_results(self, label: str) -> dict[str, ResultRecord]:
        """The latest record per item id."""
        out: dict[str, ResultRecord] = {}
        for obj in _read_lines(self.results_path(label)):
            try:
                rec = ResultRecord.model_validate(obj)
            except ValidationError:
                continue
            out[rec.id] = rec
        return out

    def write_result(self, record: ResultRecord, result: DebateResult | None = None) -> ResultRecord:
        """Append the transcript first, then the result line that refers to it (a crash between the
        two leaves an orphan transcript, never a result without its transcript)."""
        if result is not None:
            _append(
                self.transcripts_path(record.run), {"id": record.id, "result": result.model_dump(mode="json")}
            )
            record = record.model_copy(
                update={"transcript_ref": f"transcripts/{record.run}.jsonl#{record.id}"}
            )
        _append(self.results_path(record.run), record.model_dump(mode="json"))
        return record

    def replace_results(self, label: str, records: Sequence[ResultRecord]) -> None:
        """Rewrite a run's results file with ``records``, one line each (atomic: an interruption leaves
        the old file whole)."""
        _atomic_write(self.results_path(label), "".join(r.model_dump_json() + "\n" for r in records))

    def load_transcripts(self, label: str) -> dict[str, DebateResult]:
        out: dict[str, DebateResult] = {}
        for obj in _read_lines(self.transcripts_path(label)):
            try:
                out[str(obj["id"])] = DebateResult.model_validate(obj["result"])
            except (KeyError, ValidationError):
                continue
        return out

    def compact(self, label: str, order: list[str]) -> None:
        """Rewrite a run's files with one line per item in dataset order (after a resumed run they
        hold superseded lines). Atomic, so an interruption here loses nothing."""
        results = self.load_results(label)
        rank = {item_id: i for i, item_id in enumerate(order)}
        ordered = sorted(results.values(), key=lambda r: (rank.get(r.id, len(rank)), r.index))
        self.replace_results(label, ordered)
        path = self.transcripts_path(label)
        if path.exists():
            latest: dict[str, dict[str, Any]] = {}
            for obj in _read_lines(path):
                if "id" in obj:
                    latest[str(obj["id"])] = obj
            keep = [latest[r.id] for r in ordered if r.id in latest and r.status == "ok"]
            _atomic_write(path, "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in keep))

    # -- throughput ------------------------------------------------------------------------------
    @property
    def invocations_path(self) -> Path:
        return self.root / "invocations.jsonl"

    def log_invocation(self, invocation: Invocation) -> None:
        _append(self.invocations_path, invocation.model_dump(mode="json"))

    def load_invocations(self, label: str) -> list[Invocation]:
        out = []
        for obj in _read_lines(self.invocations_path):
            if obj.get("run") == label:
                try:
                    out.append(Invocation.model_validate(obj))
                except ValidationError:
                    continue
        return out

    # -- API batches ----------------------------------------------------------------------------
    def batch_state_path(self, label: str) -> Path:
        return self.root / "api" / f"{check_label(label)}.json"

    def load_batch_state(self, label: str) -> dict[str, Any] | None:
        path = self.batch_state_path(label)
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None

    def save_batch_state(self, label: str, state: dict[str, Any] | None) -> None:
        path = self.batch_state_path(label)
        if state is None:
            path.unlink(missing_ok=True)
        else:
            _atomic_write(path, json.dumps(state, indent=2))

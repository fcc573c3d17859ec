"""``parley mcp --in-process``: the MCP tools with debates run in this process, no gateway.

``parley_client.mcp_server`` states the tools (``McpTools``), builds the server and offers the same
tools through a gateway; here the debates run on ``LocalDebater`` (the configured or embedded LLM),
batches one item after another.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import ValidationError

from engine.config import DebateConfig, Question, validate_question
from engine.result import DebateResult
from parley_client.mcp_server import BatchItemResult, DebateAnswer, McpTools, debate_answer, report_progress
from parley_wire.models import BatchView, DebateEvent


class Debater(Protocol):
    """What runs a debate in this process (``inprocess.local_debate.LocalDebater``)."""

    async def debate(self, question: str, config: DebateConfig, on_event: Any = None) -> DebateResult: ...


# In-process batches run one item after another (one process, one model); these bound what a batch
# and the server keep.
MAX_LOCAL_BATCH_ITEMS = 1000
MAX_LOCAL_BATCHES = 20

# What the ``debate`` tool's answer reads of a result: not the transcript, which it would only copy.
ANSWER_FIELDS = {"answer", "protocol", "rounds", "consensus", "answer_source", "usage"}


@dataclass
class LocalBatch:
    """A batch run in this process: its items' state, in input order."""

    batch_id: str
    config: DebateConfig
    questions: list[str]
    items: list[BatchItemResult]
    created_at: float = field(default_factory=time.time)
    task: asyncio.Task[None] | None = None

    def view(self) -> BatchView:
        """The gateway's view of a batch: counts by status and the share finished."""
        counts = Counter(item.status for item in self.items)
        done = counts["completed"] + counts["failed"]
        if done == len(self.items):
            status = "completed"
        else:
            status = "queued" if counts["queued"] == len(self.items) else "running"
        return BatchView(
            batch_id=self.batch_id,
            status=status,
            total=len(self.items),
            counts=dict(counts),
            progress=done / len(self.items),
            created_at=self.created_at,
            config=self.config.model_dump(mode="json", exclude_defaults=True),
        )


class LocalTools(McpTools):
    """The tools without a gateway: debates run in this process (the configured or embedded LLM),
    batches one item after another in the background; the last ``keep`` results are kept for the
    transcript resource, the last ``MAX_LOCAL_BATCHES`` batches for their status and results."""

    def __init__(self, debater: Debater, keep: int = 100) -> None:
        self.debater = debater
        self.keep = keep
        self.results: OrderedDict[str, DebateResult] = OrderedDict()
        self.batches: OrderedDict[str, LocalBatch] = OrderedDict()

    def _keep_result(self, result: DebateResult) -> str:
        job_id = f"local_{uuid.uuid4().hex}"
        self.results[job_id] = result
        while len(self.results) > self.keep:
            self.results.popitem(last=False)
        return job_id

    async def run_debate(self, question: str, config: dict[str, Any], ctx: Context) -> DebateAnswer:
        checked_config = _local_config(config)
        checked_question = _local_question(question)
        total = float(checked_config.rounds)

        async def on_event(event: str, data: dict[str, Any]) -> None:
            await report_progress(ctx, DebateEvent(id="", type=event, data=data), total)

        result = await self.debater.debate(checked_question, checked_config, on_event)
        job_id = self._keep_result(result)
        return debate_answer(job_id, "completed", result.model_dump(include=ANSWER_FIELDS))

    async def queue_batch(self, questions: list[str], config: dict[str, Any]) -> dict[str, Any]:
        if not questions:
            raise ToolError("invalid batch: no questions")
        if len(questions) > MAX_LOCAL_BATCH_ITEMS:
            raise ToolError(f"invalid batch: {len(questions)} questions, at most {MAX_LOCAL_BATCH_ITEMS}")
        checked_config = _local_config(config)
        checked: list[str] = [_local_question(q, f"question {i}") for i, q in enumerate(questions)]
        running = sum(1 for b in self.batches.values() if b.task is not None and not b.task.done())
        if running >= MAX_LOCAL_BATCHES:
            raise ToolError(f"{running} batches are still running here; wait for one to finish")
        batch = LocalBatch(
            batch_id=f"local_batch_{uuid.uuid4().hex}",
            config=checked_config,
            questions=checked,
            items=[BatchItemResult(id=str(i), status="queued") for i in range(len(checked))],
        )
        self.batches[batch.batch_id] = batch
        batch.task = asyncio.create_task(self._run_batch(batch))
        self._forget_finished_batches()
        return {"batch_id": batch.batch_id, "status": "queued", "total": len(checked)}

    def _forget_finished_batches(self) -> None:
        for batch_id in list(self.batches):
            if len(self.batches) <= MAX_LOCAL_BATCHES:
                return
            task = self.batches[batch_id].task
            if task is None or task.done():
                del self.batches[batch_id]

    async def _run_batch(self, batch: LocalBatch) -> None:
        for item, question in zip(batch.items, batch.questions, strict=True):
            item.status = "debating"
            try:
                result = await self.debater.debate(question, batch.config)
            except Exception as exc:  # one item's failure (LLM down, bad output) ends that item only
                item.status, item.error = "failed", f"{type(exc).__name__}: {exc}"
                continue
            item.job_id = self._keep_result(result)
            item.status, item.answer = "completed", result.answer

    def _batch(self, batch_id: str) -> LocalBatch:
        batch = self.batches.get(batch_id)
        if batch is None:
            raise ToolError(f"no batch {batch_id!r} in this server's last {MAX_LOCAL_BATCHES}")
        return batch

    async def batch_view(self, batch_id: str) -> BatchView:
        return self._batch(batch_id).view()

    async def batch_items(self, batch_id: str, limit: int) -> list[BatchItemResult]:
        return [item.model_copy() for item in self._batch(batch_id).items[: max(0, limit)]]

    async def transcript(self, job_id: str) -> str:
        result = self.results.get(job_id)
        if result is None:
            raise ResourceError(f"no debate {job_id!r} in this server's last {self.keep}")
        return result.model_dump_json()


def _local_config(config: dict[str, Any]) -> DebateConfig:
    try:
        return DebateConfig.model_validate(config)
    except (ValueError, ValidationError) as exc:
        raise ToolError(f"invalid debate: {exc}") from exc


def _local_question(question: str, what: str = "question") -> Question:
    try:
        return validate_question(question)
    except ValueError as exc:
        raise ToolError(f"invalid debate: {what}: {exc}") from exc

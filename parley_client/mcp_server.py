"""``parley mcp``: Parley's debates as Model Context Protocol tools, over stdio or streamable HTTP.

Built on the official ``mcp`` SDK (``MCPServer``). It is a client of a gateway (``PARLEY_API_URL``,
``PARLEY_API_KEY``): every tool call goes through ``AsyncParleyClient``, so the key's quotas, budgets
and limits apply as on the REST API. Tools: ``debate`` (protocol and budget as arguments, a progress
notification per round), ``submit_batch``, ``batch_status`` and ``batch_results``; each debate's
transcript is the resource ``parley://debates/{job_id}``. ``LocalTools`` offers the same tools with
the debates run in the server's own process (``parley mcp --in-process``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field, ValidationError

from parley_client.aio import AsyncParleyClient
from parley_client.errors import ParleyError
from parley_client.models import BatchView, DebateEvent

if TYPE_CHECKING:
    from engine.config import DebateConfig
    from engine.result import DebateResult

INSTRUCTIONS = """Parley answers a question by a retrieval-augmented debate between several LLM agents.
Call `debate` for one question (it reports progress per round and returns the answer, how it was
reached, the tokens used and the URI of the whole transcript); use `submit_batch`, `batch_status`
and `batch_results` for many questions at once."""


class DebateAnswer(BaseModel):
    """What the ``debate`` tool returns."""

    job_id: str
    status: str = Field(description="completed, failed or cancelled")
    answer: str | None = None
    protocol: str | None = None
    rounds: int | None = None
    consensus: bool | None = None
    answer_source: str | None = None
    tokens: int = Field(default=0, description="prompt + completion tokens of the whole debate")
    error: str | None = None
    transcript: str = Field(description="resource URI of the transcript")


class BatchItemResult(BaseModel):
    id: str | None = None
    job_id: str | None = Field(default=None, description="its transcript: parley://debates/{job_id}")
    status: str
    answer: str | None = None
    error: str | None = None


def _config(
    protocol: str, budget_tokens: int | None, rounds: int | None, knowledge: str | None
) -> dict[str, Any]:
    config: dict[str, Any] = {"protocol": protocol}
    for key, value in (("budget_tokens", budget_tokens), ("rounds", rounds), ("knowledge", knowledge)):
        if value is not None:
            config[key] = value
    return config


def progress_message(event: DebateEvent) -> str | None:
    """A short line for the events a person follows: the pool, each round's answers, the end."""
    data = event.data
    if event.type == "pool.ready":
        return f"knowledge pool ready ({data.get('items', 0)} items)"
    if event.type == "round.completed":
        answers = ", ".join(str(a) for a in data.get("answers") or [])
        agreed = " (consensus)" if data.get("consensus") else ""
        return f"round {data.get('round')} done: {answers}{agreed}"
    return None


class ParleyTools:
    """The tools, bound to one gateway client created on first use (on the server's event loop)."""

    def __init__(self, url: str, api_key: str | None, timeout_s: float = 60.0) -> None:
        self.url = url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._client: AsyncParleyClient | None = None

    @property
    def client(self) -> AsyncParleyClient:
        if self._client is None:
            self._client = AsyncParleyClient(self.url, api_key=self.api_key, timeout_s=self.timeout_s)
        return self._client

    async def debate(
        self,
        question: str,
        ctx: Context,
        protocol: str = "madke",
        budget_tokens: int | None = None,
        rounds: int | None = None,
        knowledge: str | None = None,
    ) -> DebateAnswer:
        """Debate ``question`` and return the answer; progress is reported after each round."""
        config = _config(protocol, budget_tokens, rounds, knowledge)
        try:
            accepted = await self.client.submit(question, config)
            total = float(rounds or 0) or None
            async for event in self.client.events(accepted.job_id):
                message = progress_message(event)
                if message is None:
                    continue
                done = float(event.data.get("round", 0)) if event.type == "round.completed" else 0.0
                await ctx.report_progress(done, total, message)
            job = await self.client.get(accepted.job_id)
        except ParleyError as exc:
            raise ToolError(f"the Parley gateway refused: {exc}") from exc
        result = job.result or {}
        usage = result.get("usage") or {}
        return DebateAnswer(
            job_id=job.job_id,
            status=job.status,
            answer=result.get("answer"),
            protocol=result.get("protocol"),
            rounds=result.get("rounds"),
            consensus=result.get("consensus"),
            answer_source=result.get("answer_source"),
            tokens=int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)),
            error=job.error,
            transcript=f"parley://debates/{job.job_id}",
        )

    async def submit_batch(
        self, questions: list[str], protocol: str = "madke", budget_tokens: int | None = None
    ) -> dict[str, Any]:
        """Queue many questions as one batch; returns its id (follow it with ``batch_status``)."""
        items = [{"id": str(i), "question": q} for i, q in enumerate(questions)]
        try:
            accepted = await self.client.submit_batch(items, _config(protocol, budget_tokens, None, None))
        except ParleyError as exc:
            raise ToolError(f"the Parley gateway refused: {exc}") from exc
        return accepted.model_dump()

    async def batch_status(self, batch_id: str) -> dict[str, Any]:
        """How far a batch is: its item counts by status and the share finished."""
        try:
            return (await self.client.get_batch(batch_id)).model_dump()
        except ParleyError as exc:
            raise ToolError(str(exc)) from exc

    async def batch_results(self, batch_id: str, limit: int = 100) -> list[BatchItemResult]:
        """Each item's status and answer, in input order (at most ``limit``)."""
        out: list[BatchItemResult] = []
        try:
            async for line in self.client.iter_results(batch_id):
                out.append(
                    BatchItemResult(
                        id=line.id,
                        job_id=line.job_id,
                        status=line.status,
                        answer=line.answer,
                        error=line.error,
                    )
                )
                if len(out) >= limit:
                    break
        except ParleyError as exc:
            raise ToolError(str(exc)) from exc
        return out

    async def transcript(self, job_id: str) -> str:
        """The whole job as JSON: status, config and the result with every LLM call."""
        try:
            job = await self.client.get(job_id)
        except ParleyError as exc:
            raise ResourceError(str(exc)) from exc
        return json.dumps(job.model_dump(mode="json"), ensure_ascii=False)


class Debater(Protocol):
    """What runs a debate in this process (``inprocess.local_debate.LocalDebater``)."""

    async def debate(self, question: str, config: DebateConfig, on_event: Any = None) -> DebateResult: ...


# In-process batches run one item after another (one process, one model); these bound what a batch
# and the server keep.
MAX_LOCAL_BATCH_ITEMS = 1000
MAX_LOCAL_BATCHES = 20


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


class LocalTools:
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

    async def debate(
        self,
        question: str,
        ctx: Context,
        protocol: str = "madke",
        budget_tokens: int | None = None,
        rounds: int | None = None,
        knowledge: str | None = None,
    ) -> DebateAnswer:
        """Debate ``question`` and return the answer; progress is reported after each round."""
        config = _local_config(protocol, budget_tokens, rounds, knowledge)
        question = _local_question(question)
        total = float(config.rounds)

        async def on_event(event: str, data: dict[str, Any]) -> None:
            message = progress_message(DebateEvent(id="", type=event, data=data))
            if message is not None:
                done = float(data.get("round", 0)) if event == "round.completed" else 0.0
                await ctx.report_progress(done, total, message)

        result = await self.debater.debate(question, config, on_event)
        job_id = self._keep_result(result)
        return DebateAnswer(
            job_id=job_id,
            status="completed",
            answer=result.answer,
            protocol=result.protocol,
            rounds=result.rounds,
            consensus=result.consensus,
            answer_source=result.answer_source,
            tokens=result.usage.prompt_tokens + result.usage.completion_tokens,
            transcript=f"parley://debates/{job_id}",
        )

    async def submit_batch(
        self, questions: list[str], protocol: str = "madke", budget_tokens: int | None = None
    ) -> dict[str, Any]:
        """Queue many questions as one batch; returns its id (follow it with ``batch_status``)."""
        if not questions:
            raise ToolError("invalid batch: no questions")
        if len(questions) > MAX_LOCAL_BATCH_ITEMS:
            raise ToolError(f"invalid batch: {len(questions)} questions, at most {MAX_LOCAL_BATCH_ITEMS}")
        config = _local_config(protocol, budget_tokens, None, None)
        checked = [_local_question(q, f"question {i}") for i, q in enumerate(questions)]
        running = sum(1 for b in self.batches.values() if b.task is not None and not b.task.done())
        if running >= MAX_LOCAL_BATCHES:
            raise ToolError(f"{running} batches are still running here; wait for one to finish")
        batch = LocalBatch(
            batch_id=f"local_batch_{uuid.uuid4().hex}",
            config=config,
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

    async def batch_status(self, batch_id: str) -> dict[str, Any]:
        """How far a batch is: its item counts by status and the share finished."""
        return self._batch(batch_id).view().model_dump()

    async def batch_results(self, batch_id: str, limit: int = 100) -> list[BatchItemResult]:
        """Each item's status and answer, in input order (at most ``limit``)."""
        return [item.model_copy() for item in self._batch(batch_id).items[: max(0, limit)]]

    async def transcript(self, job_id: str) -> str:
        """The debate's result as JSON, with every LLM call."""
        result = self.results.get(job_id)
        if result is None:
            raise ResourceError(f"no debate {job_id!r} in this server's last {self.keep}")
        return result.model_dump_json()


def _local_config(
    protocol: str, budget_tokens: int | None, rounds: int | None, knowledge: str | None
) -> DebateConfig:
    from engine.config import DebateConfig

    try:
        return DebateConfig.model_validate(_config(protocol, budget_tokens, rounds, knowledge))
    except (ValueError, ValidationError) as exc:
        raise ToolError(f"invalid debate: {exc}") from exc


def _local_question(question: str, what: str = "question") -> str:
    from engine.config import validate_question

    try:
        return validate_question(question)
    except ValueError as exc:
        raise ToolError(f"invalid debate: {what}: {exc}") from exc


def build_server(tools: ParleyTools | LocalTools) -> MCPServer:
    """The MCP server with Parley's tools and the transcript resource."""
    server: MCPServer = MCPServer("parley", instructions=INSTRUCTIONS)
    server.tool(name="debate", description=(ParleyTools.debate.__doc__ or "").strip())(tools.debate)
    server.tool(name="submit_batch")(tools.submit_batch)
    server.tool(name="batch_status")(tools.batch_status)
    server.tool(name="batch_results")(tools.batch_results)
    server.resource(
        "parley://debates/{job_id}",
        name="transcript",
        description="a debate's job with its result and transcript (JSON)",
        mime_type="application/json",
    )(tools.transcript)
    return server

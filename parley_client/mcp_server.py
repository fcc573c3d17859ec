"""``parley mcp``: Parley's debates as Model Context Protocol tools, over stdio or streamable HTTP.

Built on the official ``mcp`` SDK (``MCPServer``). It is a client of a gateway (``PARLEY_API_URL``,
``PARLEY_API_KEY``): every tool call goes through ``AsyncParleyClient``, so the key's quotas, budgets
and limits apply as on the REST API. Tools: ``debate`` (protocol and budget as arguments, a progress
notification per round), ``submit_batch``, ``batch_status`` and ``batch_results``; each debate's
transcript is the resource ``parley://debates/{job_id}``. ``McpTools`` states the tools once;
``inprocess.mcp_tools.LocalTools`` runs the same tools with the debates in the server's own process
(``parley mcp --in-process``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

from parley_client.aio import AsyncParleyClient
from parley_client.errors import ParleyError
from parley_wire.models import BatchView, DebateEvent

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


def tool_config(
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


def debate_answer(job_id: str, status: str, result: dict[str, Any], error: str | None = None) -> DebateAnswer:
    """The ``debate`` tool's answer from a debate's result as JSON (a gateway job's ``result``, or
    an in-process ``DebateResult`` dumped)."""
    usage = result.get("usage") or {}
    return DebateAnswer(
        job_id=job_id,
        status=status,
        answer=result.get("answer"),
        protocol=result.get("protocol"),
        rounds=result.get("rounds"),
        consensus=result.get("consensus"),
        answer_source=result.get("answer_source"),
        tokens=int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)),
        error=error,
        transcript=f"parley://debates/{job_id}",
    )


async def report_progress(ctx: Context, event: DebateEvent, total: float | None) -> None:
    """Tell the MCP client about the events a person follows (``progress_message``); a finished
    round counts as that many steps of ``total``."""
    message = progress_message(event)
    if message is None:
        return
    done = float(event.data.get("round", 0)) if event.type == "round.completed" else 0.0
    await ctx.report_progress(done, total, message)


class McpTools(ABC):
    """Parley's MCP tools as clients see them, stated once: the names (``build_server``), the
    descriptions (these docstrings) and the parameters (these signatures). A subclass supplies only
    how they run: ``ParleyTools`` through a gateway, ``inprocess.mcp_tools.LocalTools`` in the
    server's own process."""

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
        return await self.run_debate(question, tool_config(protocol, budget_tokens, rounds, knowledge), ctx)

    async def submit_batch(
        self, questions: list[str], protocol: str = "madke", budget_tokens: int | None = None
    ) -> dict[str, Any]:
        """Queue many questions as one batch; returns its id (follow it with ``batch_status``)."""
        return await self.queue_batch(questions, tool_config(protocol, budget_tokens, None, None))

    async def batch_status(self, batch_id: str) -> dict[str, Any]:
        """How far a batch is: its item counts by status and the share finished."""
        return (await self.batch_view(batch_id)).model_dump()

    async def batch_results(self, batch_id: str, limit: int = 100) -> list[BatchItemResult]:
        """Each item's status and answer, in input order (at most ``limit``)."""
        return await self.batch_items(batch_id, limit)

    @abstractmethod
    async def run_debate(self, question: str, config: dict[str, Any], ctx: Context) -> DebateAnswer:
        """Run one debate with ``config`` (``tool_config``), reporting progress to ``ctx``."""

    @abstractmethod
    async def queue_batch(self, questions: list[str], config: dict[str, Any]) -> dict[str, Any]:
        """Queue the questions as one batch; its id, status and size."""

    @abstractmethod
    async def batch_view(self, batch_id: str) -> BatchView:
        """The batch's counts by status and share finished."""

    @abstractmethod
    async def batch_items(self, batch_id: str, limit: int) -> list[BatchItemResult]:
        """The batch's items in input order, ``limit`` of them."""

    @abstractmethod
    async def transcript(self, job_id: str) -> str:
        """The resource ``parley://debates/{job_id}``: the debate as JSON, with every LLM call."""


class ParleyTools(McpTools):
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

    async def run_debate(self, question: str, config: dict[str, Any], ctx: Context) -> DebateAnswer:
        try:
            accepted = await self.client.submit(question, config)
            total = float(config.get("rounds") or 0) or None
            async for event in self.client.events(accepted.job_id):
                await report_progress(ctx, event, total)
            job = await self.client.get(accepted.job_id)
        except ParleyError as exc:
            raise ToolError(f"the Parley gateway refused: {exc}") from exc
        return debate_answer(job.job_id, job.status, job.result or {}, job.error)

    async def queue_batch(self, questions: list[str], config: dict[str, Any]) -> dict[str, Any]:
        items = [{"id": str(i), "question": q} for i, q in enumerate(questions)]
        try:
            accepted = await self.client.submit_batch(items, config)
        except ParleyError as exc:
            raise ToolError(f"the Parley gateway refused: {exc}") from exc
        return accepted.model_dump()

    async def batch_view(self, batch_id: str) -> BatchView:
        try:
            return await self.client.get_batch(batch_id)
        except ParleyError as exc:
            raise ToolError(str(exc)) from exc

    async def batch_items(self, batch_id: str, limit: int) -> list[BatchItemResult]:
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
        try:
            job = await self.client.get(job_id)
        except ParleyError as exc:
            raise ResourceError(str(exc)) from exc
        return json.dumps(job.model_dump(mode="json"), ensure_ascii=False)


def build_server(tools: McpTools) -> MCPServer:
    """The MCP server with Parley's tools and the transcript resource."""
    server: MCPServer = MCPServer("parley", instructions=INSTRUCTIONS)
    server.tool(name="debate", description=(McpTools.debate.__doc__ or "").strip())(tools.debate)
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

"""``parley mcp``: Parley's debates as Model Context Protocol tools, over stdio or streamable HTTP.

Built on the official ``mcp`` SDK (``MCPServer``). It is a client of a gateway (``PARLEY_API_URL``,
``PARLEY_API_KEY``): every tool call goes through ``AsyncParleyClient``, so the key's quotas, budgets
and limits apply as on the REST API. Tools: ``debate`` (protocol and budget as arguments, a progress
notification per round), ``submit_batch``, ``batch_status`` and ``batch_results``; each debate's
transcript is the resource ``parley://debates/{job_id}``. ``inprocess.mcp_tools.LocalTools`` offers
the same tools with the debates run in the server's own process (``parley mcp --in-process``).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

from parley_client.aio import AsyncParleyClient
from parley_client.errors import ParleyError
from parley_wire.models import DebateEvent

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
        config = tool_config(protocol, budget_tokens, rounds, knowledge)
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
            accepted = await self.client.submit_batch(items, tool_config(protocol, budget_tokens, None, None))
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


class Tools(Protocol):
    """What ``build_server`` offers: ``ParleyTools`` (through a gateway) or the in-process runner's
    ``LocalTools`` (``inprocess.mcp_tools``)."""

    async def debate(
        self,
        question: str,
        ctx: Context,
        protocol: str = "madke",
        budget_tokens: int | None = None,
        rounds: int | None = None,
        knowledge: str | None = None,
    ) -> DebateAnswer: ...

    async def submit_batch(
        self, questions: list[str], protocol: str = "madke", budget_tokens: int | None = None
    ) -> dict[str, Any]: ...

    async def batch_status(self, batch_id: str) -> dict[str, Any]: ...

    async def batch_results(self, batch_id: str, limit: int = 100) -> list[BatchItemResult]: ...

    async def transcript(self, job_id: str) -> str: ...


def build_server(tools: Tools) -> MCPServer:
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

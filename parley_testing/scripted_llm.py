"""A scripted OpenAI-compatible chat-completions server on a real socket.

Tests and benchmarks program it with rules: the first rule whose ``when`` matches a request answers
it. ``when`` is a substring of the request's messages (system + user, joined) or a predicate on the
request body. Replies can be fixed text, a list consumed in order (the last one repeats), or a function
of the request. Every request is recorded, so tests can assert what the prompts carried.

It can also fail on purpose (``fail_next``), answer slowly (``latency_s``), serve at most
``capacity`` requests at a time (like a real single-slot llama.cpp server), and honour, reject (400)
or ignore ``response_format``. Each served request's times are kept (``timings``, and
``GET /v1/timings`` for a server in another process): when it arrived, when a slot took it, when it
was answered, and a label cut from its text by ``label_pattern``, so a benchmark can tell queueing
at a replica from idle time and which debate sent what.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

Reply = str | list[str] | Callable[[dict[str, Any]], str]
SchemaMode = Literal["honour", "reject", "ignore"]

# Phrases of MADKE's paper-style prompts, for rules that answer each step.
SELECT = "select knowledge from the knowledge pool"
JUDGE = "respond with [Yes]"
SUMMARY = "summarize the final answer"
ORDERLY = "There are a few other agents"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ClosedPort:
    """A port where nothing listens, held so that nothing can: bound but never listening, so every
    connection to it is refused, and no server started meanwhile (by the test, a worker's metrics
    endpoint, another process) can take it. ``release()`` frees it for a server the test starts
    there later. A port from ``free_port()`` promises neither."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def release(self) -> int:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        return self.port

    def __enter__(self) -> ClosedPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def request_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


@dataclass
class Rule:
    when: str | Callable[[dict[str, Any]], bool]
    reply: Reply
    json_reply: Reply | None = None  # used instead of ``reply`` when the request carries a schema
    calls: int = 0

    def matches(self, body: dict[str, Any]) -> bool:
        if callable(self.when):
            return bool(self.when(body))
        return self.when in request_text(body)

    def answer(self, body: dict[str, Any], structured: bool) -> str:
        source = self.json_reply if (structured and self.json_reply is not None) else self.reply
        self.calls += 1
        if callable(source):
            return source(body)
        if isinstance(source, list):
            return source[min(self.calls - 1, len(source) - 1)]
        return source


@dataclass(frozen=True)
class Timing:
    """One request this server answered with 200: wall-clock times (``time.time()``, comparable
    across processes on one host) and the label its text carried."""

    arrived: float  # the request was read
    started: float  # a slot took it (``capacity``): started - arrived is the wait inside the server
    ended: float  # answered
    label: str | None = None


@dataclass
class Failure:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = "scripted failure"


class ScriptedLLM:
    """Start with ``with ScriptedLLM() as llm:``; ``llm.base_url`` is the ``/v1`` URL to configure."""

    def __init__(
        self,
        *,
        default_reply: str = "I am not sure. [unknown]",
        latency_s: float = 0.0,
        capacity: int | None = None,
        schema_mode: SchemaMode = "honour",
        model: str = "scripted",
        port: int | None = None,
        host: str = "127.0.0.1",
        label_pattern: str | None = None,
        record: bool = True,
    ) -> None:
        self.rules: list[Rule] = []
        # Whether each request is kept (requests, authorizations, hosts, timings): what tests assert
        # on. A server that answers for hours (the soak) keeps none, or it grows with every call.
        self.record = record
        self.served = 0  # requests read, recorded or not
        self.default_reply = default_reply
        self.latency_s = latency_s
        self.capacity = capacity
        self.schema_mode: SchemaMode = schema_mode
        self.model = model
        self.port = port or free_port()
        self.host = host
        self.requests: list[dict[str, Any]] = []
        self._outage: tuple[float, Failure] | None = None
        # The Authorization header of each request, in the same order (None when absent).
        self.authorizations: list[str | None] = []
        # The Host header of each request, in the same order.
        self.hosts: list[str | None] = []
        self.failures: list[Failure] = []
        self.in_flight = 0
        self.max_in_flight = 0
        # Every 200 answer's times; the label is group 1 (or the whole match) of ``label_pattern``.
        self.timings: list[Timing] = []
        self._label = re.compile(label_pattern) if label_pattern else None
        # Tokens answered with 200, as this server counts them (words): what a provider would bill.
        self.tokens_served = 0
        # Told of every 200 answer: (request body, tokens, whether its client had already gone away,
        # as a client that cut its request has, seconds from its arrival to the answer). The soak
        # attributes served tokens to keys with it.
        self.on_served: Callable[[dict[str, Any], int, bool, float], None] | None = None
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sem: asyncio.Semaphore | None = None
        self.app = self._build_app()

    # -- programming -----------------------------------------------------------------------------
    def on(
        self, when: str | Callable[[dict[str, Any]], bool], reply: Reply, json_reply: Reply | None = None
    ) -> Rule:
        rule = Rule(when, reply, json_reply)
        self.rules.append(rule)
        return rule

    def fail_next(self, status: int, count: int = 1, headers: dict[str, str] | None = None) -> None:
        for _ in range(count):
            self.failures.append(Failure(status, headers or {}))

    def fail_for(self, seconds: float, status: int = 429, headers: dict[str, str] | None = None) -> None:
        """Answer every request with ``status`` for the next ``seconds`` (an outage, not a count)."""
        self._outage = (time.monotonic() + seconds, Failure(status, headers or {}))

    def reset(self) -> None:
        self.rules.clear()
        self.requests.clear()
        self.authorizations.clear()
        self.failures.clear()
        self.timings.clear()
        self.max_in_flight = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- server ----------------------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model, "object": "model"}]}

        @app.get("/v1/timings")
        async def timings(since: float = 0.0) -> dict[str, Any]:
            with self._lock:
                rows = [t.__dict__ for t in self.timings if t.arrived >= since]
            return {"capacity": self.capacity, "latency_s": self.latency_s, "timings": rows}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"error": {"message": "invalid JSON"}}, status_code=400)
            call, failure = self._admit(body, request)
            if failure is not None:
                return JSONResponse(
                    {"error": {"message": failure.body}}, status_code=failure.status, headers=failure.headers
                )
            structured = "response_format" in body
            if structured and self.schema_mode == "reject":
                return JSONResponse(
                    {"error": {"message": "response_format is not supported"}}, status_code=400
                )
            arrived = time.time()
            if self._sem is None:
                self._sem = asyncio.Semaphore(self.capacity or 1_000_000)
            async with self._sem:
                started = time.time()
                with self._lock:
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    if self.latency_s:
                        await asyncio.sleep(self.latency_s)
                    text = self._answer(body, structured and self.schema_mode == "honour")
                finally:
                    with self._lock:
                        self.in_flight -= 1
            prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            with self._lock:
                self.tokens_served += prompt_tokens + len(text.split())
                if self.record:
                    self.timings.append(Timing(arrived, started, time.time(), self._label_of(body)))
            if self.on_served is not None:
                gone = await request.is_disconnected()
                self.on_served(body, prompt_tokens + len(text.split()), gone, time.time() - arrived)
            return JSONResponse(
                {
                    "id": f"chatcmpl-{call}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", self.model),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": len(text.split()),
                        "total_tokens": prompt_tokens + len(text.split()),
                    },
                }
            )

        return app

    def _admit(self, body: dict[str, Any], request: Request) -> tuple[int, Failure | None]:
        """Count (and, when recording, keep) a request; the failure it is to get, if any."""
        with self._lock:
            self.served += 1
            if self.record:
                self.requests.append(body)
                self.authorizations.append(request.headers.get("authorization"))
                self.hosts.append(request.headers.get("host"))
            failure = self.failures.pop(0) if self.failures else None
            if failure is None and self._outage is not None and time.monotonic() < self._outage[0]:
                failure = self._outage[1]
            return self.served, failure

    def _label_of(self, body: dict[str, Any]) -> str | None:
        if self._label is None:
            return None
        found = self._label.search(request_text(body))
        if found is None:
            return None
        return found.group(1) if found.groups() else found.group(0)

    def _answer(self, body: dict[str, Any], structured: bool) -> str:
        with self._lock:
            for rule in self.rules:
                if rule.matches(body):
                    return rule.answer(body, structured)
        return self.default_reply

    def start(self) -> ScriptedLLM:
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            limit_concurrency=10_000,
            backlog=4096,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("scripted LLM server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def scripted_llm(**kwargs: Any) -> Iterator[ScriptedLLM]:
    server = ScriptedLLM(**kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    """Run a scripted server from the command line (benchmarks that need a separate process)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    # 0.0.0.0 in a container (the compose test's llm service); loopback otherwise.
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument("--reply", default="The answer is [Paris].")
    parser.add_argument("--label-pattern", default=None, help="regex: each request's label in /v1/timings")
    args = parser.parse_args()
    server = ScriptedLLM(
        default_reply=args.reply,
        latency_s=args.latency,
        capacity=args.capacity,
        port=args.port,
        host=args.host,
        label_pattern=args.label_pattern,
    )
    server.on("[Yes]", "They agree. [Yes]")  # judge prompts mention [Yes]
    server.start()
    print(json.dumps({"base_url": server.base_url}), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()

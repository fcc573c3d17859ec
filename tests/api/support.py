"""Real processes for gateway tests: redis-server, the API under uvicorn, Celery workers.

The process helpers live in ``parley_testing.processes`` (the benchmarks use them too); this module
adds the pytest fixtures' pieces and the scripted replies of MADKE's paper prompts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from parley_testing.processes import (
    ROOT,
    ApiServer,
    RedisServer,
    WorkerProcess,
    redis_binary,
    worker_env,
)
from parley_testing.scripted_llm import JUDGE, ORDERLY, SELECT, SUMMARY, ScriptedLLM, free_port
from services.jobstore import unpack_events, unpack_text

__all__ = [
    "JUDGE",
    "ORDERLY",
    "ROOT",
    "SELECT",
    "SUMMARY",
    "ApiServer",
    "RedisServer",
    "WorkerProcess",
    "free_port",
    "redis_binary",
    "running_redis",
    "script_agreeing",
    "script_echo",
    "stored_events",
    "stored_hash",
    "wait_status",
    "worker_env",
]


def running_redis(workdir: Path) -> Iterator[RedisServer]:
    """A private redis-server for a fixture, or a skip that says how to install it."""
    if redis_binary() is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    server = RedisServer(workdir).start()
    try:
        yield server
    finally:
        server.stop()


def script_agreeing(llm: ScriptedLLM, answer: str = "Paris") -> None:
    """Every debater says ``answer``, the judge agrees: one round, six calls per MADKE debate."""
    llm.on(SELECT, "The most helpful knowledge is [1].")
    llm.on(JUDGE, "The agents agree. [Yes]")
    llm.on(SUMMARY, f"All agents agree. The final answer is [{answer}].")
    llm.on("Question:", f"Based on the knowledge, the answer is [{answer}].")


def script_echo(llm: ScriptedLLM) -> None:
    """Answers echo the question's last word, so every item of a batch gets a distinct answer."""

    def echo(body: dict[str, Any]) -> str:
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        question = text.rsplit("Question:", 1)[-1].strip().splitlines()[0]
        return f"The answer is [{question.split()[-1].strip('?')}]."

    llm.on(SELECT, "[1]")
    llm.on(JUDGE, "[Yes]")
    llm.on("Question:", echo)


def wait_status(
    client: httpx.Client, job_id: str, statuses: set[str], timeout_s: float = 60, poll_s: float = 0.1
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = client.get(f"/v1/debates/{job_id}").json()
        if body.get("status") in statuses:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {body.get('status')} after {timeout_s}s: {body}")
        time.sleep(poll_s)


def stored_events(r: redis.Redis, job_id: str, prefix: str = "parley") -> list[tuple[str, dict[str, str]]]:
    """A job's events as XRANGE gives them: from the packed copy a finished job keeps in its record
    (its stream lapses soon after), else from its stream."""
    packed = r.hget(f"{prefix}:job:{job_id}", "events_z")
    if packed:
        return [(e.id, {"type": e.type, "data": json.dumps(e.data)}) for e in unpack_events(str(packed))]
    return [(str(i), dict(f)) for i, f in r.xrange(f"{prefix}:job:{job_id}:events")]


def stored_hash(r: redis.Redis, key: str) -> dict[str, str]:
    """A hash with its packed fields (``*_z``: a finished job's result and events) unpacked, so what
    the store keeps can be searched as text."""
    return {
        str(k): unpack_text(str(v)) if str(k).endswith("_z") else str(v) for k, v in r.hgetall(key).items()
    }

"""The live stack for the client tests: redis-server, a Celery worker, the gateway, the scripted LLM
(every debater answers Paris and the judge agrees, unless a module scripts its own ``llm``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import api_settings
from tests.api.support import (
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_agreeing,
    worker_env,
)
from tests.support.scripted_llm import ClosedPort, ScriptedLLM


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(latency_s=0.01) as server:
        script_agreeing(server)
        yield server


@pytest.fixture(scope="module")
def worker(
    redis_server: RedisServer, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    # No retriever listens: the tests debate without knowledge.
    with ClosedPort() as dead_retriever:
        env = worker_env(redis_server.url, llm.base_url, dead_retriever.url)
        log = tmp_path_factory.mktemp("worker") / "worker.log"
        with WorkerProcess(env, log, concurrency=2) as proc:
            yield proc


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer, worker: WorkerProcess) -> Iterator[ApiServer]:
    with ApiServer(api_settings(redis_server.url, sse_block_ms=200)) as server:
        yield server

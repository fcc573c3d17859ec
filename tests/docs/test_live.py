"""The ``<!-- snippet: live -->`` blocks of README.md and docs/*.md, run under bash against a live stack.

The stack is what ``parley up`` starts, with test doubles only where a real part would be slow:
a real redis-server, the real gateway under uvicorn (no keys, on loopback, as ``parley up`` serves by
default), a real Celery worker process, the scripted LLM (every debater says Paris, the judge agrees)
and a scripted retriever that speaks the retriever's HTTP protocol. Each block runs as written, with
``127.0.0.1:8000`` (the default gateway address) and the metrics ports 9100 and 9101 rewritten to
the test stack's, from a scratch folder
where ``.venv`` points at the repository's; ``curl -f`` makes any HTTP error fail the block.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from api.settings import ApiSettings
from tests.api.support import (
    ApiServer,
    RedisServer,
    WorkerProcess,
    running_redis,
    script_agreeing,
    worker_env,
)
from tests.api.test_ui_browser import scripted_retriever_app
from tests.docs.pages import ROOT, Block, snippets
from tests.retriever.support import AppServer
from tests.support.scripted_llm import ScriptedLLM, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIVE = [b for b in snippets() if b.marker == "live"]
DEFAULT_GATEWAY = re.compile(r"(?:127\.0\.0\.1|localhost):8000\b")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path_factory.mktemp("redis"))


@dataclass(frozen=True)
class Stack:
    gateway: ApiServer
    api_metrics_port: int
    worker_metrics_port: int

    def rewrite(self, code: str) -> str:
        """The pages' default addresses → this stack's."""
        code = DEFAULT_GATEWAY.sub(self.gateway.url.removeprefix("http://"), code)
        code = re.sub(r"(?:127\.0\.0\.1|localhost):9100\b", f"127.0.0.1:{self.api_metrics_port}", code)
        return re.sub(r"(?:127\.0\.0\.1|localhost):9101\b", f"127.0.0.1:{self.worker_metrics_port}", code)


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with (
        ScriptedLLM(latency_s=0.01) as llm,
        AppServer(scripted_retriever_app()) as retriever,
    ):
        script_agreeing(llm)
        env = worker_env(redis_server.url, llm.base_url, retriever.url)
        log = tmp_path_factory.mktemp("worker") / "worker.log"
        with WorkerProcess(env, log, concurrency=2):
            metrics_port = free_port()
            settings = ApiSettings(redis_url=redis_server.url, metrics_port=metrics_port, sse_block_ms=200)
            with ApiServer(settings) as server:
                yield Stack(server, metrics_port, int(env["PARLEY_WORKER_METRICS_PORT"]))


def test_the_pages_have_live_snippets() -> None:
    assert len(LIVE) >= 6
    assert {b.page.name for b in LIVE} >= {"README.md", "gateway-and-operations.md"}


@pytest.mark.parametrize("block", LIVE, ids=lambda b: b.where)
def test_live_snippet_runs(block: Block, stack: Stack, tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update({"PARLEY_API_URL": stack.gateway.url, "HF_HUB_OFFLINE": "1"})
    # `parley` as the pages write it: the virtualenv's command on the PATH.
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    code = stack.rewrite(block.code)
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, f"{block.where}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    if "/events" in block.code:
        assert "event: job.completed" in out.stdout, out.stdout[-2000:]
    if "/v1/debates" in block.code and "-X POST" in block.code:
        assert '"job_id"' in out.stdout or "JOB=" in block.code, out.stdout
    if "parley submit" in block.code:
        assert "wrote 1 results" in out.stdout or "wrote 2 results" in out.stdout, out.stdout

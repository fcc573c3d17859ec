"""``parley mcp`` driven by the MCP SDK's own client, over stdio and over streamable HTTP.

The server runs as its own process (``python -m parley_cli mcp``), as an MCP client would start it,
in front of the live gateway: real redis-server, the gateway under uvicorn, a real Celery worker
and the scripted LLM. A debate reports progress per round and returns its answer, its transcript
is a resource, batches are submitted, followed and read, and a refused budget is a tool error.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.api.conftest import KEY_A
from tests.api.support import ROOT, ApiServer
from tests.support.scripted_llm import ScriptedLLM, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def server_env(gateway: ApiServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(
        {
            "PARLEY_API_URL": gateway.url,
            "PARLEY_API_KEY": KEY_A,
            "PYTHONPATH": str(ROOT),
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


@asynccontextmanager
async def stdio_client(gateway: ApiServer) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "parley_cli", "mcp"], env=server_env(gateway), cwd=str(ROOT)
    )
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


@pytest.fixture(scope="module")
def http_server(gateway: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("mcp") / "mcp.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "parley_cli", "mcp", "--transport", "http", "--port", str(port)],
            env=server_env(gateway),
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, proc, log)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            proc.wait(timeout=15)


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"parley mcp did not start: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


async def exercise(client: Client) -> None:
    """What both transports must do, asserted the same way."""
    assert {t.name for t in (await client.list_tools()).tools} >= {
        "debate",
        "submit_batch",
        "batch_status",
        "batch_results",
    }
    notes: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))

    result = await client.call_tool(
        "debate",
        {"question": "What is the capital of France?", "protocol": "madke", "knowledge": "none", "rounds": 2},
        progress_callback=on_progress,
    )
    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer["status"] == "completed" and answer["answer"] == "Paris"
    assert answer["protocol"] == "madke" and answer["rounds"] == 1 and answer["consensus"] is True
    assert answer["tokens"] > 0
    # One notification per round (the judge agreed in round 1), with the agents' answers.
    assert (1.0, 2.0, "round 1 done: Paris, Paris (consensus)") in notes

    transcript = await client.read_resource(answer["transcript"])
    job = json.loads(transcript.contents[0].text)  # type: ignore[union-attr]
    assert job["job_id"] == answer["job_id"] and job["status"] == "completed"
    assert {rec["role"] for rec in job["result"]["transcript"]} >= {"debater", "judge"}

    batch = (
        await client.call_tool(
            "submit_batch", {"questions": ["Capital of France?", "And of Italy?"], "protocol": "single"}
        )
    ).structured_content
    assert batch["total"] == 2
    deadline = time.monotonic() + 60
    while True:
        status = (await client.call_tool("batch_status", {"batch_id": batch["batch_id"]})).structured_content
        if status["status"] == "completed":
            break
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.2)
    rows = (await client.call_tool("batch_results", {"batch_id": batch["batch_id"]})).structured_content
    items = rows["result"] if isinstance(rows, dict) else rows
    assert [(r["id"], r["status"], r["answer"]) for r in items] == [
        ("0", "completed", "Paris"),
        ("1", "completed", "Paris"),
    ]

    refused = await client.call_tool(
        "debate", {"question": "q?", "protocol": "single", "budget_tokens": 10**7}
    )
    assert refused.is_error and "above this deployment's limit" in refused.content[0].text  # type: ignore[union-attr]


async def test_mcp_over_stdio(gateway: ApiServer) -> None:
    async with stdio_client(gateway) as client:
        await exercise(client)


async def test_mcp_over_streamable_http(http_server: str) -> None:
    async with Client(http_server, read_timeout_seconds=60) as client:
        await exercise(client)


def test_http_refuses_a_public_address() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "parley_cli", "mcp", "--transport", "http", "--host", "0.0.0.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "refusing to serve on 0.0.0.0" in out.stderr


async def test_mcp_in_process_debates_without_a_gateway(llm: ScriptedLLM) -> None:
    """``parley mcp --in-process``: the debate runs in the server's own process on the configured LLM
    (here the scripted one; unset, the embedded model), with the same progress and transcript."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(
        {
            "PARLEY_LLM_BASE_URL": llm.base_url,
            "PARLEY_LLM_MODEL": "scripted",
            "PARLEY_LLM_STRUCTURED_OUTPUT": "off",
            "PYTHONPATH": str(ROOT),
            "HF_HUB_OFFLINE": "1",
        }
    )
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "parley_cli", "mcp", "--in-process"], env=env, cwd=str(ROOT)
    )
    notes: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message)

    async with Client(params, read_timeout_seconds=60) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {
            "debate",
            "submit_batch",
            "batch_status",
            "batch_results",
        }
        result = await client.call_tool(
            "debate",
            {
                "question": "What is the capital of France?",
                "protocol": "madke",
                "knowledge": "none",
                "rounds": 2,
            },
            progress_callback=on_progress,
        )
        assert not result.is_error, result.content
        answer = result.structured_content
        assert answer["answer"] == "Paris" and answer["job_id"].startswith("local_") and answer["tokens"] > 0
        assert "round 1 done: Paris, Paris (consensus)" in notes
        transcript = json.loads((await client.read_resource(answer["transcript"])).contents[0].text)  # type: ignore[union-attr]
        assert transcript["answer"] == "Paris" and {r["role"] for r in transcript["transcript"]} >= {
            "debater"
        }
        bad = await client.call_tool("debate", {"question": "q?", "protocol": "no-such-protocol"})
        assert bad.is_error and "invalid debate" in bad.content[0].text  # type: ignore[union-attr]

        # A batch runs in the background, one item after another; the scripted server refuses the
        # first item's one call, which fails that item only.
        llm.fail_next(400)
        questions = ["Capital of France?", "Capital of France, again?", "And once more?"]
        before = len(llm.requests)
        batch = (
            await client.call_tool("submit_batch", {"questions": questions, "protocol": "single"})
        ).structured_content
        assert batch is not None and batch["total"] == 3 and batch["status"] == "queued"
        deadline = time.monotonic() + 60
        while True:
            status = (
                await client.call_tool("batch_status", {"batch_id": batch["batch_id"]})
            ).structured_content
            assert status is not None
            if status["status"] == "completed":
                break
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.2)
        assert status["counts"] == {"completed": 2, "failed": 1} and status["progress"] == 1.0
        assert status["config"]["protocol"] == "single"
        rows = (await client.call_tool("batch_results", {"batch_id": batch["batch_id"]})).structured_content
        assert rows is not None
        items = rows["result"]
        assert [(r["id"], r["status"], r["answer"]) for r in items] == [
            ("0", "failed", None),
            ("1", "completed", "Paris"),
            ("2", "completed", "Paris"),
        ]
        assert "LLMBadRequest" in items[0]["error"] and items[0]["job_id"] is None
        assert len(llm.requests) - before == 3  # one call per item, none repeated
        content = (await client.read_resource(f"parley://debates/{items[2]['job_id']}")).contents[0]
        item = json.loads(content.text)  # type: ignore[union-attr]
        assert item["answer"] == "Paris" and item["protocol"] == "single"
        # Bad input is refused before anything runs.
        empty = await client.call_tool("submit_batch", {"questions": []})
        assert empty.is_error and "no questions" in empty.content[0].text  # type: ignore[union-attr]
        blank = await client.call_tool("submit_batch", {"questions": ["ok?", "  "]})
        assert blank.is_error and "question 1" in blank.content[0].text  # type: ignore[union-attr]
        unknown = await client.call_tool("batch_status", {"batch_id": "local_batch_nope"})
        assert unknown.is_error and "no batch" in unknown.content[0].text  # type: ignore[union-attr]
        assert len(llm.requests) - before == 3

"""Every snippet of docs/clients.md, run against the live stack (gateway, worker, scripted LLM).

The code blocks are taken from the page itself, so the page cannot drift from what works: Python
blocks run as scripts, bash blocks under bash, the LiteLLM config is checked model by model and its
requests made the way LiteLLM's ``openai/`` provider makes them, and the MCP client configuration
is started as written and asked a question.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import openai
import pytest
import yaml
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.api.conftest import KEY_A
from tests.api.support import ROOT, ApiServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = ROOT / "docs" / "clients.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(PAGE.read_text(encoding="utf-8")) if lang == language]


def snippet_env(gateway: ApiServer) -> dict[str, str]:
    """The environment the page tells readers to set, and ``parley`` on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(
        {
            "PARLEY_API_URL": gateway.url,
            "PARLEY_API_KEY": KEY_A,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


def test_the_page_has_the_snippets_this_test_runs() -> None:
    assert len(blocks("python")) == 4
    assert len(blocks("bash")) == 1 and len(blocks("yaml")) == 1 and len(blocks("json")) == 1


@pytest.mark.parametrize("index", range(4))
def test_python_snippets_run(gateway: ApiServer, index: int, tmp_path: Path) -> None:
    code = blocks("python")[index]
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=snippet_env(gateway),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Paris" in out.stdout, out.stdout


def test_bash_snippet_streams_chunks_then_done(gateway: ApiServer) -> None:
    out = subprocess.run(
        ["bash", "-c", blocks("bash")[0]],
        env=snippet_env(gateway),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = [line.removeprefix("data: ") for line in out.stdout.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Paris"


def test_litellm_config_names_models_the_gateway_serves(gateway: ApiServer) -> None:
    config = yaml.safe_load(blocks("yaml")[0])
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY_A, max_retries=0)
    served = {m.id for m in client.models.list()}
    for entry in config["model_list"]:
        params = entry["litellm_params"]
        provider, _, model = params["model"].partition("/")
        assert provider == "openai" and model in served
        assert params["api_base"] == "http://127.0.0.1:8000/v1"  # the page's example address
        assert params["api_key"] == "os.environ/PARLEY_API_KEY"
    # What LiteLLM sends for the first entry: an OpenAI chat request to api_base with the model.
    model = config["model_list"][0]["litellm_params"]["model"].removeprefix("openai/")
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        extra_body={"parley": {"knowledge": "none"}},
    )
    assert reply.choices[0].message.content == "Paris"


async def test_mcp_client_configuration_starts_a_working_server(gateway: ApiServer) -> None:
    entry = json.loads(blocks("json")[0])["mcpServers"]["parley"]
    env = snippet_env(gateway)
    command = shutil.which(entry["command"], path=env["PATH"])
    assert command is not None, "the `parley` command is not installed"
    server_env = {**entry["env"], "PARLEY_API_URL": gateway.url, "PARLEY_API_KEY": KEY_A}
    params = StdioServerParameters(command=command, args=entry["args"], env={**env, **server_env})
    async with Client(params, read_timeout_seconds=60) as client:
        result = await client.call_tool(
            "debate", {"question": "What is the capital of France?", "protocol": "cot"}
        )
    assert not result.is_error and result.structured_content["answer"] == "Paris"

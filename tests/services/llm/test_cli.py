"""``parley llm serve``: the embedded server on its own, in the foreground, where settings or flags say.

The deployment's ``llm`` service runs exactly this command, so the test runs it as a process: it
becomes the server (no supervisor in between), answers the OpenAI API under the model's name, and
stops cleanly on SIGTERM, as a container's stop sends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from parley_testing.scripted_llm import free_port
from services.llm.cli import llm_app

PARLEY = Path(sys.executable).with_name("parley")


@pytest.mark.slow  # assembles the 0.5B weights when they are not yet in the cache
def test_settings_and_flags_pick_where_it_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_LLM_EMBEDDED_MODEL", "qwen2.5-coder-0.5b")
    monkeypatch.setenv("PARLEY_LLM_EMBEDDED_SERVER", "xllamacpp")
    monkeypatch.setenv("PARLEY_LLM_SERVE_HOST", "0.0.0.0")
    monkeypatch.setenv("PARLEY_LLM_SERVE_PORT", "9123")
    runner = CliRunner()
    from_env = runner.invoke(llm_app, ["serve", "--dry-run"])
    assert from_env.exit_code == 0, from_env.output
    assert "with xllamacpp (4 slots of 4096 tokens) at http://0.0.0.0:9123/v1" in from_env.output
    assert "-m services.llm.xllama_serve --model " in from_env.output
    assert "qwen2.5-coder-0.5b.gguf --alias qwen2.5-coder-0.5b --host 0.0.0.0 --port 9123 " in from_env.output
    flags = runner.invoke(llm_app, ["serve", "--dry-run", "--host", "127.0.0.1", "--port", "9124"])
    assert flags.exit_code == 0, flags.output
    assert "--host 127.0.0.1 --port 9124 " in flags.output


@pytest.mark.integration
@pytest.mark.llm
@pytest.mark.slow
def test_serve_runs_the_real_model_in_the_foreground_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PARLEY_LLM_EMBEDDED_MODEL": "qwen2.5-coder-0.5b",
        "PARLEY_LLM_EMBEDDED_SERVER": "xllamacpp",
        "PARLEY_LLM_EMBEDDED_SLOTS": "2",
        "PARLEY_LLM_EMBEDDED_CTX": "1024",
    }
    err = (tmp_path / "serve.err").open("w+")
    proc = subprocess.Popen(
        [str(PARLEY), "llm", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        models = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                answer = httpx.get(f"{base}/models", timeout=2)
                if answer.status_code == 200:  # 503 while the model loads
                    models = answer.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert models is not None, (tmp_path / "serve.err").read_text()[-2000:]
        assert models["data"][0]["id"] == "qwen2.5-coder-0.5b"
        reply = httpx.post(
            f"{base}/chat/completions",
            json={
                "model": "qwen2.5-coder-0.5b",
                "messages": [{"role": "user", "content": "Reply with a JSON object."}],
                "max_tokens": 24,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "a",
                        "schema": {
                            "type": "object",
                            "properties": {"answer": {"type": "string"}},
                            "required": ["answer"],
                        },
                    },
                },
            },
            timeout=120,
        ).json()
        assert (
            reply["usage"]["completion_tokens"] > 0
            and "cached_tokens" in reply["usage"]["prompt_tokens_details"]
        )
        assert httpx.get(f"http://127.0.0.1:{port}/slots", timeout=5).json()[1]["n_ctx"] == 1024
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        err.close()
    # The command became the server: it says where it listens, and SIGTERM stops it cleanly.
    assert code == 0
    assert f"at http://127.0.0.1:{port}/v1" in (tmp_path / "serve.err").read_text()
    assert proc.stdout is not None and f"listening on http://127.0.0.1:{port}/v1" in proc.stdout.read()

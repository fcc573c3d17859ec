"""``parley up``: one command runs Redis, the retriever, the gateway and a worker against an LLM, and
Ctrl-C leaves no process behind.

The integration test runs the real command as a child process, with the scripted LLM behind
``PARLEY_LLM_BASE_URL`` (so no model is started) and an empty retriever data folder (the debate asks
for no knowledge), then answers a ``POST /v1/debates`` end to end and sends SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from parley_cli.up import UpError, UpSettings, plan
from services.llm.settings import batch_defaults
from tests.api.support import script_agreeing
from tests.support.scripted_llm import ScriptedLLM, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.unit
def test_a_public_bind_without_keys_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("PARLEY_API_KEYS", "PARLEY_API_ANONYMOUS"):
        monkeypatch.delenv(name, raising=False)
    settings = UpSettings(host="0.0.0.0", state_dir=tmp_path)
    with pytest.raises(UpError, match=r"refusing to serve on 0\.0\.0\.0 without API keys"):
        plan(settings, {})


@pytest.mark.unit
def test_the_plan_gives_gateway_and_worker_one_redis_and_the_worker_the_urls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PARLEY_API_KEYS", raising=False)
    monkeypatch.setenv("PARLEY_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    ports = {"port": free_port(), "retriever_port": free_port(), "redis_port": free_port()}
    settings = UpSettings(
        state_dir=tmp_path,
        keys="generate",
        port=ports["port"],
        retriever_port=ports["retriever_port"],
        redis_port=ports["redis_port"],
    )
    p = plan(settings, {}, redis_binary="/usr/bin/redis-server")
    by_name = {c.name: c for c in p.components}
    assert list(by_name) == ["redis", "retriever", "gateway", "worker"]
    redis_url = f"redis://127.0.0.1:{ports['redis_port']}/0"
    assert by_name["gateway"].env["PARLEY_API_REDIS_URL"] == redis_url
    assert by_name["worker"].env["PARLEY_WORKER_REDIS_URL"] == redis_url
    assert by_name["worker"].env["PARLEY_RETRIEVER_URL"] == f"http://127.0.0.1:{ports['retriever_port']}"
    assert by_name["worker"].env["PARLEY_LLM_BASE_URL"] == "http://127.0.0.1:9/v1"
    # A generated key is shown once; the gateway gets only its hash.
    assert p.key and p.key not in by_name["gateway"].env["PARLEY_API_KEYS"]
    assert all(c.log.parent == tmp_path.resolve() / "logs" for c in p.components)


def test_the_embedded_model_gets_the_batch_defaults_for_this_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PARLEY_API_KEYS", raising=False)
    monkeypatch.delenv("PARLEY_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("PARLEY_LLM_EMBEDDED_SLOTS", raising=False)
    settings = UpSettings(
        state_dir=tmp_path,
        keys="generate",
        port=free_port(),
        retriever_port=free_port(),
        redis_port=free_port(),
        llm_port=free_port(),
    )
    batch = batch_defaults()
    p = plan(settings, {}, redis_binary="/usr/bin/redis-server")
    by_name = {c.name: c for c in p.components}
    assert by_name["llm"].env["PARLEY_LLM_EMBEDDED_SLOTS"] == str(batch.slots)
    worker = by_name["worker"].env
    assert worker["PARLEY_WORKER_WORKER_CONCURRENCY"] == str(batch.worker_concurrency)
    assert worker["PARLEY_LLM_MAX_CONCURRENCY"] == str(batch.max_concurrency)
    assert batch.worker_concurrency * batch.max_concurrency == batch.slots
    # What the environment sets wins.
    p = plan(settings, {"PARLEY_WORKER_WORKER_CONCURRENCY": "1"}, redis_binary="/usr/bin/redis-server")
    assert {c.name: c for c in p.components}["worker"].env["PARLEY_WORKER_WORKER_CONCURRENCY"] == "1"


def _group_members(pgids: set[int]) -> list[int]:
    """Processes still alive in any of these process groups."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            alive.append(int(entry.name))
    return alive


def _children(pid: int) -> set[int]:
    kids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.add(int(entry.name))
    return kids


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(latency_s=0.01) as server:
        script_agreeing(server)
        yield server


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/bin/redis-server").exists(), reason="needs redis-server")
def test_parley_up_answers_a_debate_and_ctrl_c_stops_everything(llm: ScriptedLLM, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(
        {
            "PARLEY_LLM_BASE_URL": llm.base_url,
            "PARLEY_LLM_MODEL": "scripted",
            "PARLEY_LLM_STRUCTURED_OUTPUT": "off",
            "PARLEY_RETRIEVER_DATA_DIR": str(tmp_path / "index"),
            "PARLEY_API_METRICS_PORT": "0",
            "PARLEY_WORKER_METRICS_PORT": "0",
            "PARLEY_WORKER_WORKER_CONCURRENCY": "1",
            "PYTHONPATH": str(ROOT),
        }
    )
    args = [sys.executable, "-m", "parley_cli", "up", "--port", str(port), "--keys", "generate"]
    args += ["--retriever-port", str(free_port()), "--redis-port", str(free_port())]
    args += ["--state-dir", str(tmp_path / "up")]
    out = tmp_path / "up.out"
    with out.open("wb") as fh:
        proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 150
        while "Parley is up" not in out.read_text():
            assert proc.poll() is None, out.read_text()
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.2)
        text = out.read_text()
        key = text.split("API key (shown once, not stored): ", 1)[1].split()[0]
        children = _children(proc.pid)
        assert len(children) == 4, text  # redis, retriever, gateway, worker (the LLM is scripted)
        headers = {"Authorization": f"Bearer {key}"}
        base = f"http://127.0.0.1:{port}"
        assert httpx.post(f"{base}/v1/debates", json={"question": "x"}, timeout=10).status_code == 401
        body = {"question": "What is the capital of France?", "config": {"knowledge": "none"}}
        r = httpx.post(f"{base}/v1/debates", json=body, headers=headers, timeout=10)
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]
        deadline = time.monotonic() + 90
        while True:
            job = httpx.get(f"{base}/v1/debates/{job_id}", headers=headers, timeout=10).json()
            if job["status"] in ("completed", "failed"):
                break
            assert time.monotonic() < deadline, job
            time.sleep(0.3)
        assert job["status"] == "completed", job
        assert job["result"]["answer"] == "Paris"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 0, out.read_text()
    assert "stopped" in out.read_text()
    assert _group_members(children) == []


@pytest.mark.integration
def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    from parley_cli.processes import Component, Stack

    stubborn = Component(
        "stubborn",
        ["bash", "-c", "trap '' TERM; echo up; sleep 60 & wait"],
        "(none)",
        tmp_path / "stubborn.log",
        lambda: (tmp_path / "stubborn.log").exists() and b"up" in (tmp_path / "stubborn.log").read_bytes(),
    )
    lines: list[str] = []
    stack = Stack([stubborn], echo=lines.append, grace_s=1.0, ready_timeout_s=20)
    stack.start()
    proc = stack.procs["stubborn"]
    started = time.monotonic()
    stack.stop()
    assert proc.poll() is not None and time.monotonic() - started < 10
    assert _group_members({proc.pid}) == []  # its `sleep` child went with it
    assert any("stubborn" in line and "ready" in line for line in lines)

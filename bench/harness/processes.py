"""Starting, waiting for and stopping the processes a study measures, each on a free loopback port.

Every process runs in its own session (``start_new_session``), so a signal to its group reaches the
children it forks (Celery's pool, uvicorn's workers) and a stopped study leaves nothing behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from parley_testing.processes import ROOT
from parley_testing.scripted_llm import free_port


def service_env() -> dict[str, str]:
    """This process's environment without any ``PARLEY_*`` setting, offline, with the repository on
    the path: the processes under test run on their defaults plus what a study sets on purpose."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})
    return env


def start_process(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``args`` in the repository root, its output appended to ``log``, in a session of its own."""
    fh = log.open("ab")
    return subprocess.Popen(
        args, env=env, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_http(
    url: str,
    timeout_s: float = 60,
    *,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    interval_s: float = 0.1,
) -> None:
    """Until ``url`` answers below 500 (a server still loading a model answers 503). With ``proc``, a
    process that exits first fails at once, with the end of its ``log``, instead of at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{url}: the process exited ({proc.returncode}) before answering: {tail}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up")
        time.sleep(interval_s)


@dataclass
class Service:
    """A process serving HTTP on a loopback port."""

    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_gateway(
    env: dict[str, str], redis_url: str, log: Path, *, extra_env: dict[str, str] | None = None,
    workers: int | None = None,
) -> Service:  # fmt: skip
    """The gateway (``api.cli api``) on a free port, with no rate limit in the way of the load, once it
    answers ``/healthz``."""
    port = free_port()
    api_env = {
        **env,
        **(extra_env or {}),
        "PARLEY_API_REDIS_URL": redis_url,
        "PARLEY_API_RATE_LIMIT_PER_MINUTE": "1000000",
    }
    args = [sys.executable, "-m", "api.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
    if workers is not None:
        args += ["--workers", str(workers)]
    service = Service(start_process(args, api_env, log), port)
    wait_http(f"{service.url}/healthz", proc=service.proc, log=log)
    return service


def start_scripted_llm(
    env: dict[str, str], log: Path, *, latency_s: float, capacity: int, label_pattern: str | None = None
) -> Service:
    """The scripted OpenAI-compatible server (``parley_testing.scripted_llm``) in its own process, of a
    fixed latency and serving at most ``capacity`` requests at a time, like a llama.cpp server with
    that many slots; ``label_pattern`` names each request's debate in its ``/timings``."""
    port = free_port()
    args = [sys.executable, "-m", "parley_testing.scripted_llm", "--port", str(port)]
    args += ["--latency", str(latency_s), "--capacity", str(capacity)]
    if label_pattern is not None:
        args += ["--label-pattern", label_pattern]
    service = Service(start_process(args, env, log), port)
    wait_http(f"{service.url}/v1/models", proc=service.proc, log=log)
    return service


def exit_on_sigterm() -> None:
    """Make SIGTERM (a supervisor, ``kill``) unwind like Ctrl-C, through the study's ``finally``
    blocks, so the processes it started are stopped rather than left behind."""

    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)

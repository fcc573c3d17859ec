"""``parley up``: the whole service on one machine without Docker, in one terminal.

It starts (or reuses) a Redis, the embedded LLM server (unless ``PARLEY_LLM_BASE_URL`` names one),
the retriever, the gateway and one worker, each as a child process with its own log file, and gives
them one consistent configuration: the same Redis URL to the gateway and the worker, the retriever's
and the LLM's URLs to the worker. It prints where each listens and logs, polls each readiness check,
and on Ctrl-C (SIGINT) or SIGTERM terminates every child's process group, then kills what is left
after a grace period, so nothing is orphaned.

The parts are injected (``Stack`` takes its components and a launcher), so the refusal rules and the
plan can be tested without starting anything; ``tests/parley_cli/test_up.py`` also runs it for real.
This module holds the command and its settings; ``up_plan`` what it starts, ``processes`` the child
processes and ``probes`` the readiness checks.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Literal

import typer
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from parley_cli.probes import index_ready
from parley_cli.processes import Stack, UpError, tail
from parley_cli.up_plan import plan
from services.settings import ParleySettings, default_data_dir

KeysMode = Literal["env", "generate"]


class UpSettings(ParleySettings):
    """Where ``parley up`` binds its parts and keeps their logs (``PARLEY_UP_*``)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_UP_", frozen=True, extra="ignore")

    host: str = Field(default="127.0.0.1", description="the gateway's bind address")
    port: int = Field(default=8000, ge=1, le=65535, description="the gateway's port")
    retriever_port: int = Field(default=8001, ge=1, le=65535)
    llm_port: int = Field(default=8080, ge=1, le=65535, description="the embedded LLM server's port")
    redis_url: str | None = Field(
        default=None, description="reuse this Redis; unset = start a redis-server of its own"
    )
    redis_port: int = Field(default=6380, ge=1, le=65535, description="port of its own redis-server")
    state_dir: Path = Field(
        default_factory=lambda: default_data_dir() / "up", description="logs and the Redis data"
    )
    keys: KeysMode = Field(
        default="env",
        description="env: the gateway's PARLEY_API_KEYS (none = open, loopback only); generate: a new "
        "key, printed once, its hash given to the gateway",
    )
    ready_timeout_s: float = Field(default=600.0, gt=0, description="how long to wait for readiness")
    grace_s: float = Field(default=10.0, gt=0, description="SIGTERM to SIGKILL on shutdown")


def up(
    host: Annotated[str | None, typer.Option(help="gateway bind address (PARLEY_UP_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="gateway port (PARLEY_UP_PORT)")] = None,
    retriever_port: Annotated[int | None, typer.Option(help="PARLEY_UP_RETRIEVER_PORT")] = None,
    llm_port: Annotated[int | None, typer.Option(help="embedded LLM port (PARLEY_UP_LLM_PORT)")] = None,
    redis_url: Annotated[
        str | None, typer.Option(help="reuse this Redis instead of starting one (PARLEY_UP_REDIS_URL)")
    ] = None,
    redis_port: Annotated[int | None, typer.Option(help="port of its own redis-server")] = None,
    keys: Annotated[
        KeysMode | None,
        typer.Option(help="env: PARLEY_API_KEYS as set; generate: a new key, printed once"),
    ] = None,
    state_dir: Annotated[Path | None, typer.Option(help="logs and Redis data (PARLEY_UP_STATE_DIR)")] = None,
) -> None:
    """Run the whole service here: Redis, embedded LLM, retriever, gateway and a worker; Ctrl-C stops all."""
    overrides = {
        "host": host,
        "port": port,
        "retriever_port": retriever_port,
        "llm_port": llm_port,
        "redis_url": redis_url,
        "redis_port": redis_port,
        "keys": keys,
        "state_dir": state_dir,
    }
    env = UpSettings()
    settings = env.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    code = run(settings, dict(os.environ))
    if code:
        raise typer.Exit(code)


def run(settings: UpSettings, environ: Mapping[str, str], echo: Callable[[str], None] = print) -> int:
    """Plan, start, print, wait for a signal, stop: the exit status (0 after Ctrl-C)."""
    try:
        p = plan(settings, environ)
    except UpError as exc:
        echo(f"parley up: {exc}")
        return 2
    stack = Stack(p.components, echo=echo, grace_s=settings.grace_s, ready_timeout_s=settings.ready_timeout_s)

    def on_signal(signum: int, _frame: object) -> None:
        stack.stopping.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    for line in p.messages:
        echo(line)
    code = 0
    try:
        stack.start()
        if p.retriever_url and not index_ready(p.retriever_url):
            echo(
                "the retriever has no index: debates that need knowledge fail until you stop parley up "
                "and run `parley index build` (or ask with config knowledge=none)"
            )
        echo(f"\nParley is up: {p.api_url}  (web page {p.api_url}/ui, API reference {p.api_url}/docs)")
        auth = ""
        if p.key:
            echo(f"API key (shown once, not stored): {p.key}")
            auth = f"-H 'Authorization: Bearer {p.key}' "
        echo(
            f"try: curl -s -X POST {p.api_url}/v1/debates {auth}-H 'content-type: application/json' "
            """-d '{"question": "Who painted the Mona Lisa?"}'"""
        )
        echo("Ctrl-C stops everything.")
        exited = stack.watch()
        if exited is not None:
            c = next(c for c in p.components if c.name == exited)
            echo(f"{exited} exited on its own; stopping the rest. Its log ends:\n{tail(c.log)}")
            code = 1
    except UpError as exc:
        echo(f"parley up: {exc}")
        code = 1
    finally:
        echo("stopping: " + ", ".join(reversed([c.name for c in p.components])))
        stack.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        echo("stopped")
    return code

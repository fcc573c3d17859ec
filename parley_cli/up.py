"""``parley up``: the whole service on one machine without Docker, in one terminal.

It starts (or reuses) a Redis, the embedded LLM server (unless ``PARLEY_LLM_BASE_URL`` names one),
the retriever, the gateway and one worker, each as a child process with its own log file, and gives
them one consistent configuration: the same Redis URL to the gateway and the worker, the retriever's
and the LLM's URLs to the worker. It prints where each listens and logs, polls each readiness check,
and on Ctrl-C (SIGINT) or SIGTERM terminates every child's process group, then kills what is left
after a grace period, so nothing is orphaned.

The parts are injected (``Stack`` takes its components and a launcher), so the refusal rules and the
plan can be tested without starting anything; ``tests/parley_cli/test_up.py`` also runs it for real.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Protocol

import typer
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.llm import batch_defaults
from services.settings import ParleySettings, default_data_dir

if TYPE_CHECKING:
    from services.llm import LLMSettings

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


class UpError(Exception):
    """A reason ``parley up`` cannot start (printed as one line, exit status 2)."""


def is_loopback(host: str) -> bool:
    """Imported lazily from the gateway's settings so ``parley --help`` stays light."""
    from api.settings import is_loopback as api_is_loopback

    return api_is_loopback(host)


def exposure_refusal(host: str, keys: Mapping[str, str], anonymous: bool) -> str | None:
    """Why a bind is refused: a non-loopback address needs API keys (or an explicit anonymous mode)."""
    if keys or anonymous or is_loopback(host):
        return None
    return (
        f"refusing to serve on {host} without API keys: run `parley up --keys generate`, set "
        "PARLEY_API_KEYS (hashes from `parley hash-key KEY`), or bind 127.0.0.1"
    )


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def http_ok(url: str) -> bool:
    """A readiness probe: 2xx from ``url`` within 2 s."""
    import httpx

    try:
        return httpx.get(url, timeout=2.0).is_success
    except httpx.HTTPError:
        return False


def redis_ok(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    except redis.exceptions.RedisError:
        return False
    finally:
        client.close()


@dataclass
class Component:
    """One child process: how to start it, where it listens and logs, and when it is ready."""

    name: str
    argv: list[str]
    url: str
    log: Path
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""


class Launcher(Protocol):
    def __call__(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]: ...


def _die_with_parent() -> None:
    """In the child: its own process group (so a whole Celery pool can be signalled), and SIGTERM
    when ``parley up`` itself dies without cleaning up (Linux), so nothing is orphaned."""
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def popen_launcher(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


class Stack:
    """Starts components, waits for each readiness check, and stops all of them on a signal."""

    def __init__(
        self,
        components: list[Component],
        *,
        launcher: Launcher = popen_launcher,
        echo: Callable[[str], None] = print,
        grace_s: float = 10.0,
        ready_timeout_s: float = 600.0,
    ) -> None:
        self.components = components
        self.launcher = launcher
        self.echo = echo
        self.grace_s = grace_s
        self.ready_timeout_s = ready_timeout_s
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = threading.Event()

    def start(self) -> None:
        """Launch every component, then poll their readiness (all at once: the slow ones overlap)."""
        for c in self.components:
            self.procs[c.name] = self.launcher(c.argv, c.env, c.log)
            self.echo(f"  {c.name:<10} starting: {c.url}  log {c.log}{c.note}")
        pending = list(self.components)
        deadline = time.monotonic() + self.ready_timeout_s
        while pending:
            if self.stopping.is_set():
                raise UpError("stopped before everything was ready")
            for c in list(pending):
                proc = self.procs[c.name]
                if proc.poll() is not None:
                    raise UpError(f"{c.name} exited with status {proc.returncode}:\n{tail(c.log)}")
                if c.ready():
                    self.echo(f"  {c.name:<10} ready")
                    pending.remove(c)
            if time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                raise UpError(f"not ready after {self.ready_timeout_s:.0f} s: {names} (see their logs)")
            self.stopping.wait(0.25)

    def watch(self) -> str | None:
        """Block until a signal asks to stop (None) or a child exits on its own (its name)."""
        while not self.stopping.wait(0.5):
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    return name
        return None

    def stop(self) -> None:
        """SIGTERM to every child's process group (newest first), SIGKILL after the grace period."""
        alive = [p for p in reversed(list(self.procs.values())) if p.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in alive:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # A group may outlive its leader (a Celery pool child): make sure none is left.
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


def tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Plan:
    """What ``parley up`` will start, and what it tells the operator."""

    components: list[Component]
    api_url: str
    key: str | None
    messages: list[str]
    retriever_url: str | None = None


def plan(
    settings: UpSettings,
    environ: Mapping[str, str],
    *,
    python: str = sys.executable,
    redis_binary: str | None = None,
) -> Plan:
    """The components and their environments, from the settings; refuses what must not run."""
    from api.settings import ApiSettings
    from services.llm import LLMSettings

    api = ApiSettings()
    llm = LLMSettings()
    logs = settings.state_dir.resolve() / "logs"
    messages: list[str] = []
    key: str | None = None
    keys = dict(api.keys)
    if settings.keys == "generate":
        from api.guards import hash_key

        key = "pk_" + secrets.token_urlsafe(24)
        keys = {"operator": hash_key(key)}
    refusal = exposure_refusal(settings.host, keys, api.anonymous)
    if refusal:
        raise UpError(refusal)
    for name, host, port in (
        ("gateway", settings.host, settings.port),
        ("retriever", "127.0.0.1", settings.retriever_port),
    ):
        if port_in_use(host, port) and not (name == "retriever" and _retriever_at(port)):
            raise UpError(f"port {port} ({name}) is in use: stop what listens there or choose another port")

    base = {k: v for k, v in environ.items()}
    base.setdefault("HF_HUB_OFFLINE", "1")
    components: list[Component] = []
    parley = [python, "-m", "parley_cli"]

    redis_url = _add_redis(settings, components, base, logs, redis_binary, messages)
    batch = batch_defaults()
    llm_url = _add_llm(settings, llm, components, base, logs, parley, messages, batch.slots)
    retriever_url = f"http://127.0.0.1:{settings.retriever_port}"
    if _retriever_at(settings.retriever_port):
        messages.append(f"reusing the retriever at {retriever_url}")
    else:
        argv = [*parley, "retriever", "--host", "127.0.0.1", "--port", str(settings.retriever_port)]
        components.append(
            Component(
                "retriever",
                argv,
                retriever_url,
                logs / "retriever.log",
                lambda: http_ok(retriever_url + "/healthz"),
                base,
            )
        )

    api_env = dict(base)
    api_env["PARLEY_API_REDIS_URL"] = redis_url
    if key is not None:
        import json

        api_env["PARLEY_API_KEYS"] = json.dumps(keys)
    api_url = f"http://{_client_host(settings.host)}:{settings.port}"
    argv = [*parley, "api", "--host", settings.host, "--port", str(settings.port)]
    components.append(
        Component(
            "gateway", argv, api_url, logs / "gateway.log", lambda: http_ok(api_url + "/healthz"), api_env
        )
    )

    worker_env = dict(base)
    worker_env["PARLEY_WORKER_REDIS_URL"] = redis_url
    worker_env["PARLEY_RETRIEVER_URL"] = retriever_url
    worker_env["PARLEY_LLM_BASE_URL"] = llm_url
    if environ.get("PARLEY_LLM_BASE_URL") is None and llm.base_url is None:
        # The embedded server takes JSON schemas. Batches: one debate per core at once, their calls
        # filling the server's slots (services.llm.settings.batch_defaults, measured by bench.throughput);
        # anything set in the environment wins.
        worker_env.setdefault("PARLEY_LLM_STRUCTURED_OUTPUT", "json_schema")
        worker_env.setdefault("PARLEY_LLM_MAX_CONCURRENCY", str(batch.max_concurrency))
        worker_env.setdefault("PARLEY_WORKER_WORKER_CONCURRENCY", str(batch.worker_concurrency))
    worker_log = logs / "worker.log"
    argv = [*parley, "worker", "--loglevel", "INFO"]
    components.append(
        Component(
            "worker", argv, "(Celery, no port)", worker_log, lambda: _celery_ready(worker_log), worker_env
        )
    )
    from debate_worker.worker_settings import WorkerSettings

    worker = WorkerSettings()
    for name, host, port in (
        ("gateway", api.metrics_host, api.metrics_port),
        ("worker", worker.metrics_host, worker.metrics_port),
    ):
        messages.append(f"{name} /metrics: http://{host}:{port}/metrics" if port else f"{name} /metrics: off")
    return Plan(components, api_url, key, messages, retriever_url)


def _add_redis(
    settings: UpSettings,
    components: list[Component],
    env: dict[str, str],
    logs: Path,
    redis_binary: str | None,
    messages: list[str],
) -> str:
    """The Redis URL gateway and worker share: the one given, or a redis-server of its own."""
    if settings.redis_url is not None:
        if not redis_ok(settings.redis_url):
            raise UpError(f"no Redis answers at {settings.redis_url} (--redis-url / PARLEY_UP_REDIS_URL)")
        messages.append(f"reusing Redis at {settings.redis_url}")
        return settings.redis_url
    binary = redis_binary or shutil.which("redis-server")
    if binary is None:
        raise UpError(
            "redis-server not found on PATH: install it (sudo apt-get install redis-server) or "
            "give a running Redis with --redis-url redis://HOST:PORT/0"
        )
    if port_in_use("127.0.0.1", settings.redis_port):
        raise UpError(
            f"port {settings.redis_port} (redis) is in use: reuse that Redis with --redis-url "
            f"redis://127.0.0.1:{settings.redis_port}/0 or choose --redis-port"
        )
    redis_dir = settings.state_dir.resolve() / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    url = f"redis://127.0.0.1:{settings.redis_port}/0"
    argv = [binary, "--port", str(settings.redis_port), "--bind", "127.0.0.1", "--dir", str(redis_dir)]
    argv += ["--appendonly", "yes", "--save", ""]
    components.append(Component("redis", argv, url, logs / "redis.log", lambda: redis_ok(url), env))
    return url


def _add_llm(
    settings: UpSettings,
    llm: LLMSettings,
    components: list[Component],
    env: dict[str, str],
    logs: Path,
    parley: list[str],
    messages: list[str],
    slots: int,
) -> str:
    """The LLM URL the worker uses: PARLEY_LLM_BASE_URL, an embedded server already up, or a new one
    (with ``slots`` KV-cache slots unless PARLEY_LLM_EMBEDDED_SLOTS says otherwise)."""
    if llm.base_url is not None:
        messages.append(f"using the LLM at {llm.base_url} (PARLEY_LLM_BASE_URL)")
        return llm.base_url
    url = f"http://127.0.0.1:{settings.llm_port}/v1"
    health = f"http://127.0.0.1:{settings.llm_port}/health"
    if port_in_use("127.0.0.1", settings.llm_port):
        if not http_ok(health):
            raise UpError(f"port {settings.llm_port} (llm) is in use: choose --llm-port")
        messages.append(f"reusing the LLM server at {url}")
        return url
    check_model_file(llm)
    argv = [*parley, "llm", "serve", "--host", "127.0.0.1", "--port", str(settings.llm_port)]
    note = f"  ({llm.embedded_model}; the first start assembles the weights)"
    llm_env = dict(env)
    llm_env.setdefault("PARLEY_LLM_EMBEDDED_SLOTS", str(slots))
    components.append(Component("llm", argv, url, logs / "llm.log", lambda: http_ok(health), llm_env, note))
    return url


def check_model_file(llm: LLMSettings) -> None:
    """A local GGUF (``PARLEY_LLM_EMBEDDED_MODEL=/path/model.gguf``) is checked here, before anything
    starts: a file that is missing, not a GGUF, not a chat model or too short a context stops
    ``parley up`` with the reason instead of an llm service that never turns healthy."""
    from services.llm import EmbeddedLLMError, is_model_path

    if not is_model_path(llm.embedded_model):
        return
    from services.llm import check_servable, read_gguf

    try:
        check_servable(read_gguf(Path(llm.embedded_model).expanduser()), n_ctx=llm.embedded_ctx)
    except EmbeddedLLMError as exc:
        raise UpError(f"PARLEY_LLM_EMBEDDED_MODEL: {exc}") from None


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _retriever_at(port: int) -> bool:
    """A Parley retriever already serving on ``port`` (it keeps the store locked: reuse it)."""
    import httpx

    try:
        body = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(body, dict) and "index_ready" in body


def index_ready(retriever_url: str) -> bool:
    """Whether the retriever reports a built index (``index_ready`` of its ``/healthz``)."""
    import httpx

    try:
        return bool(httpx.get(retriever_url + "/healthz", timeout=5.0).json().get("index_ready"))
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


def _celery_ready(log: Path) -> bool:
    try:
        text = log.read_bytes()
    except OSError:
        return False
    return b" ready." in text or b'"ready"' in text


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

"""What ``parley up`` will start (``plan``): the components and their environments from the settings,
one consistent configuration for all of them, and the refusals (a public bind without keys, a port
in use, a local model file that cannot be served) said before anything starts."""

from __future__ import annotations

import json
import secrets
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from api.settings import ApiSettings
from api.settings import is_loopback as api_is_loopback
from parley_cli.probes import celery_ready, http_ok, port_in_use, redis_ok, retriever_at
from parley_cli.processes import Component, UpError
from services.llm import (
    EmbeddedLLMError,
    LLMSettings,
    batch_defaults,
    check_servable,
    is_model_path,
    read_gguf,
)
from services.redis_connect import redact_redis_url

if TYPE_CHECKING:
    from parley_cli.up import UpSettings


def is_loopback(host: str) -> bool:
    """The gateway's own loopback test (``api.settings``), under the name ``parley up`` uses."""
    return api_is_loopback(host)


def exposure_refusal(host: str, keys: Mapping[str, str], anonymous: bool) -> str | None:
    """Why a bind is refused: a non-loopback address needs API keys (or an explicit anonymous mode)."""
    if keys or anonymous or is_loopback(host):
        return None
    return (
        f"refusing to serve on {host} without API keys: run `parley up --keys generate`, set "
        "PARLEY_API_KEYS (hashes from `parley hash-key KEY`), or bind 127.0.0.1"
    )


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
    api = ApiSettings()
    llm = LLMSettings()
    logs = settings.state_dir.resolve() / "logs"
    messages: list[str] = []
    key: str | None = None
    keys = dict(api.keys)
    if settings.keys == "generate":
        # lazy: api.guards brings FastAPI and kombu (~140 ms); only a generated key needs it
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
        if port_in_use(host, port) and not (name == "retriever" and retriever_at(port)):
            raise UpError(f"port {port} ({name}) is in use: stop what listens there or choose another port")

    base = {k: v for k, v in environ.items()}
    base.setdefault("HF_HUB_OFFLINE", "1")
    components: list[Component] = []
    parley = [python, "-m", "parley_cli"]

    redis_url = _add_redis(settings, components, base, logs, redis_binary, messages)
    batch = batch_defaults()
    llm_url = _add_llm(settings, llm, components, base, logs, parley, messages, batch.slots)
    retriever_url = f"http://127.0.0.1:{settings.retriever_port}"
    if retriever_at(settings.retriever_port):
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
            "worker", argv, "(Celery, no port)", worker_log, lambda: celery_ready(worker_log), worker_env
        )
    )
    # lazy: the worker's settings import Celery (~100 ms); only `parley up` with a worker needs them
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
        shown = redact_redis_url(settings.redis_url)
        if not redis_ok(settings.redis_url):
            raise UpError(f"no Redis answers at {shown} (--redis-url / PARLEY_UP_REDIS_URL)")
        messages.append(f"reusing Redis at {shown}")
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
    if not is_model_path(llm.embedded_model):
        return

    try:
        check_servable(read_gguf(Path(llm.embedded_model).expanduser()), n_ctx=llm.embedded_ctx)
    except EmbeddedLLMError as exc:
        raise UpError(f"PARLEY_LLM_EMBEDDED_MODEL: {exc}") from None


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host

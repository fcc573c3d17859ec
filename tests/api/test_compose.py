"""The deployment file, checked statically with Debian's ``docker-compose config`` (no Docker engine here)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.api.support import ROOT

# docker-compose config runs as a subprocess.
pytestmark = pytest.mark.integration


def compose_config(*profiles: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install -y docker-compose)")
    args = [binary, "-f", str(ROOT / "docker-compose.yml")]
    for p in profiles:
        args += ["--profile", p]
    proc = run_compose_config(args, {"PARLEY_API_KEYS": '{"ops": "' + "0" * 64 + '"}', **(env or {})})
    assert proc.returncode == 0, proc.stderr
    config: dict[str, Any] = yaml.safe_load(proc.stdout)
    return config


def run_compose_config(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "FLOWER_"))}
    return subprocess.run(
        [*args, "config"], capture_output=True, text=True, cwd=ROOT, env={**clean, **env}, timeout=60
    )


def test_compose_requires_api_keys() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install -y docker-compose)")
    proc = run_compose_config([binary, "-f", str(ROOT / "docker-compose.yml")], {})
    assert proc.returncode != 0
    assert "PARLEY_API_KEYS" in proc.stderr
    api = compose_config()["services"]["api"]
    assert api["command"][:3] == ["api", "--host", "0.0.0.0"]  # exposed, hence keys required


def test_compose_defaults_fit_the_deployment() -> None:
    services = compose_config()["services"]
    # Redis refuses writes when full instead of evicting jobs or results.
    command = " ".join(map(str, services["redis"]["command"]))
    assert "--maxmemory 2gb" in command and "--maxmemory-policy noeviction" in command
    # A worker has longer than a debate round to hand its jobs back before it is killed.
    grace = services["worker"]["stop_grace_period"]
    assert int(str(grace).rstrip("s")) >= 120
    # Two workers' LLM requests in flight fit the bundled server's slots.
    slots = int(services["llm"]["environment"]["PARLEY_LLM_EMBEDDED_SLOTS"])
    assert 2 * int(services["worker"]["environment"]["PARLEY_LLM_MAX_CONCURRENCY"]) <= slots


def test_compose_file_validates_with_every_service_healthy_and_ordered() -> None:
    services = compose_config()["services"]
    assert {"api", "retriever", "worker", "redis", "qdrant", "llm"} <= set(services)
    # Optional services only start under their profiles.
    assert services["flower"]["profiles"] == ["monitoring"]
    assert services["searxng"]["profiles"] == ["websearch"]
    assert all(
        "profiles" not in services[s] for s in ("api", "retriever", "worker", "redis", "qdrant", "llm")
    )
    for name, svc in services.items():
        assert "healthcheck" in svc, f"{name} has no health check"
    assert "--appendonly" in services["redis"]["command"] and "yes" in services["redis"]["command"]
    assert services["qdrant"]["image"].startswith("qdrant/qdrant")
    # The llm service is the embedded model from the Parley image's `llm` target: no file to bring.
    assert services["llm"]["build"]["target"] == "llm"
    assert services["llm"]["command"][:2] == ["llm", "serve"]
    # One image, built from the repository's Dockerfile, for api, retriever and worker.
    images = {services[s]["image"] for s in ("api", "retriever", "worker")}
    assert len(images) == 1
    assert all(services[s]["build"]["dockerfile"] == "Dockerfile" for s in ("api", "retriever", "worker"))
    assert services["redis"]["build"]["context"].endswith("deploy/redis")
    assert services["worker"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["worker"]["depends_on"]["retriever"]["condition"] == "service_healthy"
    assert services["api"]["depends_on"]["redis"]["condition"] == "service_healthy"
    # Any URL can replace the bundled llm service.
    worker_env = compose_config(env={"PARLEY_LLM_BASE_URL": "http://gpu-box:8000/v1"})["services"]["worker"]
    assert worker_env["environment"]["PARLEY_LLM_BASE_URL"] == "http://gpu-box:8000/v1"


def test_profiles_add_searxng_and_flower_with_auth() -> None:
    services = compose_config("websearch", "monitoring", env={"FLOWER_PASSWORD": "s3cret"})["services"]
    assert {"searxng", "flower"} <= set(services)
    flower = services["flower"]
    assert "--basic_auth" in " ".join(flower["command"])
    assert flower["environment"]["FLOWER_PASSWORD"] == "s3cret"
    assert (ROOT / "deploy/searxng/settings.yml").is_file()


def test_dockerfile_serves_all_three_processes() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["parley"]' in text
    # The default image is the default path: no torch in the stage it is built from; torch (its CPU
    # build, by the pinned sha256) only in the `torch` target's own stage.
    default_builder = text[text.index("AS builder\n") : text.index("AS builder-torch")]
    instructions = [line for line in default_builder.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in instructions if "torch" in line.replace("torch_install.sh", "")]
    torch_stage = text[text.index("AS builder-torch") : text.index("AS builder-llm")]
    assert "torch_install.sh scripts/torch-cpu-requirements.txt" in torch_stage
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in torch_stage
    # Anserini's jar without pyserini's Python dependencies (torch among them).
    assert "--no-deps --no-build-isolation --no-binary pyserini" in default_builder
    # Every package from the lock, hash-checked: the lock is copied and used as hashed constraints.
    assert "COPY requirements.lock" in text and text.count("-c requirements.lock") == 3
    # Multi-stage, the base a build argument, not root, a health check; CA certificates only as a secret.
    assert text.startswith("# ") and "ARG BASE_IMAGE=python:3.11-slim-bookworm" in text
    assert "USER parley" in text and "HEALTHCHECK" in text and "--mount=type=secret,id=ca" in text
    assert "ca-certificates.crt" not in text.replace("src=/etc/ssl/certs/ca-certificates.crt", "")
    # Every package pyproject.toml installs is copied into the image.
    include = yaml.safe_load(
        text_between((ROOT / "pyproject.toml").read_text(), "include = [", "]").join(["[", "]"])
    )
    for pattern in include:
        package = pattern.rstrip("*")
        assert f"COPY {package} ./{package}" in text, f"the Dockerfile does not copy {package}"
    services = compose_config()["services"]
    assert {s: services[s]["command"][0] for s in ("api", "worker")} == {"api": "api", "worker": "worker"}
    # The retriever builds its index on first start, then serves (`exec parley retriever`).
    script = services["retriever"]["entrypoint"][-1]
    assert script == "/opt/parley/deploy/start_retriever.sh"
    assert "exec parley retriever" in (ROOT / "deploy/docker/start_retriever.sh").read_text()


def text_between(text: str, start: str, end: str) -> str:
    head = text.index(start) + len(start)
    return text[head : text.index(end, head)]


def test_only_the_gateway_is_published_and_every_service_is_limited() -> None:
    env = {"FLOWER_PASSWORD": "x", "GRAFANA_PASSWORD": "x"}
    services = compose_config("websearch", "monitoring", "observability", env=env)["services"]
    for name, svc in services.items():
        # Operator pages are on loopback; only the gateway is published on every interface.
        for port in svc.get("ports", []):
            host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).split(":")[0]
            assert name == "api" or host_ip == "127.0.0.1", f"{name} publishes {port}"
        assert "mem_limit" in svc and "cpus" in svc, f"{name} has no memory or CPU limit"
    assert "ports" not in services["redis"] and "ports" not in services["worker"]
    # No default secret: SearXNG refuses to start without the operator's own.
    assert services["searxng"]["environment"]["SEARXNG_SECRET"] == ""
    assert "test -n" in " ".join(services["searxng"]["command"])


def test_embedded_override_runs_without_a_qdrant_server() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install -y docker-compose)")
    args = [binary, "-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "docker-compose.embedded.yml")]
    proc = run_compose_config(args, {"PARLEY_API_KEYS": '{"ops": "' + "0" * 64 + '"}'})
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    assert services["qdrant"]["profiles"] == ["qdrant-server"]
    assert services["retriever"]["environment"]["PARLEY_RETRIEVER_QDRANT_URL"] == ""
    assert "qdrant" not in services["retriever"].get("depends_on", {})


def test_the_llm_service_serves_a_mounted_gguf_of_your_own() -> None:
    default = compose_config()["services"]["llm"]
    assert default["environment"]["PARLEY_LLM_EMBEDDED_MODEL"] == "qwen2.5-coder-1.5b"
    env = {"PARLEY_LLM_MODELS_DIR": "/srv/models", "PARLEY_LLM_EMBEDDED_MODEL": "/models/My-3B-Instruct.gguf"}
    llm = compose_config(env=env)["services"]["llm"]
    assert llm["environment"]["PARLEY_LLM_EMBEDDED_MODEL"] == "/models/My-3B-Instruct.gguf"
    mounts = [str(v) for v in llm["volumes"]]
    assert any("/srv/models" in v and "/models" in v and "ro" in v for v in mounts), mounts

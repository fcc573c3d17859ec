"""What produced an evaluation's results, recorded with them: the code, the locked dependencies, the
model (its weights' sha256 and quantization where Parley packaged it, the server and its settings),
the index (corpus, encoder, size), the machine. ``parley eval`` in this process writes one line of it
per invocation into the results folder (``provenance.jsonl``); the report prints the latest and warns
when invocations differ in what decides the answers (``evaluation.provenance``).

Nothing secret is recorded: no key, and a URL's user and password are dropped.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from retriever.manifest import read_manifest
from retriever.settings import RetrieverSettings
from services.chat_model import redact_url
from services.llm import MODELS, LLMSettings, ServedModel, is_model_path

ROOT = Path(__file__).resolve().parent.parent


def code_version(root: Path = ROOT) -> dict[str, Any]:
    """The git commit of a checkout (and whether its tracked files differ from it), else the installed
    package's version."""
    out: dict[str, Any] = {"package": _package_version()}
    if (root / ".git").exists():
        try:
            head = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
            dirty = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if head.returncode == 0:
                out["commit"] = head.stdout.strip()
                out["modified"] = bool(dirty.stdout.strip())
        except (OSError, subprocess.TimeoutExpired):
            pass
    lock = root / "requirements.lock"
    if lock.exists():
        out["lock_sha256"] = hashlib.sha256(lock.read_bytes()).hexdigest()
    return out


def _package_version() -> str | None:
    try:
        return metadata.version("parley")
    except metadata.PackageNotFoundError:
        return None


def model_identity(settings: LLMSettings, served: ServedModel | None) -> dict[str, Any]:
    """The model the debates called: the configured server and model name, or the embedded model with
    its packaged weights' sha256, quantization and the server's settings."""
    if settings.base_url:
        return {
            "kind": "endpoint",
            "base_url": ",".join(redact_url(u) for u in settings.base_url.split(",")),
            "model": settings.model,
            "roles": {
                role: getattr(settings, role).model or settings.model
                for role in ("debater", "judge", "summarizer")
            },
        }
    name = settings.embedded_model
    out: dict[str, Any] = {"kind": "embedded", "model": name, "server": settings.embedded_server}
    packaged = MODELS.get(name)
    if packaged is not None:
        out.update(
            title=packaged.title,
            quantization=packaged.quantization,
            weights_sha256=packaged.sha256,
            packages=packaged.packages,
        )
    elif is_model_path(name):
        out["file"] = Path(name).name
    if served is not None:
        out.update(
            slots=served.slots, context_tokens=served.context_tokens, max_concurrency=served.max_concurrency
        )
    out.update(threads=settings.embedded_threads, ctx_per_slot=settings.embedded_ctx)
    return out


def index_identity(settings: RetrieverSettings | None, service: str | None = None) -> dict[str, Any] | None:
    """The index the pools were built from (what its build recorded), the retrieval service's address
    when a service built them (its index is on its side), or None without a retriever."""
    if service:
        return {"service": redact_url(service)}
    if settings is None:
        return None
    built = read_manifest(settings)
    keep = ("collection", "embedding_model", "encoder", "dim", "passages", "store_engine", "format")
    out: dict[str, Any] = {k: built[k] for k in keep if k in built}
    out["corpora"] = sorted((built.get("corpora") or {}).keys())
    out["rerank_model"] = settings.rerank_model
    return out


def machine() -> dict[str, Any]:
    gpu = None
    cards = Path("/proc/driver/nvidia/gpus")
    if cards.is_dir():
        gpu = len(list(cards.iterdir()))
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "nvidia_gpus": gpu,
    }


def collect(
    llm: LLMSettings,
    served: ServedModel | None,
    retriever: RetrieverSettings | None,
    *,
    retriever_url: str | None = None,
    root: Path = ROOT,
) -> dict[str, Any]:
    """This process's provenance, as ``parley eval`` records it per invocation."""
    return {
        "code": code_version(root),
        "model": model_identity(llm, served),
        "index": index_identity(retriever, retriever_url),
        "machine": machine(),
    }

"""What produced an evaluation's results, recorded with them: the code, the locked dependencies, the
model (its weights' sha256 and quantization where Parley packaged it, the server and its settings),
the index (corpus, encoder, size), the machine. ``parley eval`` in this process writes one line of it
per invocation into the results folder (``provenance.jsonl``); the report prints the latest and warns
when invocations differ in what decides the answers (``evaluation.provenance``).

Nothing secret is recorded: no key, and a URL's user and password are dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation.provenance import ROOT, code_version, machine
from retriever.manifest import read_manifest
from retriever.settings import RetrieverSettings
from services.chat_model import redact_url
from services.llm import MODELS, LLMSettings, ServedModel, is_model_path


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

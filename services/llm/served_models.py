"""Refuse at start a model name the configured server does not serve.

A typo in ``PARLEY_LLM_MODEL`` (or a role's, or a named endpoint's model) used to surface at the first
debate, as a 404 from the server after the job was queued. Each configured endpoint's ``GET /models``
(the OpenAI-compatible listing vLLM, llama.cpp, TGI, Ollama and OpenAI serve) is asked once when a
process that calls models starts; a server that lists its models and not ours refuses the start with
what it does serve. The default name ``local`` names no model and is not checked. A server that cannot
be asked (down, no listing, not JSON) is not refused here: a server that is down at start is what the
client's retries wait out, and some servers list nothing.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

from services.errors import ParleyError
from services.llm.replicas import normal_base_url, split_base_urls
from services.llm.settings import ROLES, LLMSettings
from services.tls import client_verify

log = logging.getLogger("parley.llm")
# ``PARLEY_LLM_MODEL``'s default, which the compose file passes on too: it names no model, and
# llama.cpp's server (the bundled ``llm`` service) answers whatever name a request sends.
UNNAMED_MODEL = "local"


class ModelNotServed(ParleyError):
    """A configured model name that its server does not list."""


@dataclass(frozen=True)
class ConfiguredModel:
    where: str  # the setting that names it, for the message
    base_url: str  # the first replica: replicas of one endpoint serve one model
    model: str
    api_key: str | None


def configured_models(settings: LLMSettings) -> list[ConfiguredModel]:
    """Every (server, model) the settings send calls to, once each: the global endpoint, each role's
    override and each named endpoint. The embedded server (no base URL) names its own model."""
    out: dict[tuple[str, str], ConfiguredModel] = {}

    def add(where: str, url: str | None, model: str, key: Any) -> None:
        if not url or model == UNNAMED_MODEL:
            return
        first = normal_base_url(split_base_urls(url)[0])
        out.setdefault(
            (first, model), ConfiguredModel(where, first, model, key.get_secret_value() if key else None)
        )

    add("PARLEY_LLM_MODEL", settings.base_url, settings.model, settings.api_key)
    for role in ROLES:
        override = getattr(settings, role)
        if override.base_url or override.model:
            add(
                f"PARLEY_LLM_{role.upper()}__MODEL",
                override.base_url or settings.base_url,
                override.model or settings.model,
                override.api_key or (settings.api_key if not override.base_url else None),
            )
    for name, endpoint in settings.endpoints.items():
        add(f"PARLEY_LLM_ENDPOINTS[{name}]", endpoint.base_url, endpoint.model, endpoint.api_key)
    return list(out.values())


def listed_models(
    base_url: str,
    api_key: str | None,
    *,
    transport: httpx.BaseTransport | None = None,
    timeout_s: float = 5.0,
    verify: ssl.SSLContext | bool = True,
) -> list[str] | None:
    """The model ids ``base_url`` lists, or None when it cannot be asked or lists none."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(transport=transport, timeout=timeout_s, verify=verify) as client:
            reply = client.get(f"{base_url}/models", headers=headers)
        if reply.status_code != 200:
            return None
        data = reply.json().get("data")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    ids = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]
    return ids or None


def _served(model: str, ids: list[str]) -> bool:
    # A server that names its models by file path (llama.cpp without an alias) serves "x.gguf" as
    # ".../x.gguf": the last part of the path counts as the name.
    return any(model == i or model == i.rsplit("/", 1)[-1] for i in ids)


def check_models_served(settings: LLMSettings, *, transport: httpx.BaseTransport | None = None) -> int:
    """Raise ``ModelNotServed`` naming every configured model its server does not list; returns how
    many (server, model) pairs were confirmed."""
    problems = []
    confirmed = 0
    for configured in configured_models(settings):
        ids = listed_models(
            configured.base_url,
            configured.api_key,
            transport=transport,
            verify=client_verify(settings.ca_file),
        )
        if ids is None:
            log.info("could not list the models of %s; %s not checked", configured.base_url, configured.where)
            continue
        if _served(configured.model, ids):
            confirmed += 1
            continue
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        problems.append(
            f"{configured.where}={configured.model!r} is not served by {configured.base_url} "
            f"(it serves {shown})"
        )
    if problems:
        raise ModelNotServed("; ".join(problems))
    return confirmed

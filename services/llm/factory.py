"""Builds the ``RoleModels`` a debate uses from ``LLMSettings``: one client per distinct endpoint.

Roles without an override share the global endpoint (and so its per-endpoint concurrency limit); a
role with its own base URL, key or model gets its own client. All clients share one httpx pool.

Credentials follow one rule: a key is sent only to the URL it was configured with. A team member that
names an operator endpoint (``PARLEY_LLM_ENDPOINTS``) uses that endpoint's URL, model and key; one
that gives a URL (the operator's CLI, or a client where the operator allows client URLs) is sent a key
only if that exact URL is one the operator configured with it, and none otherwise.

An operator's base URL may list several servers of one model, comma-separated (``services.llm.replicas``):
its client spreads calls over them, and each of those URLs counts as configured with the endpoint's
key. A URL from a client is always one URL, never split.

Where a URL comes from a client (the worker's jobs), it is dialled through ``client_url_transport``
(``services.egress.PublicOnlyTransport``): its own connection pool, public addresses only, checked on
the address dialled. The operator's endpoints never go through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from pydantic import SecretStr

from services.chat_model import ChatModel, StructuredMode
from services.llm.client import OpenAIChatClient, RetryPolicy
from services.llm.embedded import ServedModel
from services.llm.replicas import normal_base_url, split_base_urls
from services.llm.settings import ROLES, LLMSettings
from services.tls import client_verify


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # one URL, or the operator's comma-separated replicas
    model: str
    api_key: str | None = field(default=None, repr=False)  # never in a log line or a traceback
    name: str = field(default="default", compare=False)  # the replicas' metrics label


class UnknownEndpoint(ValueError):
    """A config names an LLM endpoint the operator did not configure."""


class RoleModelsFromSettings:
    """``RoleModels`` backed by OpenAI-compatible endpoints, per-role overrides applied."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        served: ServedModel | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        client_url_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``served``: the server the debate's model runs on (the embedded one, or any URL a caller
        starts) in place of ``PARLEY_LLM_BASE_URL``, its slots and context window applied to it."""
        base_url = served.base_url if served else None
        model = served.model if served else None
        structured_output = served.structured_output if served else None
        max_concurrency = served.max_concurrency if served else None
        slots = served.slots if served else None
        context_tokens = served.context_tokens if served else None
        default_url = base_url or settings.base_url
        # Slots and the context check belong to the server at the default URL (the embedded one).
        self._embedded_url = _normal_url(default_url) if default_url else None
        self._slots = slots
        self._context_tokens = context_tokens
        if not default_url:
            raise ValueError("no LLM base URL: set PARLEY_LLM_BASE_URL or start the embedded model")
        self._settings = settings
        self._http = _pool(settings, transport)
        # Agents' own URLs: a pool of their own when they must be guarded, else the shared one.
        self._client_url_http = (
            _pool(settings, client_url_transport) if client_url_transport is not None else self._http
        )
        self._client_url_clients: dict[Endpoint, OpenAIChatClient] = {}
        self._structured: StructuredMode = structured_output or settings.structured_output
        self._max_concurrency = max_concurrency or settings.max_concurrency
        # The global key belongs to PARLEY_LLM_BASE_URL: a server started here (the embedded model)
        # under another URL never receives it.
        global_key = settings.api_key.get_secret_value() if settings.api_key else None
        if base_url is not None and (
            settings.base_url is None or _normal_url(base_url) != _normal_url(settings.base_url)
        ):
            global_key = None
        default = Endpoint(default_url, model or settings.model, global_key)
        self._clients: dict[Endpoint, OpenAIChatClient] = {}
        self._by_role: dict[str, OpenAIChatClient] = {}
        for role in ROLES:
            override = getattr(settings, role)
            endpoint = Endpoint(
                override.base_url or default.base_url,
                override.model or default.model,
                _role_key(override.api_key, override.base_url, default),
                name=role if override.base_url else "default",
            )
            self._by_role[role] = self.client_for(endpoint)
        self._named = {
            name: Endpoint(e.base_url, e.model, e.api_key.get_secret_value() if e.api_key else None, name)
            for name, e in settings.endpoints.items()
        }
        # Which key belongs to which configured URL (the only places a key may go): each replica of
        # an endpoint is a URL configured with its key.
        self._key_by_url: dict[str, str] = {}
        for e in [*self._clients, *self._named.values()]:
            if e.api_key:
                for url in split_base_urls(e.base_url):
                    self._key_by_url.setdefault(_normal_url(url), e.api_key)

    def client_for(self, endpoint: Endpoint, *, client_url: bool = False) -> OpenAIChatClient:
        """The shared client for ``endpoint`` (also used for per-agent models of heterogeneous teams);
        ``client_url``: a URL an agent's config gave, dialled through the client-URL transport."""
        clients = self._client_url_clients if client_url else self._clients
        client = clients.get(endpoint)
        if client is None:
            s = self._settings
            embedded = _normal_url(endpoint.base_url) == self._embedded_url and not client_url
            client = clients[endpoint] = OpenAIChatClient(
                # The operator's list of replicas is split; a client's URL stays one URL.
                endpoint.base_url if client_url else split_base_urls(endpoint.base_url),
                endpoint.model,
                api_key=endpoint.api_key,
                timeout_s=s.timeout_s,
                connect_timeout_s=s.connect_timeout_s,
                timeout_grace_s=s.timeout_grace_s,
                retry=RetryPolicy(
                    s.max_attempts, s.backoff_base_s, s.backoff_max_s, window_s=s.retry_window_s
                ),
                max_concurrency=self._max_concurrency,
                max_tokens=s.max_tokens,
                structured_mode=self._structured,
                slots=self._slots if embedded else None,
                context_tokens=self._context_tokens if embedded else None,
                client=self._client_url_http if client_url else self._http,
                replica_name=endpoint.name,
                replica_cooldown_s=s.replica_cooldown_s,
                replica_cooldown_max_s=s.replica_cooldown_max_s,
                replica_spill_gap=s.replica_spill_gap,
            )
        return client

    def for_role(self, role: str, agent: int | None = None) -> ChatModel:
        return self._by_role.get(role, self._by_role["debater"])

    def fallback_for(self, role: str) -> ChatModel | None:
        """The model that answers a call ``role``'s endpoint failed (``PARLEY_LLM_JUDGE__FALLBACK``, …):
        a named endpoint with its own URL, model and key; None when the role has none."""
        override = getattr(self._settings, role, None)
        name = getattr(override, "fallback", None)
        if name is None:
            return None
        named = self._named[name]  # the settings refused an unknown name when they loaded
        return self.client_for(named)

    @property
    def endpoint_names(self) -> frozenset[str]:
        return frozenset(self._named)

    def agent_client(
        self,
        role: str,
        *,
        endpoint: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
    ) -> ChatModel:
        """A client for one agent of a heterogeneous team.

        ``endpoint``: the operator's named endpoint (its URL, model and key; ``model`` may replace the
        model name). ``base_url``: that URL, with a key only if the operator configured this URL with
        one. Only ``model``: the role's endpoint and key with the agent's model name.
        """
        if endpoint is not None:
            named = self._named.get(endpoint)
            if named is None:
                known = ", ".join(sorted(self._named)) or "none configured"
                raise UnknownEndpoint(f"team: no LLM endpoint named {endpoint!r} (known: {known})")
            return self.client_for(Endpoint(named.base_url, model or named.model, named.api_key, endpoint))
        role_client = self._by_role.get(role, self._by_role["debater"])
        role_endpoint = next(e for e, c in self._clients.items() if c is role_client)
        if base_url is not None:
            key = self._key_by_url.get(_normal_url(base_url))
            return self.client_for(Endpoint(base_url, model or role_endpoint.model, key), client_url=True)
        return self.client_for(
            Endpoint(
                role_endpoint.base_url,
                model or role_endpoint.model,
                role_endpoint.api_key,
                role_endpoint.name,
            )
        )

    async def aclose(self) -> None:
        """Close every endpoint's client (cutting requests still running past their timeout), then
        the shared connection pools."""
        for client in [*self._clients.values(), *self._client_url_clients.values()]:
            await client.aclose()
        await self._http.aclose()
        if self._client_url_http is not self._http:
            await self._client_url_http.aclose()


def build_role_models(
    settings: LLMSettings,
    *,
    served: ServedModel | None = None,
    client_url_transport: httpx.AsyncBaseTransport | None = None,
) -> RoleModelsFromSettings:
    """Role models for ``settings``; ``served`` (the embedded server, or any server a caller started)
    replaces the global endpoint; ``client_url_transport`` guards the URLs agents' configs give."""
    if (
        served is not None
        and served.retry_window_s is not None
        and served.retry_window_s < settings.retry_window_s
    ):
        settings = settings.model_copy(update={"retry_window_s": served.retry_window_s})
    return RoleModelsFromSettings(settings, served=served, client_url_transport=client_url_transport)


def _pool(settings: LLMSettings, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s),
        transport=transport,
        verify=client_verify(settings.ca_file),
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
    )


def _normal_url(url: str) -> str:
    """The form URLs are compared in: no trailing slash, ``/v1`` as the client adds it (each entry of
    a list of replicas)."""
    return ",".join(normal_base_url(u) for u in url.split(","))


def _role_key(own: SecretStr | None, own_url: str | None, default: Endpoint) -> str | None:
    """A role's key: its own, else the global key only when the role talks to the global URL."""
    if own is not None:
        return own.get_secret_value()
    if own_url is None or _normal_url(own_url) == _normal_url(default.base_url):
        return default.api_key
    return None

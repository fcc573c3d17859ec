"""Builds the ``RoleModels`` a debate uses from ``LLMSettings``: one client per distinct endpoint.

Roles without an override share the global endpoint (and so its per-endpoint concurrency limit); a
role with its own base URL, key or model gets its own client. All clients share one httpx pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from services.llm import ChatModel, OpenAIChatClient, RetryPolicy, StructuredMode
from services.settings import ROLES, LLMSettings


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str | None


class RoleModelsFromSettings:
    """``RoleModels`` backed by OpenAI-compatible endpoints, per-role overrides applied."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        base_url: str | None = None,
        model: str | None = None,
        structured_output: StructuredMode | None = None,
        max_concurrency: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        default_url = base_url or settings.base_url
        if not default_url:
            raise ValueError("no LLM base URL: set PARLEY_LLM_BASE_URL or start the embedded model")
        self._settings = settings
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s),
            transport=transport,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )
        self._structured: StructuredMode = structured_output or settings.structured_output
        self._max_concurrency = max_concurrency or settings.max_concurrency
        default = Endpoint(
            default_url,
            model or settings.model,
            settings.api_key.get_secret_value() if settings.api_key else None,
        )
        self._clients: dict[Endpoint, OpenAIChatClient] = {}
        self._by_role: dict[str, OpenAIChatClient] = {}
        for role in ROLES:
            override = getattr(settings, role)
            endpoint = Endpoint(
                override.base_url or default.base_url,
                override.model or default.model,
                override.api_key.get_secret_value() if override.api_key else default.api_key,
            )
            self._by_role[role] = self.client_for(endpoint)

    def client_for(self, endpoint: Endpoint) -> OpenAIChatClient:
        """The shared client for ``endpoint`` (also used for per-agent models of heterogeneous teams)."""
        client = self._clients.get(endpoint)
        if client is None:
            s = self._settings
            client = self._clients[endpoint] = OpenAIChatClient(
                endpoint.base_url,
                endpoint.model,
                api_key=endpoint.api_key,
                timeout_s=s.timeout_s,
                connect_timeout_s=s.connect_timeout_s,
                retry=RetryPolicy(s.max_attempts, s.backoff_base_s, s.backoff_max_s),
                max_concurrency=self._max_concurrency,
                max_tokens=s.max_tokens,
                structured_mode=self._structured,
                client=self._http,
            )
        return client

    def for_role(self, role: str, agent: int | None = None) -> ChatModel:
        return self._by_role.get(role, self._by_role["debater"])

    def agent_client(self, role: str, *, base_url: str | None, model: str | None) -> ChatModel:
        """A client for one agent of a heterogeneous team: the role's endpoint with the agent's
        base URL and/or model swapped in; the role's API key is reused (configs never carry keys)."""
        role_client = self._by_role.get(role, self._by_role["debater"])
        role_endpoint = next(e for e, c in self._clients.items() if c is role_client)
        return self.client_for(
            Endpoint(base_url or role_endpoint.base_url, model or role_endpoint.model, role_endpoint.api_key)
        )

    async def aclose(self) -> None:
        await self._http.aclose()


def build_role_models(
    settings: LLMSettings,
    *,
    base_url: str | None = None,
    model: str | None = None,
    structured_output: StructuredMode | None = None,
    max_concurrency: int | None = None,
) -> RoleModelsFromSettings:
    """Role models for ``settings``; the keyword arguments replace the globals (the embedded server)."""
    return RoleModelsFromSettings(
        settings,
        base_url=base_url,
        model=model,
        structured_output=structured_output,
        max_concurrency=max_concurrency,
    )

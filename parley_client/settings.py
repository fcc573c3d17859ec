"""Where clients find the gateway: ``PARLEY_API_URL`` and ``PARLEY_API_KEY``.

Reading them needs ``pydantic-settings`` (the ``settings`` extra of the client, always there in a full
Parley install); a client given its URL and key directly needs only httpx and pydantic.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ClientSettings(BaseSettings):
    """How clients (``parley submit``, ``parley mcp``, ``ParleyClient.from_settings()``) reach the gateway:
    ``PARLEY_API_URL`` and ``PARLEY_API_KEY``."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_API_", frozen=True, extra="ignore")

    url: str = "http://127.0.0.1:8000"
    key: SecretStr | None = None
    client_timeout_s: float = Field(default=60.0, gt=0)

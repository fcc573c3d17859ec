"""The retriever behind a shared token, over TLS with a private CA: the real app under uvicorn.

With ``PARLEY_RETRIEVER_TOKEN`` set the API answers only callers that send it (``/healthz`` stays
open for probes); the workers' ``RetrieverClient`` sends the same variable's value, and reaches an
``https://`` retriever whose certificate a private CA signed when given that CA's file
(``PARLEY_RETRIEVER_CA_FILE``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from parley_testing.redis_topologies import ThrowawayCA
from retriever.app import create_app
from retriever.settings import RetrieverSettings
from services.retriever_client import RetrieverBadRequest, RetrieverClient, RetrieverIndexMissing
from services.tls import client_verify
from tests.support.scripted_llm import free_port

pytestmark = [pytest.mark.integration]

TOKEN = "retriever-token-3b7d-SECRET"


class TlsAppServer:
    """An ASGI app under uvicorn over TLS on a free port (a thread of this process)."""

    def __init__(self, app: object, cert: Path, key: Path) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app,  # type: ignore[arg-type]
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> TlsAppServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the app did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def test_the_api_needs_the_token_and_the_client_sends_it_over_tls(
    empty_settings: RetrieverSettings, tmp_path: Path
) -> None:
    ca = ThrowawayCA(tmp_path / "ca")
    cert, key = ca.issue("retriever")
    settings = empty_settings.model_copy(update={"token": SecretStr(TOKEN)})
    with TlsAppServer(create_app(settings), cert, key) as srv:
        verify = client_verify(ca.cert_file)
        with httpx.Client(base_url=srv.url, verify=verify, timeout=30) as http:
            assert http.get("/healthz").status_code == 200
            for headers in ({}, {"authorization": "Bearer wrong"}):
                refused = http.post("/v1/pools", json={"question": "q"}, headers=headers)
                assert refused.status_code == 401, refused.text
                assert refused.json()["type"] == "/problems/unauthorized"
                assert TOKEN not in refused.text

        async def calls() -> None:
            # With the token the request gets through to the (empty) index: a 503 that names it.
            async with RetrieverClient(srv.url, token=TOKEN, verify=verify, max_attempts=1) as client:
                with pytest.raises(RetrieverIndexMissing):
                    await client.build_pool("who painted the mona lisa")
            async with RetrieverClient(srv.url, verify=verify, max_attempts=1) as client:
                with pytest.raises(RetrieverBadRequest, match="HTTP 401") as info:
                    await client.build_pool("who painted the mona lisa")
                assert TOKEN not in str(info.value)
            # Without the CA the server's certificate is refused.
            async with RetrieverClient(srv.url, token=TOKEN, max_attempts=1, retry_window_s=1) as client:
                with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|unavailable"):
                    await client.build_pool("who painted the mona lisa")

        asyncio.run(calls())

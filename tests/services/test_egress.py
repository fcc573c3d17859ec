"""Client URLs reach public addresses only, checked on the address actually dialled.

A real scripted LLM server on a loopback socket stands for "an internal service". A name under
``.test`` (reserved, never resolved by real DNS) is given to the transport's injected resolver, so
a request that arrives at the server can only have been dialled at the address the check saw.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from api.settings import ApiSettings
from debate_worker.worker_settings import WorkerSettings
from services.chat_model import ChatMessage, LLMEgressRefused
from services.egress import (
    EgressRefused,
    PublicOnlyTransport,
    address_allowed,
    parse_networks,
    system_resolver,
)
from services.llm.client import OpenAIChatClient
from services.llm.factory import RoleModelsFromSettings
from services.llm.settings import LLMSettings
from tests.support.scripted_llm import ClosedPort, ScriptedLLM

pytestmark = pytest.mark.unit

MSG: list[ChatMessage] = [{"role": "user", "content": "What is the capital of France?"}]
NAME = "llm.parley.test"


def resolver(*answers: list[str]) -> tuple[Callable[[str, int], Awaitable[list[str]]], list[str]]:
    """A resolver that gives ``answers`` in turn (the last one again after that) and logs each lookup."""
    looked_up: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return answers[min(len(looked_up) - 1, len(answers) - 1)]

    return resolve, looked_up


def named_client(server: ScriptedLLM, transport: PublicOnlyTransport) -> OpenAIChatClient:
    url = f"http://{NAME}:{server.port}/v1"
    return OpenAIChatClient(url, "scripted", structured_mode="off", transport=transport)


@pytest.mark.parametrize(
    ("address", "networks", "allowed"),
    [
        ("8.8.8.8", [], True),
        ("2606:4700:4700::1111", [], True),
        ("127.0.0.1", [], False),
        ("10.1.2.3", [], False),
        ("169.254.169.254", [], False),  # cloud metadata
        ("::1", [], False),
        ("::ffff:127.0.0.1", [], False),  # IPv4-mapped loopback
        ("100.64.0.1", [], False),  # carrier-grade NAT
        ("127.0.0.1", ["127.0.0.0/8"], True),
        ("::ffff:10.1.2.3", ["10.0.0.0/8"], True),
        ("10.1.2.3", ["192.168.0.0/16"], False),
    ],
)
def test_addresses_are_public_or_listed(address: str, networks: list[str], allowed: bool) -> None:
    assert address_allowed(ipaddress.ip_address(address), parse_networks(networks)) is allowed


async def test_a_name_resolving_to_a_private_address_is_refused_before_any_connection(
    scripted: ScriptedLLM,
) -> None:
    resolve, looked_up = resolver(["127.0.0.1"])
    async with named_client(scripted, PublicOnlyTransport(resolver=resolve)) as client:
        with pytest.raises(LLMEgressRefused) as refused:
            await client.complete(MSG)
    assert NAME in refused.value.reason and "non-public address" in refused.value.reason
    assert looked_up == [NAME]  # refused once, not retried as if the server were down
    assert scripted.requests == []


async def test_a_listed_network_is_dialled_at_the_checked_address_with_the_name_as_host(
    scripted: ScriptedLLM,
) -> None:
    scripted.on("capital", "The answer is [Paris].")
    resolve, looked_up = resolver(["127.0.0.1"])
    transport = PublicOnlyTransport(["127.0.0.0/8"], resolver=resolve)
    async with named_client(scripted, transport) as client:
        out = await client.complete(MSG)
    assert out.text == "The answer is [Paris]."
    assert looked_up == [NAME]
    assert scripted.hosts == [f"{NAME}:{scripted.port}"]  # the name, not the address, as Host


async def test_every_address_of_a_name_must_pass(scripted: ScriptedLLM) -> None:
    resolve, _ = resolver(["8.8.8.8", "127.0.0.1"])
    async with named_client(scripted, PublicOnlyTransport(resolver=resolve)) as client:
        with pytest.raises(LLMEgressRefused):
            await client.complete(MSG)
    assert scripted.requests == []


async def test_a_name_that_rebinds_is_checked_again_on_every_request(scripted: ScriptedLLM) -> None:
    """DNS rebinding: allowed when first looked up, private on the next lookup. Each request dials
    the address its own check saw, so the second one is refused, not sent."""
    scripted.on("capital", "The answer is [Paris].")
    resolve, looked_up = resolver(["127.0.0.1"], ["10.9.9.9"])
    transport = PublicOnlyTransport(["127.0.0.0/8"], resolver=resolve)
    async with named_client(scripted, transport) as client:
        assert (await client.complete(MSG)).text == "The answer is [Paris]."
        with pytest.raises(LLMEgressRefused):
            await client.complete(MSG)
    assert looked_up == [NAME, NAME] and len(scripted.requests) == 1


async def test_literal_and_local_names_are_refused_without_a_lookup() -> None:
    resolve, looked_up = resolver(["8.8.8.8"])
    transport = PublicOnlyTransport(resolver=resolve)
    for host in ("127.0.0.1", "[::1]", "169.254.169.254", "localhost", "redis.internal", "nas.local"):
        with pytest.raises(EgressRefused):
            await transport.handle_async_request(httpx.Request("GET", f"http://{host}:8000/v1/models"))
    assert looked_up == []


async def test_the_system_resolver_is_used_by_default() -> None:
    """This machine's own name resolves (``/etc/hosts``) to an address of this machine: refused."""
    host = socket.gethostname()
    try:
        addresses = await system_resolver(host, 80)
    except OSError:
        pytest.skip(f"{host!r} does not resolve here")
    if all(ipaddress.ip_address(a).is_global for a in addresses):
        pytest.skip(f"{host!r} resolves to a public address here")
    with pytest.raises(EgressRefused):
        await PublicOnlyTransport().checked_address(host, 80)


def test_a_bad_network_fails_at_start() -> None:
    with pytest.raises(ValueError):
        PublicOnlyTransport(["not-a-network"])
    for settings in (WorkerSettings, ApiSettings):
        with pytest.raises(ValidationError, match="not-a-network"):
            settings(client_url_networks=["10.0.0.0/8", "not-a-network"])


async def test_only_client_urls_go_through_the_guard() -> None:
    """The worker's role models: the operator's endpoints are dialled as configured (loopback here);
    an agent's own ``base_url`` (a client's choice) goes through the public-only transport."""
    with ScriptedLLM() as operator, ScriptedLLM() as internal:
        operator.on("capital", "The answer is [Paris].")
        resolve, _ = resolver(["127.0.0.1"])
        settings = LLMSettings(base_url=operator.base_url, model="m", structured_output="off")
        models = RoleModelsFromSettings(settings, client_url_transport=PublicOnlyTransport(resolver=resolve))
        try:
            assert (await models.for_role("debater").complete(MSG)).text == "The answer is [Paris]."
            by_model = models.agent_client("debater", model="other-model")
            assert (await by_model.complete(MSG)).text == "The answer is [Paris]."
            own = models.agent_client("debater", base_url=f"http://{NAME}:{internal.port}/v1", model="m")
            with pytest.raises(LLMEgressRefused):
                await own.complete(MSG)
        finally:
            await models.aclose()
        assert len(operator.requests) == 2 and internal.requests == []


def self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``name`` only (no IP address in it) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


async def test_https_keeps_the_name_for_sni_and_the_certificate_check(tmp_path: Path) -> None:
    """Dialled at the checked address, a TLS connection still sends the name as SNI and verifies the
    certificate against the name: a certificate for the name only is accepted."""
    cert, key = self_signed(tmp_path, NAME)
    seen_sni: list[str | None] = []
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.sni_callback = lambda _sock, name, _ctx: seen_sni.append(name)

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = str(self.headers["Host"]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    server.socket = server_ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        client_ctx = ssl.create_default_context(cafile=str(cert))
        resolve, _ = resolver(["127.0.0.1"])
        transport = PublicOnlyTransport(
            ["127.0.0.0/8"], inner=httpx.AsyncHTTPTransport(verify=client_ctx), resolver=resolve
        )
        async with httpx.AsyncClient(transport=transport) as client:
            resp = await client.get(f"https://{NAME}:{port}/")
        assert resp.status_code == 200 and resp.text == f"{NAME}:{port}"
        assert seen_sni == [NAME]
        # Without the name, the same certificate does not verify for the bare address.
        async with httpx.AsyncClient(verify=client_ctx) as plain:
            with pytest.raises(httpx.ConnectError):
                await plain.get(f"https://127.0.0.1:{port}/")
    finally:
        server.shutdown()
        server.server_close()


async def test_client_urls_never_go_through_an_environment_proxy(
    scripted: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy would dial an address the check never saw: with HTTP(S)_PROXY set, a client URL is
    still checked and dialled directly (the proxy here listens nowhere, so using it would fail)."""
    dead_proxy = ClosedPort()
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, dead_proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    scripted.on("capital", "The answer is [Paris].")
    resolve, looked_up = resolver(["127.0.0.1"])
    settings = LLMSettings(base_url="http://operator.parley.test/v1", model="m", structured_output="off")
    transport = PublicOnlyTransport(["127.0.0.0/8"], resolver=resolve)
    models = RoleModelsFromSettings(settings, client_url_transport=transport)
    try:
        own = models.agent_client("debater", base_url=f"http://{NAME}:{scripted.port}/v1", model="m")
        assert (await own.complete(MSG)).text == "The answer is [Paris]."
    finally:
        await models.aclose()
        dead_proxy.release()
    assert looked_up == [NAME] and scripted.hosts == [f"{NAME}:{scripted.port}"]

"""What an unknown caller can make the gateway do: answer from the headers, and nothing more.

Real redis-server and the gateway under uvicorn, spoken to over raw sockets where the point is what
the gateway does before a body has arrived: an unauthenticated upload announcing 32 MiB is answered
401 at once (nothing of it sent), a key over its rate limit gets 429 the same way, a slow sender is
cut off, and wrong keys from one address never lock out the valid keys used from it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import KEY_A, api_settings
from tests.api.support import ApiServer, RedisServer
from tests.support.scripted_llm import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer) -> Iterator[ApiServer]:
    settings = api_settings(
        redis_server.url, key_prefix="unknown", rate_limit_per_minute=5, body_timeout_s=2.0
    )
    with ApiServer(settings) as server:
        yield server


def headers_only(server: ApiServer, path: str, length: int, authorization: str | None) -> tuple[float, bytes]:
    """Send a POST's headers announcing ``length`` body bytes, none of them; the reply and its delay."""
    host, port = server.url.removeprefix("http://").split(":")
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    if authorization:
        lines.append(f"Authorization: {authorization}")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        reply = sock.recv(65536)
        return time.monotonic() - started, reply


def test_an_unauthenticated_32_mib_upload_is_refused_before_its_body(gateway: ApiServer) -> None:
    took, reply = headers_only(gateway, "/v1/batches", 32 << 20, None)
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    assert b"application/problem+json" in reply
    assert took < 2.0
    took, reply = headers_only(gateway, "/v1/debates", 1 << 20, "Bearer wrong")
    assert reply.startswith(b"HTTP/1.1 401") and took < 2.0
    # The OpenAI-compatible route too, answering in OpenAI's error shape.
    took, reply = headers_only(gateway, "/v1/chat/completions", 32 << 20, None)
    assert reply.startswith(b"HTTP/1.1 401") and took < 2.0
    assert b'"error"' in reply and b"invalid_api_key" in reply


def test_the_rate_limit_is_applied_before_the_body(redis_server: RedisServer) -> None:
    settings = api_settings(redis_server.url, key_prefix="ratebody", rate_limit_per_minute=2)
    with ApiServer(settings) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_A}"}) as alice:
            assert [alice.get("/v1/usage").status_code for _ in range(2)] == [200, 200]
        took, reply = headers_only(server, "/v1/batches", 32 << 20, f"Bearer {KEY_A}")
    assert reply.startswith(b"HTTP/1.1 429") and b"retry-after" in reply.lower()
    assert took < 2.0


def test_a_slow_sender_is_cut_off(gateway: ApiServer) -> None:
    host, port = gateway.url.removeprefix("http://").split(":")
    body = json.dumps({"question": "Who painted the Mona Lisa?"}).encode()
    head = (
        f"POST /v1/debates HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {KEY_A}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(head.encode() + body[:5])  # then nothing: a sender that trickles or stalls
        reply = sock.recv(65536)
        took = time.monotonic() - started
    status = int(reply.split(b" ", 2)[1])
    print(reply[:300])
    assert 400 <= status < 500 and status != 401, reply[:300]
    assert 1.5 < took < 5.0


def test_wrong_keys_from_one_address_do_not_lock_out_a_valid_key(gateway: ApiServer) -> None:
    """The issue's attack: 300 wrong-key requests, then the valid key from the same address."""
    with httpx.Client(base_url=gateway.url, timeout=30) as anyone:
        mine = {"Authorization": f"Bearer {KEY_A}"}
        assert anyone.get("/v1/debates/job_x", headers=mine).status_code == 404  # in use here
        codes = {
            anyone.get("/v1/debates/job_x", headers={"Authorization": "Bearer wrong"}).status_code
            for _ in range(300)
        }
        assert codes == {401}  # one wrong key repeated is no guessing: 401 every time, never 429
        guesses = {
            anyone.get("/v1/debates/job_x", headers={"Authorization": f"Bearer guess-{i}"}).status_code
            for i in range(300)
        }
        assert guesses == {401, 429}
        valid = anyone.get("/v1/debates/job_x", headers=mine)
    assert valid.status_code == 404, valid.text  # wrong keys are not charged to alice's rate limit


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at ``port`` (from /proc/net/tcp; Linux)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port_hex = local.split(":")
        if state == "0A" and int(port_hex, 16) == port:
            out.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return out


def test_gateway_metrics_are_not_public(redis_server: RedisServer) -> None:
    """Without a token /metrics is not on the API port but on a loopback-only port of its own; with
    one, the API port answers only scrapes that send it."""
    port = free_port()
    settings = api_settings(redis_server.url, key_prefix="metrics", metrics_port=port)
    with ApiServer(settings) as server:
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 404
        scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert scrape.status_code == 200 and "parley_queue_depth" in scrape.text
        assert listening_addresses(port) == {"127.0.0.1"}
    settings = api_settings(redis_server.url, key_prefix="metrics", metrics_port=0, metrics_token="scrape-me")
    with ApiServer(settings) as server:
        refused = httpx.get(f"{server.url}/metrics", timeout=10)
        assert refused.status_code == 401 and refused.headers["content-type"] == "application/problem+json"
        wrong = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=10)
        assert wrong.status_code == 401
        ok = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer scrape-me"}, timeout=10)
        assert ok.status_code == 200 and "parley_http_requests_total" in ok.text

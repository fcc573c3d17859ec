"""The readiness and reuse checks of ``parley up``: is a port taken, does an HTTP health check answer,
does Redis answer, is a Parley retriever (with its index) already serving, has the Celery worker
started. httpx and redis load inside the checks, so ``parley --help`` stays light."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import redis


def port_in_use(host: str, port: int) -> bool:
    """Whether ``port`` cannot be bound on ``host``: a part that would fail there is refused first."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def http_ok(url: str) -> bool:
    """A readiness probe: 2xx from ``url`` within 2 s."""
    try:
        return httpx.get(url, timeout=2.0).is_success
    except httpx.HTTPError:
        return False


def redis_ok(url: str) -> bool:
    """A readiness probe: Redis at ``url`` answers PING within 2 s."""
    # lazy like httpx and redis above: the connection factory loads redis-py's sentinel support
    from services.redis_connect import RedisSpec, sync_client

    client = sync_client(RedisSpec("redis_url", url), socket_timeout=2, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    except redis.exceptions.RedisError:
        return False
    finally:
        client.close()


def retriever_at(port: int) -> bool:
    """A Parley retriever already serving on ``port`` (it keeps the store locked: reuse it)."""
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(body, dict) and "index_ready" in body


def index_ready(retriever_url: str) -> bool:
    """Whether the retriever reports a built index (``index_ready`` of its ``/healthz``)."""
    try:
        return bool(httpx.get(retriever_url + "/healthz", timeout=5.0).json().get("index_ready"))
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


def celery_ready(log: Path) -> bool:
    """Whether the worker's log says Celery is ready (it has no port to probe)."""
    try:
        text = log.read_bytes()
    except OSError:
        return False
    return b" ready." in text or b'"ready"' in text

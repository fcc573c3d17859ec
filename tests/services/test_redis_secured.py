"""Redis secured between hosts: TLS with a private CA, an ACL user with a password, the default user off.

A real redis-server listens on a TLS port only (``--port 0``); the gateway and a real Celery worker
reach it as ``rediss://parley:…@127.0.0.1:PORT/0`` with the CA file, the worker reading its URL from a
file (``PARLEY_WORKER_REDIS_URL_FILE``, as compose mounts secrets), and a debate runs end to end. A
wrong password, an unknown user or a CA that did not sign the server's certificate stop ``parley
worker`` and ``parley api`` at start with a message that names the setting and never the password.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from parley_testing.processes import ROOT, redis_binary
from parley_testing.redis_topologies import ThrowawayCA, TlsRedis
from tests.api.conftest import KEY_A, KEYS, api_settings
from tests.api.support import ApiServer, WorkerProcess, script_agreeing, wait_status, worker_env
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASSWORD = "redis-pw-9c2e7f1b-SECRET"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return ThrowawayCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, ca: ThrowawayCA) -> Iterator[TlsRedis]:
    if redis_binary() is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    # The ACL the deployment docs recommend: everything but the dangerous commands (CONFIG, KEYS, …).
    server = TlsRedis(
        tmp_path_factory.mktemp("tls-redis"),
        ca,
        user="parley",
        password=PASSWORD,
        commands=("+@all", "-@dangerous"),
    ).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_debate_runs_end_to_end_over_tls_as_an_acl_user(
    tls_redis: TlsRedis, ca: ThrowawayCA, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url_file = tmp_path / "redis_url"
    url_file.write_text(tls_redis.url + "\n")  # a secret file ends with a newline
    with ScriptedLLM() as llm:
        script_agreeing(llm)
        env = worker_env("unused", llm.base_url, PARLEY_WORKER_REDIS_TLS_CA_FILE=str(ca.cert_file))
        del env["PARLEY_WORKER_REDIS_URL"]
        env["PARLEY_WORKER_REDIS_URL_FILE"] = str(url_file)
        settings = api_settings(
            tls_redis.url, keys=KEYS, redis_tls_ca_file=ca.cert_file, metrics_token=SecretStr("scrape")
        )
        seen: list[str] = []
        log = tmp_path / "worker.log"
        with ApiServer(settings) as api, WorkerProcess(env, log):
            with httpx.Client(
                base_url=api.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30
            ) as c:
                accepted = c.post(
                    "/v1/debates", json={"question": "Capital of France?", "config": {"knowledge": "none"}}
                )
                assert accepted.status_code == 202, accepted.text
                job_id = accepted.json()["job_id"]
                done = wait_status(c, job_id, {"completed", "failed"})
                assert done["status"] == "completed", done
                assert c.get("/healthz").status_code == 200
                # Everything a client or a scraper can read: answers, errors, the document, metrics.
                for path in (
                    "/healthz",
                    "/openapi.json",
                    f"/v1/debates/{job_id}",
                    "/v1/usage",
                    "/v1/nothing",
                ):
                    seen.append(c.get(path).text)
                seen.append(c.get("/metrics", headers={"Authorization": "Bearer scrape"}).text)
                seen.append(c.post("/v1/debates", json={"question": ""}).text)  # a validation error
            # The health check a secured worker host runs: Celery's ping through the worker's own
            # settings (TLS files, URL from its file), not a plain broker URL.
            node = f"w1@{socket.gethostname()}"
            ping = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "debate_worker.celery_app",
                    "inspect",
                    "ping",
                    "-d",
                    node,
                ],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert ping.returncode == 0 and "pong" in ping.stdout, ping.stdout + ping.stderr[-2000:]
            seen.append(ping.stdout + ping.stderr)
            worker_log = log.read_text(errors="replace")
    # Celery's banner shows the broker (TLS, as the ACL user) with the password masked.
    assert "rediss://parley:**@127.0.0.1" in worker_log
    assert PASSWORD not in worker_log
    assert PASSWORD not in caplog.text
    assert all(PASSWORD not in text for text in seen)
    assert PASSWORD not in _redis_dump(tls_redis)
    # Nothing reached Redis over plain TCP: its only port is the TLS one (``TlsRedis`` starts it so).


def _redis_dump(server: TlsRedis) -> str:
    """Every key and value in Redis, as text (hashes, lists, sets, streams alike)."""
    r = server.client()
    out: list[str] = []
    try:
        for key in r.scan_iter("*"):
            out.append(key)
            kind = r.type(key)
            if kind == "hash":
                out.append(repr(r.hgetall(key)))
            elif kind == "string":
                out.append(repr(r.get(key)))
            elif kind == "list":
                out.append(repr(r.lrange(key, 0, -1)))
            elif kind == "stream":
                out.append(repr(r.xrange(key)))
    finally:
        r.close()
    return "\n".join(out)


def _start(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parley_cli", *command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong password", "authentication failed for user 'parley'"),
        ("unknown user", "authentication failed for user 'mallory'"),
        ("wrong CA", "TLS handshake with rediss://parley:***@127.0.0.1"),
    ],
)
def test_bad_credentials_stop_the_worker_and_the_gateway_at_start(
    tls_redis: TlsRedis, ca: ThrowawayCA, tmp_path: Path, case: str, expected: str
) -> None:
    url, ca_file = tls_redis.url, ca.cert_file
    if case == "wrong password":
        url = url.replace(PASSWORD, "not-the-" + PASSWORD)
    elif case == "unknown user":
        url = url.replace("parley:", "mallory:")
    else:
        ca_file = ThrowawayCA(tmp_path / "other", name="other-ca").cert_file
    env = worker_env(url, "http://127.0.0.1:9/v1", PARLEY_WORKER_REDIS_TLS_CA_FILE=str(ca_file))
    env.update({"PARLEY_API_REDIS_URL": url, "PARLEY_API_REDIS_TLS_CA_FILE": str(ca_file)})
    for command, variable in (
        (["worker", "--pool=solo"], "PARLEY_WORKER_REDIS_URL"),
        (["api", "--port", "0"], "PARLEY_API_REDIS_URL"),
    ):
        done = _start(command, env)
        assert done.returncode == 2, (command, done.stdout[-2000:], done.stderr[-2000:])
        assert f"{variable}: {expected}" in done.stderr, done.stderr
        assert PASSWORD not in done.stderr + done.stdout

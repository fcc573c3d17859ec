"""The Redis connection factory's reading of settings, without a server: URL forms, TLS and Sentinel
options for redis-py and for Celery, redaction, and secrets read from ``*_FILE`` variables."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from api.settings import ApiSettings
from debate_worker.worker_settings import WorkerSettings
from services.redis_connect import (
    RedisConfigError,
    RedisSpec,
    RedisTls,
    async_client,
    redact_redis_url,
    sync_client,
)
from services.settings import RetrieverClientSettings
from services.task_queue import create_publisher

pytestmark = pytest.mark.unit

PASSWORD = "pw-5f1e-SECRET"


def test_redaction_hides_every_password_and_keeps_the_rest() -> None:
    assert redact_redis_url(f"rediss://parley:{PASSWORD}@h:6380/2") == "rediss://parley:***@h:6380/2"
    both = redact_redis_url(f"sentinel://:{PASSWORD}@a:26379;sentinel://u:{PASSWORD}@b:26379/1")
    assert PASSWORD not in both and both == "sentinel://:***@a:26379;sentinel://u:***@b:26379/1"
    assert redact_redis_url("redis://h:6379/0") == "redis://h:6379/0"


def test_sentinel_url_reads_like_kombu_credentials_and_database_from_the_first() -> None:
    spec = RedisSpec(
        "PARLEY_API_REDIS_URL", f"sentinel://u:{PASSWORD}@a:1/3;sentinel://b", sentinel_master="m"
    )
    target = spec.sentinel_target()
    assert target.sentinels == (("a", 1), ("b", 26379))
    assert (target.username, target.password, target.db) == ("u", PASSWORD, 3)
    assert PASSWORD not in repr(spec) and PASSWORD not in repr(target)
    # Celery would ignore a database or password on a later URL: said at once instead.
    with pytest.raises(RedisConfigError, match="on the first sentinel:// URL") as info:
        RedisSpec("PARLEY_API_REDIS_URL", f"sentinel://a:1;sentinel://:{PASSWORD}@b:2/3", sentinel_master="m")
    assert PASSWORD not in str(info.value)


def test_a_sentinel_url_without_a_master_name_is_refused_naming_the_variable() -> None:
    with pytest.raises(RedisConfigError, match="PARLEY_WORKER_REDIS_SENTINEL_MASTER"):
        RedisSpec("PARLEY_WORKER_REDIS_URL", "sentinel://a:26379")
    with pytest.raises(ValidationError) as info:
        WorkerSettings(redis_url=f"sentinel://:{PASSWORD}@a:26379")
    assert "PARLEY_WORKER_REDIS_SENTINEL_MASTER" in str(info.value)
    assert PASSWORD not in str(info.value)  # the input is never repeated


def test_tls_files_with_a_plain_url_are_refused() -> None:
    with pytest.raises(RedisConfigError, match="use rediss://"):
        RedisSpec("PARLEY_API_REDIS_URL", "redis://h:6379/0", RedisTls(ca_file=Path("ca.pem")))
    with pytest.raises(RedisConfigError, match="scheme 'http'"):
        RedisSpec("PARLEY_API_REDIS_URL", "http://h:6379/0")


def test_celery_gets_the_same_tls_files_and_master_name(tmp_path: Path) -> None:
    ca, cert, key = tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key"
    settings = WorkerSettings(
        redis_url=f"rediss://parley:{PASSWORD}@h:6380/0",
        redis_tls_ca_file=ca,
        redis_tls_cert_file=cert,
        redis_tls_key_file=key,
    )
    conf = settings.celery_conf()
    assert conf["broker_url"].startswith("rediss://")
    assert conf["broker_use_ssl"] == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": str(ca),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
    }
    assert conf["broker_transport_options"]["visibility_timeout"] == settings.visibility_timeout
    backend = settings.redis_spec().celery_backend_conf()
    assert backend["redis_backend_use_ssl"] == conf["broker_use_ssl"]

    sentinel = WorkerSettings(redis_url="sentinel://a:26379/0;sentinel://b:26379", redis_sentinel_master="m")
    options = sentinel.celery_conf()["broker_transport_options"]
    assert options["master_name"] == "m" and "visibility_timeout" in options
    assert "broker_use_ssl" not in sentinel.celery_conf()


def test_the_gateways_publisher_uses_the_broker_spec() -> None:
    settings = ApiSettings(
        redis_url="redis://h:6379/0",
        broker_url="sentinel://a:26379/0;sentinel://b:26379",
        redis_sentinel_master="m",
    )
    assert settings.broker_spec().setting == "PARLEY_API_BROKER_URL"
    app = create_publisher(settings.broker_spec(), connection_timeout_s=2)
    assert app.conf.broker_transport_options == {"master_name": "m", "socket_connect_timeout": 2}
    assert app.conf.broker_url.startswith("sentinel://")


def test_clients_are_built_without_connecting() -> None:
    spec = RedisSpec("X_REDIS_URL", "sentinel://127.0.0.1:1/4;sentinel://127.0.0.1:2", sentinel_master="m")
    client = sync_client(spec, socket_timeout=1)
    assert client.connection_pool.connection_kwargs["db"] == 4
    client.close()
    aclient = async_client(spec, decode_responses=True)
    assert aclient.connection_pool.connection_kwargs["db"] == 4
    tls = RedisSpec("X_REDIS_URL", "rediss://u:p@127.0.0.1:1/0", RedisTls(ca_file=Path("/ca.pem")))
    pooled = async_client(tls, blocking_timeout_s=1, max_connections=3)
    assert pooled.connection_pool.connection_kwargs["ssl_ca_certs"] == "/ca.pem"


def test_any_variable_can_come_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = tmp_path / "redis_url"
    url.write_text(f"rediss://parley:{PASSWORD}@h:6380/0\n")
    token = tmp_path / "token"
    token.write_text("retriever-token\n")
    monkeypatch.setenv("PARLEY_WORKER_REDIS_URL_FILE", str(url))
    monkeypatch.setenv("PARLEY_RETRIEVER_TOKEN_FILE", str(token))
    assert WorkerSettings().redis_url == f"rediss://parley:{PASSWORD}@h:6380/0"  # the newline dropped
    secret = RetrieverClientSettings().token
    assert secret is not None and secret.get_secret_value() == "retriever-token"

    monkeypatch.setenv("PARLEY_WORKER_REDIS_URL", "")  # a compose override clearing the base value
    assert WorkerSettings().redis_url.startswith("rediss://parley:")
    monkeypatch.setenv("PARLEY_WORKER_REDIS_URL", "redis://h:6379/0")
    with pytest.raises(Exception, match="PARLEY_WORKER_REDIS_URL and PARLEY_WORKER_REDIS_URL_FILE"):
        WorkerSettings()
    monkeypatch.delenv("PARLEY_WORKER_REDIS_URL")
    monkeypatch.setenv("PARLEY_WORKER_REDIS_URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(Exception, match="PARLEY_WORKER_REDIS_URL_FILE: cannot read") as info:
        WorkerSettings()
    assert PASSWORD not in str(info.value)

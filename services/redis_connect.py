"""The one place Parley's processes make Redis clients: plain, TLS with ACL users, or through Sentinel.

Every Redis connection of the gateway, the workers, their sweep, the LLM replica load and the Celery
broker is built here from a ``RedisSpec``: the URL of one setting (named in every error, never shown
with its password) plus the TLS files and the Sentinel master name of the same process's settings.

URL forms:

- ``redis://[user:password@]host:port/db``: plain TCP, optionally an ACL user.
- ``rediss://[user:password@]host:port/db``: TLS; the server certificate is checked against
  ``redis_tls_ca_file`` (the system's CAs when unset); ``redis_tls_cert_file`` and
  ``redis_tls_key_file`` add a client certificate.
- ``sentinel://[user:password@]host1:26379/db;sentinel://host2:26379;...``: the primary of the group
  ``redis_sentinel_master`` as the sentinels name it now (kombu's broker URL form). User, password and
  database come from the first URL and are those of the Redis servers, not of the sentinels. With
  ``redis_tls_ca_file`` set, the servers and the sentinels are both reached over TLS. A failover is
  followed: a connection that breaks asks the sentinels for the primary again.

A client built here reconnects by itself; what a failover can lose is the writes the old primary
acknowledged but had not yet sent to its replica (see ``wait_for_replicas``).
"""

from __future__ import annotations

import logging
import ssl
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as asentinel
import redis.sentinel as ssentinel

from services.errors import ParleyError

log = logging.getLogger("parley.redis")

SENTINEL_SCHEME = "sentinel"
_SCHEMES = ("redis", "rediss", "unix", SENTINEL_SCHEME)


class RedisConfigError(ParleyError):
    """A Redis setting that cannot work (bad URL, refused credentials, a certificate that does not
    verify): the process stops at start with this message, which names the setting and never the
    password."""


class NotReplicated(redis.exceptions.ConnectionError):
    """Writes that had to reach ``redis_wait_replicas`` replicas did not within the wait: what a
    failover now would lose. A ``ConnectionError`` so the gateway answers 503 with Retry-After."""


@dataclass(frozen=True)
class RedisTls:
    """TLS files: the CA that signs the servers' certificates, and an optional client certificate."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    @property
    def configured(self) -> bool:
        return self.ca_file is not None or self.cert_file is not None

    def client_kwargs(self) -> dict[str, Any]:
        """redis-py's ``ssl_*`` arguments (without ``ssl`` itself)."""
        return {"ssl_cert_reqs": "required", **self._files()}

    def kombu_ssl(self) -> dict[str, Any]:
        """Celery's ``broker_use_ssl`` / ``redis_backend_use_ssl`` mapping for the same files (kombu
        wants the ``ssl`` module's constant where redis-py takes its name)."""
        return {"ssl_cert_reqs": ssl.CERT_REQUIRED, **self._files()}

    def _files(self) -> dict[str, str]:
        files = {"ssl_ca_certs": self.ca_file, "ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        return {name: str(path) for name, path in files.items() if path is not None}


@dataclass(frozen=True)
class SentinelTarget:
    """A parsed ``sentinel://`` URL: where the sentinels are and how to talk to the servers."""

    sentinels: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None = field(repr=False)
    db: int


@dataclass(frozen=True)
class RedisSpec:
    """How one process reaches one Redis (its job store or its broker), built from its settings."""

    setting: str  # the environment variable of the URL, named in errors
    url: str = field(repr=False)
    tls: RedisTls = field(default_factory=RedisTls)
    sentinel_master: str | None = None

    def __post_init__(self) -> None:
        scheme = self.scheme
        if scheme not in _SCHEMES:
            raise RedisConfigError(
                f"{self.setting}: scheme {scheme!r} is not one of redis://, rediss://, unix:// or "
                f"sentinel:// ({self.redacted})"
            )
        if self.is_sentinel:
            if not self.sentinel_master:
                raise RedisConfigError(
                    f"{self.setting}: a sentinel:// URL needs the name of the group the sentinels "
                    f"watch ({self.related('REDIS_SENTINEL_MASTER')})"
                )
            self.sentinel_target()  # parses, or says what is wrong
        elif self.tls.configured and scheme != "rediss":
            raise RedisConfigError(
                f"{self.setting}: TLS files are set but the URL is {scheme}://; use rediss:// "
                f"({self.redacted})"
            )
        if self.tls.key_file is not None and self.tls.cert_file is None:
            raise RedisConfigError(f"{self.setting}: a TLS key file without a certificate file")

    def related(self, name: str) -> str:
        """The variable ``name`` (``REDIS_TLS_CA_FILE``) of the process whose URL setting this is."""
        for suffix in ("REDIS_URL", "BROKER_URL"):
            if self.setting.endswith(suffix):
                return self.setting.removesuffix(suffix) + name
        return name

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower() if "://" in self.url else ""

    @property
    def is_sentinel(self) -> bool:
        return self.scheme == SENTINEL_SCHEME

    @property
    def uses_tls(self) -> bool:
        return self.scheme == "rediss" or (self.is_sentinel and self.tls.configured)

    @property
    def username(self) -> str | None:
        if self.is_sentinel:
            return self.sentinel_target().username
        return unquote(urlsplit(self.url).username or "") or None

    @property
    def redacted(self) -> str:
        """The URL with every password replaced by ``***`` (safe for logs and errors)."""
        return redact_redis_url(self.url)

    def sentinel_target(self) -> SentinelTarget:
        """The sentinels and the servers' credentials of a ``sentinel://`` URL (kombu's reading: user,
        password and database from the first URL)."""
        sentinels: list[tuple[str, int]] = []
        first = None
        for part in self.url.split(";"):
            part = part.strip()
            if not part:
                continue
            parts = urlsplit(part)
            if parts.scheme.lower() != SENTINEL_SCHEME or not parts.hostname:
                raise RedisConfigError(
                    f"{self.setting}: expected sentinel://host:port;sentinel://host:port/db, got "
                    f"{redact_redis_url(part)}"
                )
            try:
                port = parts.port or 26379
            except ValueError:
                raise RedisConfigError(f"{self.setting}: bad port in {redact_redis_url(part)}") from None
            sentinels.append((parts.hostname, port))
            if first is not None and (parts.path.strip("/") or parts.username or parts.password):
                # Celery's broker (kombu) reads them from the first URL only and would ignore these.
                raise RedisConfigError(
                    f"{self.setting}: put user, password and database on the first sentinel:// URL "
                    f"only ({redact_redis_url(self.url)})"
                )
            first = first or parts
        assert first is not None
        path = first.path.strip("/")
        if path and not path.isdigit():
            raise RedisConfigError(f"{self.setting}: the database must be a number, got {path!r}")
        return SentinelTarget(
            tuple(sentinels),
            unquote(first.username) if first.username else None,
            unquote(first.password) if first.password else None,
            int(path or 0),
        )

    # -- Celery ----------------------------------------------------------------------------------
    def celery_broker_conf(self) -> dict[str, Any]:
        """``broker_url`` and the options that make kombu connect the way this spec says: TLS files
        (``broker_use_ssl``), the Sentinel master (``broker_transport_options``). The caller merges
        ``broker_transport_options`` with its own."""
        conf: dict[str, Any] = {"broker_url": self.url}
        options: dict[str, Any] = {}
        if self.uses_tls:
            conf["broker_use_ssl"] = self.tls.kombu_ssl()
        if self.is_sentinel:
            options["master_name"] = self.sentinel_master
            if self.tls.configured:
                options["sentinel_kwargs"] = {"ssl": True, **self.tls.client_kwargs()}
        conf["broker_transport_options"] = options
        return conf

    def celery_backend_conf(self) -> dict[str, Any]:
        """The same for a Redis result backend (``result_backend``, ``redis_backend_use_ssl``,
        ``result_backend_transport_options``), should one be configured."""
        conf: dict[str, Any] = {"result_backend": self.url}
        if self.uses_tls:
            conf["redis_backend_use_ssl"] = self.tls.kombu_ssl()
        if self.is_sentinel:
            conf["result_backend_transport_options"] = {"master_name": self.sentinel_master}
        return conf


def redact_redis_url(url: str) -> str:
    """``url`` (each ``;``-separated part) with its password replaced by ``***``."""
    out = []
    for part in url.split(";"):
        parts = urlsplit(part)
        if parts.password is not None:
            user = parts.username or ""
            host = parts.netloc.rsplit("@", 1)[1]
            part = part.replace(parts.netloc, f"{user}:***@{host}", 1)
        out.append(part)
    return ";".join(out)


# -- clients ------------------------------------------------------------------------------------
def sync_client(spec: RedisSpec, **kwargs: Any) -> redis.Redis:
    """A blocking client (socket timeouts etc. in ``kwargs``, as redis-py names them)."""
    if spec.is_sentinel:
        manager = ssentinel.Sentinel(
            spec.sentinel_target().sentinels,
            sentinel_kwargs=_sentinel_kwargs(spec, kwargs),
            **_server_kwargs(spec, kwargs),
        )
        return manager.master_for(spec.sentinel_master or "", redis_class=redis.Redis)
    return redis.Redis.from_url(spec.url, **_tls_kwargs(spec), **kwargs)


def async_client(
    spec: RedisSpec, *, blocking_timeout_s: float | None = None, **kwargs: Any
) -> aioredis.Redis:
    """An asyncio client. With ``blocking_timeout_s`` and ``max_connections`` a request beyond the
    pool's size waits that long for a connection (a plain pool fails at once); through Sentinel the
    pool does not wait, the callers' own caps keep below its size."""
    if spec.is_sentinel:
        manager = asentinel.Sentinel(
            spec.sentinel_target().sentinels,
            sentinel_kwargs=_sentinel_kwargs(spec, kwargs),
            **_server_kwargs(spec, kwargs),
        )
        return manager.master_for(spec.sentinel_master or "", redis_class=aioredis.Redis)
    if blocking_timeout_s is not None:
        pool: aioredis.BlockingConnectionPool = aioredis.BlockingConnectionPool.from_url(
            spec.url, timeout=blocking_timeout_s, **_tls_kwargs(spec), **kwargs
        )
        return aioredis.Redis.from_pool(pool)  # type: ignore[attr-defined]  # stubs predate redis 5
    return aioredis.Redis.from_url(spec.url, **_tls_kwargs(spec), **kwargs)


def _tls_kwargs(spec: RedisSpec) -> dict[str, Any]:
    return spec.tls.client_kwargs() if spec.uses_tls else {}


def _server_kwargs(spec: RedisSpec, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    target = spec.sentinel_target()
    out = dict(kwargs)
    out.update({"db": target.db, "username": target.username, "password": target.password})
    if spec.uses_tls:
        out["ssl"] = True
        out.update(spec.tls.client_kwargs())
    return out


def _sentinel_kwargs(spec: RedisSpec, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    # The sentinels answer quickly or not at all: the same connect and socket timeouts as the servers.
    out = {k: kwargs[k] for k in ("socket_timeout", "socket_connect_timeout") if kwargs.get(k) is not None}
    if spec.uses_tls:
        out["ssl"] = True
        out.update(spec.tls.client_kwargs())
    return out


# -- start-up check -----------------------------------------------------------------------------
def check_connection(spec: RedisSpec, *, timeout_s: float = 5.0) -> str | None:
    """PING through ``spec`` once, at process start.

    Refused credentials, an unknown ACL user, a certificate that does not verify or an unknown Sentinel
    master raise ``RedisConfigError`` naming the setting (a process started with them could never
    work); a Redis that is only unreachable returns a warning instead (it may still be starting, and
    the clients reconnect). Returns None when Redis answered.
    """
    client = sync_client(spec, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        client.ping()
    except redis.exceptions.AuthenticationError:
        raise RedisConfigError(_auth_failed(spec)) from None
    except redis.exceptions.ResponseError as exc:
        text = str(exc)
        if text.startswith(("WRONGPASS", "NOAUTH", "NOPERM")) or "AUTH" in text.upper():
            raise RedisConfigError(f"{_auth_failed(spec)}: {_scrub(text, spec)}") from None
        raise
    except ssentinel.MasterNotFoundError:
        target = spec.sentinel_target()
        where = ", ".join(f"{h}:{p}" for h, p in target.sentinels)
        return (
            f"{spec.setting}: no sentinel at {where} names a primary for "
            f"{spec.sentinel_master!r} yet (or none is reachable)"
        )
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        text = _scrub(str(exc), spec)
        if _is_tls_failure(exc):
            raise RedisConfigError(
                f"{spec.setting}: TLS handshake with {spec.redacted} failed: {text} (check "
                f"{spec.related('REDIS_TLS_CA_FILE')}, {spec.related('REDIS_TLS_CERT_FILE')} and "
                f"{spec.related('REDIS_TLS_KEY_FILE')})"
            ) from None
        return f"{spec.setting}: Redis at {spec.redacted} is not reachable yet: {text}"
    finally:
        client.close()
    return None


def _auth_failed(spec: RedisSpec) -> str:
    user = spec.username or "default"
    return (
        f"{spec.setting}: authentication failed for user {user!r} "
        "(wrong password, unknown or disabled ACL user)"
    )


def _is_tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    return "SSL" in text or "certificate" in text


def _scrub(text: str, spec: RedisSpec) -> str:
    """``text`` with the spec's password removed (a library's message should never hold it, but the
    message goes to logs, so it is checked)."""
    password = (
        spec.sentinel_target().password if spec.is_sentinel else unquote(urlsplit(spec.url).password or "")
    )
    return text.replace(password, "***") if password else text


# -- replication --------------------------------------------------------------------------------
async def wait_for_replicas(
    client: aioredis.Redis, marker_key: str, replicas: int, timeout_ms: int, *, what: str = "a write"
) -> int:
    """Block until ``replicas`` replicas hold every write this primary acknowledged so far.

    Redis replicates asynchronously, so a failover loses the writes the old primary acknowledged but
    had not sent yet; calling this after a write that must survive closes that window at the cost of a
    round trip to a replica. ``WAIT`` counts the writes of its own connection, and the writes just made
    may have gone over another connection of the pool: one small write (``marker_key``, lapsing after
    a minute) on the connection that then waits puts its offset past them, as the replication stream
    is one ordered stream. Returns how many replicas acknowledged; with ``replicas`` 0 it does nothing.
    Fewer within ``timeout_ms`` is logged as a warning naming ``what``: the write stands (it is not
    undone), but a failover now could lose it.
    """
    if replicas <= 0:
        return 0
    async with client.client() as one:  # a client of one connection
        await one.set(marker_key, "1", px=60_000)
        acked = int(await one.execute_command("WAIT", replicas, timeout_ms))
    if acked < replicas:
        log.warning(
            "%s is on %d of %d replicas after %d ms: a failover now could lose it",
            what,
            acked,
            replicas,
            timeout_ms,
        )
    return acked


# -- from settings ------------------------------------------------------------------------------
class RedisSettings(Protocol):
    """The Redis fields a process's settings carry (``ApiSettings``, ``WorkerSettings``)."""

    @property
    def redis_tls_ca_file(self) -> Path | None: ...
    @property
    def redis_tls_cert_file(self) -> Path | None: ...
    @property
    def redis_tls_key_file(self) -> Path | None: ...
    @property
    def redis_sentinel_master(self) -> str | None: ...


def spec_from_settings(settings: RedisSettings, variable: str, url: str) -> RedisSpec:
    """The spec of the URL setting ``variable`` (its value ``url``) with the process's TLS files and
    Sentinel master, which its job store and its broker share."""
    return RedisSpec(
        variable,
        url,
        RedisTls(settings.redis_tls_ca_file, settings.redis_tls_cert_file, settings.redis_tls_key_file),
        settings.redis_sentinel_master,
    )


REDIS_URL_HELP = (
    "redis://[user:password@]host:port/db, rediss://… (TLS) or "
    "sentinel://[user:password@]host:26379/db;sentinel://host2:26379 (with redis_sentinel_master)"
)


def check_at_start(*specs: RedisSpec, timeout_s: float = 5.0) -> list[str]:
    """``check_connection`` for each distinct spec (job store and broker are often one Redis): raises
    ``RedisConfigError`` for the first that can never work, returns the warnings of those that do not
    answer yet."""
    warnings: list[str] = []
    seen: set[tuple[str, RedisTls, str | None]] = set()
    for spec in specs:
        key = (spec.url, spec.tls, spec.sentinel_master)
        if key in seen:
            continue
        seen.add(key)
        warning = check_connection(spec, timeout_s=timeout_s)
        if warning is not None:
            warnings.append(warning)
    return warnings


def check_redis_at_start(command: str, *specs: RedisSpec) -> None:
    """``check_at_start`` for a command line: a Redis setting that can never work (refused password or
    ACL user, a certificate that does not verify) stops ``command`` with exit code 2 and a message
    naming the setting, never the password; one that does not answer yet is only reported on stderr."""
    try:
        warnings = check_at_start(*specs)
    except RedisConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    for warning in warnings:
        print(f"{command}: {warning}", file=sys.stderr)

"""Redis set-ups beyond one plain server, as real processes on loopback: a TLS server with ACL users,
and a primary with a replica watched by sentinels.

``ThrowawayCA`` makes a CA and certificates with the ``cryptography`` package (nothing leaves the
test's directory); ``TlsRedis`` runs ``redis-server --tls-port`` with its plain port closed and the
default user off; ``SentinelGroup`` runs a primary, a replica (``--replicaof``) and sentinels
(``redis-server sentinel.conf --sentinel``) with short failure detection, so a killed primary is
replaced within seconds.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import signal
import socket
import subprocess
import threading
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from parley_testing.processes import redis_binary
from parley_testing.scripted_llm import free_port
from services.processes import stop_process


def _binary() -> str:
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-server not installed (apt-get install -y redis-server)")
    return binary


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@dataclass
class ThrowawayCA:
    """A CA for one test: ``issue`` writes a certificate (for 127.0.0.1 and localhost) and its key."""

    workdir: Path
    name: str = "parley-test-ca"
    cert_file: Path = field(init=False)
    _key: ec.EllipticCurvePrivateKey = field(init=False, repr=False)
    _subject: x509.Name = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(self._subject)
            .issuer_name(self._subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_file = self.workdir / f"{self.name}.pem"
        self.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str) -> tuple[Path, Path]:
        """A certificate signed by this CA for ``name`` (and 127.0.0.1, localhost): (cert, key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName(name),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        cert_path, key_path = self.workdir / f"{name}.pem", self.workdir / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        return cert_path, key_path


# eq=False: each instance is its own (one caller's calls, one server), compared and hashed by identity
@dataclass(eq=False)
class TlsRedis:
    """redis-server on a TLS port only, the default user off and one ACL user with a password.

    ``auth_clients`` is redis's ``--tls-auth-clients``: ``no`` (server certificate only), ``optional``
    or ``yes`` (a client certificate signed by the CA is required).
    """

    workdir: Path
    ca: ThrowawayCA
    _: KW_ONLY
    user: str
    password: str
    auth_clients: str = "no"
    commands: tuple[str, ...] = ("+@all",)  # the ACL user's command rules
    port: int = field(default_factory=free_port, init=False)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"rediss://{self.user}:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> TlsRedis:
        cert, key = self.ca.issue("redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            _binary(),
            "--port",
            "0",
            "--tls-port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(self.ca.cert_file),
            "--tls-auth-clients",
            self.auth_clients,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            "--loglevel",
            "warning",
            # Each word of an ACL rule is an argument of its own.
            "--user",
            "default",
            "off",
            "--user",
            self.user,
            "on",
            f">{self.password}",
            "~*",
            "&*",
            *self.commands,
        ]
        log = (self.workdir / "redis.log").open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        client = self.client()
        _wait_ping(client, self.proc)
        client.close()
        return self

    def client(self) -> redis.Redis:
        """A client as the ACL user over TLS."""
        return redis.Redis(
            port=self.port,
            username=self.user,
            password=self.password,
            ssl=True,
            ssl_ca_certs=str(self.ca.cert_file),
            decode_responses=True,
        )

    def stop(self) -> None:
        stop_process(self.proc)


def _wait_ping(client: redis.Redis, proc: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.ping()
            return
        except redis.exceptions.ConnectionError:
            if proc.poll() is not None:
                raise RuntimeError("redis-server exited at start") from None
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)


class HeldLink:
    """A TCP relay in front of a port whose replies can be held back: a replica's link to its
    primary that falls behind (``hold``) and then breaks with what it held (``cut``), as a slow or
    partitioned network would. A paused process would not do: the kernel keeps receiving for it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.held = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, holdable: bool) -> None:
        kept: list[bytes] = []
        try:
            while data := source.recv(65536):
                if holdable and self.held.is_set():
                    kept.append(data)
                    continue
                if kept:
                    sink.sendall(b"".join(kept))
                    kept.clear()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.close()

    def hold(self) -> None:
        """Keep what the primary sends from here on (the replica falls behind)."""
        self.held.set()

    def cut(self) -> None:
        """Break the link; what was held never arrives."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                s.close()


class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels (quorum: a majority) watching
    ``master``.

    ``down_after_ms`` and ``failover_timeout_ms`` are small so a killed primary is replaced within a
    few seconds; ``min_replicas_to_write`` (0: redis's default) makes the servers refuse writes while
    fewer replicas are connected. With ``tls`` (a ``ThrowawayCA``) servers, replication and sentinels
    speak TLS only, with certificates that CA signed.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        master: str = "parley",
        tls: ThrowawayCA | None = None,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        min_replicas_to_write: int = 0,
    ) -> None:
        self.workdir = workdir
        self.master = master
        self.ports = [free_port() for _ in range(1 + replicas)]  # [initial primary, replicas...]
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.min_replicas_to_write = min_replicas_to_write
        self.tls = tls
        self._tls_files = tls.issue("redis-group") if tls is not None else None
        self.servers: dict[int, subprocess.Popen[bytes]] = {}
        self.links: list[HeldLink] = []  # the first replicas' links to the first primary
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The ``sentinel://`` URL of every sentinel, database 0 (on the first, where kombu reads it)."""
        first, *rest = self.sentinel_ports
        return ";".join([f"sentinel://127.0.0.1:{first}/0", *(f"sentinel://127.0.0.1:{p}" for p in rest)])

    def _redis(self, port: int) -> redis.Redis:
        """A client of one server or sentinel of the group (over TLS when the group uses it)."""
        if self.tls is None:
            return redis.Redis(port=port, decode_responses=True)
        return redis.Redis(port=port, decode_responses=True, ssl=True, ssl_ca_certs=str(self.tls.cert_file))

    def _listen(self, port: int) -> list[str]:
        """The arguments (or, joined by lines, the config) that make a process listen on ``port``."""
        if self.tls is None or self._tls_files is None:
            return ["--port", str(port)]
        cert, key = self._tls_files
        return [
            "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(self.tls.cert_file), "--tls-auth-clients", "no",
            "--tls-replication", "yes",
        ]  # fmt: skip

    def _server(self, port: int, replica_of: int | None) -> subprocess.Popen[bytes]:
        work = self.workdir / f"redis-{port}"
        work.mkdir(parents=True, exist_ok=True)
        args = [_binary(), *self._listen(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(work)]
        # The first full sync at once (redis waits 5 s for more replicas by default).
        args += ["--appendonly", "no", "--loglevel", "notice", "--repl-diskless-sync-delay", "0"]
        if self.min_replicas_to_write:
            args += [
                "--min-replicas-to-write",
                str(self.min_replicas_to_write),
                "--min-replicas-max-lag",
                "2",
            ]
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        log = (work / "redis.log").open("ab")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        _wait_ping(self._redis(port), proc)
        return proc

    def start(self) -> SentinelGroup:
        primary, *replicas = self.ports
        self.servers[primary] = self._server(primary, None)
        for replica in replicas:
            link = HeldLink(primary)
            self.links.append(link)
            self.servers[replica] = self._server(replica, link.port)
            self._wait_replicated(replica)
        quorum = len(self.sentinel_ports) // 2 + 1
        for port in self.sentinel_ports:
            conf = self.workdir / f"sentinel-{port}.conf"
            listen = self._listen(port)
            lines = [f"{listen[i][2:]} {listen[i + 1]}" for i in range(0, len(listen), 2)]
            conf.write_text(
                "\n".join(lines) + f"\nbind 127.0.0.1\ndir {self.workdir}\n"
                f"sentinel monitor {self.master} 127.0.0.1 {primary} {quorum}\n"
                f"sentinel down-after-milliseconds {self.master} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.master} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {self.master} 1\n"
            )
            log = (self.workdir / f"sentinel-{port}.log").open("ab")
            proc = subprocess.Popen(
                [_binary(), str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
            )
            _wait_ping(self._redis(port), proc)
            self.sentinels.append(proc)
        # Every sentinel has seen the replica (and its fellow sentinels) before anything relies on them.
        deadline = time.monotonic() + 20
        while not all(self._sentinel_ready(p) for p in self.sentinel_ports):
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels did not discover the replica and each other")
            time.sleep(0.2)
        return self

    def _sentinel_ready(self, port: int) -> bool:
        s = self._redis(port)
        try:
            replicas = s.execute_command("SENTINEL", "REPLICAS", self.master)
            others = s.execute_command("SENTINEL", "SENTINELS", self.master)
        except redis.RedisError:
            return False
        finally:
            s.close()
        return len(replicas) >= len(self.ports) - 1 and len(others) >= len(self.sentinel_ports) - 1

    def _wait_replicated(self, replica: int) -> None:
        client = self._redis(replica)
        deadline = time.monotonic() + 20
        while client.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not finish its first sync")
            time.sleep(0.1)
        client.close()

    def primary_port(self) -> int:
        """The port of the primary the sentinels name now."""
        s = self._redis(self.sentinel_ports[0])
        try:
            _host, port = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
        finally:
            s.close()
        return int(port)

    def hold_replication(self) -> None:
        """From now on the first primary's writes stop reaching its replicas (``HeldLink.hold``);
        the primary still counts them connected. Before the first failover only."""
        for link in self.links:
            link.hold()

    def kill_primary(self) -> int:
        """SIGKILL the current primary (no shutdown, nothing flushed): returns its port."""
        port = self.primary_port()
        proc = self.servers[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        if port == self.ports[0]:
            for link in self.links:  # what the links held dies with the primary
                link.cut()
        return port

    def wait_failover(self, old_port: int, timeout_s: float = 30) -> int:
        """Wait until the sentinels name another primary and it accepts writes; returns its port."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                port = self.primary_port()
            except redis.RedisError:
                port = old_port
            if port != old_port:
                client = self._redis(port)
                try:
                    if client.info("replication").get("role") == "master":
                        return port
                except redis.RedisError:
                    pass
                finally:
                    client.close()
            time.sleep(0.1)
        raise RuntimeError(f"no failover within {timeout_s}s")

    def client(self, port: int) -> redis.Redis:
        return self._redis(port)

    def stop(self) -> None:
        for link in self.links:
            link.cut()
        for proc in self.sentinels:
            stop_process(proc)
        for proc in self.servers.values():
            stop_process(proc)

"""The service spread over hosts for the multi-host harness: each process in a network namespace of its
own, bound to that host's address and configured as docs/deployment.md's "Workers on several hosts"
says (``PARLEY_WORKER_REDIS_URL=redis://user:password@<redis host>:6379/0``, ``PARLEY_RETRIEVER_URL``,
``PARLEY_LLM_BASE_URL``).

Hosts: ``redis`` (redis-server with AOF, an ACL user with a password, the default user off, bound to
its address only; ``secured``: on TLS only, the gateway and the workers given its URL as a secret file
and the CA that signs its certificate), ``gateway``, ``retriever`` (the real retriever over a small
index), ``llm`` (the scripted OpenAI-compatible server, in this process so every token it serves is
counted by the ledger), ``worker-1`` and ``worker-2`` (real Celery workers, two processes each),
``client`` (this process's HTTP clients) and ``link``: worker-1 reaches Redis, the retriever and the
LLM through a delaying proxy there (redirected by DNAT, so its settings name the real addresses, the
same as worker-2's), which is how its links are slowed; worker-2 reaches them directly.

The soak's stack (``bench.soak_stack.SoakStack``) does the rest: the faults' bookkeeping (which jobs a
worker runs, each job's charges) and stopping everything.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import redis

from api.guards import hash_key
from bench.harness.processes import start_process, wait_http
from bench.harness.procfs import descendants
from bench.multihost_net import DelayProxy, Network, inside
from bench.multihost_tls import issue_server_tls
from bench.soak_ledger import KEYS, LLM_TIMEOUT_S, Ledger
from bench.soak_stack import HARNESS, SoakStack
from parley_testing.processes import WorkerProcess, redis_binary, worker_env
from parley_testing.scripted_llm import ScriptedLLM
from services.processes import stop_process

HOSTS = {
    "redis": 10,
    "gateway": 11,
    "retriever": 12,
    "llm": 13,
    "worker-1": 21,
    "worker-2": 22,
    "client": 30,
    "link": 40,
}
WORKERS = ("worker-1", "worker-2")
SLOWED = "worker-1"  # its links pass the delaying proxy on ``link``
PORTS = {"redis": 6379, "gateway": 8000, "retriever": 8001, "llm": 8000}
REDIS_USER = "parley"


class NetRedis:
    """redis-server on the ``redis`` host: AOF (a restart keeps its data), requirepass by ACL user, bound
    to the host's address; ``client()`` and ``url`` carry the credentials."""

    def __init__(self, net: Network, workdir: Path, *, secured: bool = False) -> None:
        self.net = net
        self.workdir = workdir
        self.password = secrets.token_hex(16)
        self.port = PORTS["redis"]
        self.proc: subprocess.Popen[bytes] | None = None
        # Secured: TLS only (the plain port closed), the server's certificate for its address.
        self.tls = issue_server_tls(workdir / "tls", net.ip("redis")) if secured else None

    @property
    def url(self) -> str:
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{REDIS_USER}:{self.password}@{self.net.ip('redis')}:{self.port}/0"

    def settings_env(self, prefix: str, secrets_dir: Path) -> dict[str, str]:
        """How a process with settings ``prefix`` (``PARLEY_API_``, ``PARLEY_WORKER_``) is told where
        Redis is: the URL itself, or, secured, the URL in a secret file (``*_REDIS_URL_FILE``, so the
        password is in no environment) and the CA that signs the server's certificate."""
        if self.tls is None:
            return {f"{prefix}REDIS_URL": self.url}
        secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        secret = secrets_dir / "redis_url"
        if not secret.exists():
            secret.touch(mode=0o600)
            secret.write_text(self.url + "\n", encoding="utf-8")
        return {f"{prefix}REDIS_URL_FILE": str(secret), f"{prefix}REDIS_TLS_CA_FILE": str(self.tls.ca_file)}

    def start(self) -> NetRedis:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("redis-server not installed (apt-get install -y redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [*self.net.exec_args("redis"), binary, "--bind", self.net.ip("redis")]
        if self.tls is None:
            args += ["--port", str(self.port)]
        else:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            args += ["--tls-cert-file", str(self.tls.cert_file), "--tls-key-file", str(self.tls.key_file)]
            args += ["--tls-ca-cert-file", str(self.tls.ca_file)]
        args += ["--save", "", "--dir", str(self.workdir), "--appendonly", "yes", "--loglevel", "warning"]
        # Each word of an ACL rule an argument of its own: the default user off, one user by password.
        acl = ["default", "off", "--user", REDIS_USER, "on", f">{self.password}", "~*", "&*", "+@all"]
        args += ["--user", *acl]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            client = self.client()
            try:
                client.ping()
                return self
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.1)
            finally:
                client.close()

    def stop(self) -> None:
        stop_process(self.proc)

    def client(self) -> redis.Redis:
        if self.tls is None:
            return redis.Redis.from_url(
                self.url, decode_responses=True, socket_timeout=10, socket_connect_timeout=5
            )
        ca = str(self.tls.ca_file)
        return redis.Redis.from_url(
            self.url, decode_responses=True, socket_timeout=10, socket_connect_timeout=5, ssl_ca_certs=ca
        )


class MultihostStack(SoakStack):
    """Every process on its host (see the module's docstring); ``proxies`` are worker-1's links."""

    def __init__(
        self, net: Network, tmp: Path, ledger: Ledger, llm_latency_s: float, *, secured: bool = False
    ) -> None:
        super().__init__(tmp, ledger, llm_latency_s)
        self.net = net
        self.store = NetRedis(net, tmp / "redis", secured=secured)
        self.redis = self.store  # type: ignore[assignment]  # the soak's code reads it: the same surface
        self.llm = ScriptedLLM(latency_s=llm_latency_s, record=False, host=net.ip("llm"), port=PORTS["llm"])
        self.gateway_proc: subprocess.Popen[bytes] | None = None
        self.proxies: dict[str, DelayProxy] = {}

    @property
    def api_url(self) -> str:
        return f"http://{self.net.ip('gateway')}:{PORTS['gateway']}"

    @property
    def retriever_url(self) -> str:
        return f"http://{self.net.ip('retriever')}:{PORTS['retriever']}"

    @property
    def llm_url(self) -> str:
        return f"http://{self.net.ip('llm')}:{PORTS['llm']}/v1"

    def start_all(self) -> None:
        """Redis, the LLM, the retriever, the gateway, worker-1's proxies, then the two workers."""
        self._start_redis_and_script_llm()
        with inside(self.net.ns("llm")):  # its server thread, and so its socket, live on the llm host
            self.llm.start()
        self._build_index()
        self.start_retriever()
        self.start_gateway({"PARLEY_API_KEYS": json.dumps({k: hash_key(v) for k, v in KEYS.items()})})
        for host in ("redis", "retriever", "llm"):
            address = (self.net.ip(host), PORTS[host])
            self.proxies[host] = DelayProxy(self.net.ns("link"), (self.net.ip("link"), PORTS[host]), address)
            self.proxies[host].start()
            self.net.redirect(SLOWED, host, PORTS[host], "link")
        for i in range(len(WORKERS)):
            self.workers.append(self._worker(i).start())

    def start_retriever(self) -> None:
        env = {**self.env, "PARLEY_RETRIEVER_DATA_DIR": str(self.tmp / "index")}
        args = [*self.net.exec_args("retriever"), sys.executable, "-m", "parley_cli", "retriever"]
        args += ["--host", self.net.ip("retriever"), "--port", str(PORTS["retriever"])]
        self.retriever = start_process(args, env, self.tmp / "retriever.log")
        wait_http(
            f"{self.retriever_url}/healthz",
            timeout_s=180,
            proc=self.retriever,
            log=self.tmp / "retriever.log",
        )

    def start_gateway(
        self, extra_env: dict[str, str] | None = None, *, api_workers: int | None = None
    ) -> None:
        env = {
            **self.env,
            **(extra_env or {}),
            **self.store.settings_env("PARLEY_API_", self.tmp / "secrets"),
            "PARLEY_API_RATE_LIMIT_PER_MINUTE": "1000000",
        }
        args = [*self.net.exec_args("gateway"), sys.executable, "-m", "api.cli", "api"]
        args += ["--host", self.net.ip("gateway"), "--port", str(PORTS["gateway"])]
        log = self.tmp / "api.log"
        self.gateway_proc = start_process(args, env, log)
        wait_http(f"{self.api_url}/healthz", proc=self.gateway_proc, log=log)

    def stop_gateway(self) -> None:
        stop_process(self.gateway_proc, 20, group=True)

    def _worker(self, i: int) -> WorkerProcess:
        host = WORKERS[i]
        env = worker_env(
            self.redis.url,
            self.llm_url,
            self.retriever_url,
            PARLEY_LLM_TIMEOUT_S=str(LLM_TIMEOUT_S),
        )
        # The LLM client's retries as installed (the test helper's are for quick failures): calls that
        # cannot connect are retried with backoff for PARLEY_LLM_RETRY_WINDOW_S. The call deadline stays
        # the soak's, sized to the scripted server's replies.
        for name in ("PARLEY_LLM_MAX_ATTEMPTS", "PARLEY_LLM_BACKOFF_BASE_S", "PARLEY_WORKER_REDIS_URL"):
            env.pop(name, None)
        env.update(self.store.settings_env("PARLEY_WORKER_", self.tmp / "secrets"))
        worker = WorkerProcess(env, self.tmp / f"{host}.log", concurrency=2, name=host)
        worker.args = [*self.net.exec_args(host), *worker.args]
        return worker

    def finished_at(self, job_ids: list[str]) -> dict[str, float | None]:
        """When each job ended, as its worker recorded it (epoch seconds; None while it runs)."""
        client = self.redis.client()
        try:
            return {
                job_id: float(v) if (v := client.hget(f"parley:job:{job_id}", "finished_at")) else None
                for job_id in job_ids
            }
        finally:
            client.close()

    def password_shown(self) -> list[str]:
        """The service processes (the gateway, the workers and their pool processes) whose environment
        or command line holds the Redis password: none when it comes from a secret file."""
        shown = []
        for name, pid in self.processes().items():
            if name in ("redis-server", HARNESS) or not pid:
                continue
            for p in descendants(pid):
                for part in ("environ", "cmdline"):
                    with contextlib.suppress(OSError):
                        if self.store.password.encode() in Path(f"/proc/{p}/{part}").read_bytes():
                            shown.append(f"{name} ({part})")
        return sorted(set(shown))

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        super().stop()

    def processes(self) -> dict[str, int]:
        out = super().processes()
        out["gateway"] = self.gateway_proc.pid if self.gateway_proc else 0
        return out

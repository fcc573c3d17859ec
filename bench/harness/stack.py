"""Redis and the gateway for a study that drives the service over HTTP: started once, shared by every
point of the study, stopped with every process the study added to it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.harness.processes import Service, service_env, start_gateway, start_process
from parley_testing.processes import RedisServer
from services.processes import stop_process


class GatewayStack:
    """A private redis-server and the gateway over it; ``spawn`` adds processes stopped with them."""

    def __init__(self, tmp: Path, *, appendonly: bool = False) -> None:
        self.tmp = tmp
        self.env = service_env()
        self.redis = RedisServer(tmp / "redis", appendonly=appendonly)
        self.gateway: Service | None = None
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def api_url(self) -> str:
        assert self.gateway is not None, "start_gateway() first"
        return self.gateway.url

    def start(self, gateway_env: dict[str, str] | None = None, *, api_workers: int | None = None) -> None:
        """Redis, then the gateway; a gateway that never comes up leaves no redis-server behind."""
        self.redis.start()
        try:
            self.start_gateway(gateway_env, api_workers=api_workers)
        except BaseException:
            self.stop()
            raise

    def start_gateway(
        self, extra_env: dict[str, str] | None = None, *, api_workers: int | None = None
    ) -> None:
        self.gateway = start_gateway(
            self.env, self.redis.url, self.tmp / "api.log", extra_env=extra_env, workers=api_workers
        )

    def spawn(self, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        """A process of the study's (an LLM server, say), stopped with the stack."""
        proc = start_process(args, env, log)
        self.procs.append(proc)
        return proc

    def stop_gateway(self) -> None:
        if self.gateway is not None:
            stop_process(self.gateway.proc, 20, group=True)

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc, 15)
        self.stop_gateway()
        self.redis.stop()

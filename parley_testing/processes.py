"""Real processes for gateway tests and benchmarks: redis-server, ASGI apps under uvicorn, Celery workers.

Everything binds to free loopback ports and lives in a directory the caller gives; nothing is mocked.
The worker runs as a separate process (``python -m debate_worker.worker_cli worker``) configured
through its environment, exactly as in production.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import redis
import uvicorn

from parley_testing.scripted_llm import free_port
from services.processes import stop_process

if TYPE_CHECKING:
    from api.settings import ApiSettings
    from services.jobstore.settings import RetentionSettings

# The repository root: worker processes import the packages from here.
ROOT = Path(__file__).resolve().parents[1]


def redis_binary() -> str | None:
    return shutil.which("redis-server")


class RedisServer:
    """A private redis-server on a free port (no persistence unless ``appendonly``)."""

    def __init__(self, workdir: Path, *, appendonly: bool = False) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("redis-server not installed (apt-get install -y redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(self.workdir),
        ]
        args += ["--appendonly", "yes" if self.appendonly else "no", "--loglevel", "warning"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        client.close()
        return self

    def stop(self) -> None:
        stop_process(self.proc)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True)


class AppServer:
    """An ASGI app under a real uvicorn server in a background thread, on a free port."""

    def __init__(self, app: Any, *, startup_timeout_s: float = 120.0) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)
        self._timeout = startup_timeout_s

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> AppServer:
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the app failed to start")
            if time.monotonic() > deadline:
                raise RuntimeError("the app did not start in time")
            time.sleep(0.05)
        httpx.get(self.url + "/healthz", timeout=30).raise_for_status()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)


class ApiServer(AppServer):
    """The real API app under uvicorn in a thread, on a free port (the retriever tests' ``AppServer``)."""

    def __init__(self, settings: ApiSettings, retention: RetentionSettings | None = None) -> None:
        from api.app import create_app

        super().__init__(create_app(settings, retention=retention), startup_timeout_s=15)
        self.settings = settings

    def __enter__(self) -> ApiServer:
        super().__enter__()
        return self

    def start(self) -> ApiServer:
        return self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)


def worker_env(
    redis_url: str, llm_url: str, retriever_url: str | None = None, **extra: str
) -> dict[str, str]:
    """The environment of a worker process (its only configuration channel, as in production)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
            "PARLEY_WORKER_REDIS_URL": redis_url,
            "PARLEY_LLM_BASE_URL": llm_url,
            "PARLEY_LLM_MODEL": "scripted",
            "PARLEY_LLM_STRUCTURED_OUTPUT": "off",
            "PARLEY_LLM_MAX_ATTEMPTS": "2",
            "PARLEY_LLM_BACKOFF_BASE_S": "0.05",
            # Each worker process its own metrics port: tests run several workers side by side.
            "PARLEY_WORKER_METRICS_PORT": str(free_port()),
        }
    )
    if retriever_url:
        env["PARLEY_RETRIEVER_URL"] = retriever_url
    env.update(extra)
    return env


class WorkerProcess:
    """``python -m debate_worker.worker_cli worker`` as a child process; ``ready()`` waits for Celery's
    ready line."""

    def __init__(
        self,
        env: dict[str, str],
        logfile: Path,
        *,
        concurrency: int = 1,
        pool: str = "prefork",
        name: str = "w1",
    ) -> None:
        self.env = env
        self.logfile = logfile
        self.args = [
            sys.executable,
            "-m",
            "debate_worker.worker_cli",
            "worker",
            f"--concurrency={concurrency}",
            f"--pool={pool}",
            f"--hostname={name}@%h",
            "--loglevel=INFO",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> WorkerProcess:
        self._fh = self.logfile.open("ab")
        self.proc = subprocess.Popen(
            self.args,
            env=self.env,
            cwd=ROOT,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while b" ready." not in self.logfile.read_bytes():
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker not ready after {timeout_s}s: {self.log()[-3000:]}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        return self.logfile.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # The whole session: the Celery main process and its pool children.
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self._fh.close()

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

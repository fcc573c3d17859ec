"""llama.cpp's HTTP server from the prebuilt ``xllamacpp`` wheel, as a process of its own.

``python -m services.llm.xllama_serve --model F --port P …`` takes the same options as llama.cpp's
``llama-server`` (the subset Parley uses), so the embedded-server supervisor starts either one with one
command line and watches a child process it can kill and restart. xllamacpp (Xorbits, MIT) runs
llama.cpp's own C++ server in-process: the same slots, per-slot prompt cache with ``cached_tokens`` in
the usage, ``json_schema`` response formats and ``/tokenize`` as ``llama-server``, without a compiler.

Its Linux wheel is built for any x86-64 CPU with AVX2 (AVX, AVX2, F16C, FMA, BMI2); a CPU without them
would die on an illegal instruction at the first matrix product, so that is checked before the import
and answered with exit status 3 and a message that says what to do.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The instruction sets the xllamacpp wheel's CPU backend is compiled for (its get_system_info()).
REQUIRED_CPU_FLAGS = ("avx", "avx2", "f16c", "fma", "bmi2")
UNSUPPORTED_CPU_EXIT = 3
CPUINFO = Path("/proc/cpuinfo")


def missing_cpu_flags(cpuinfo: Path = CPUINFO) -> list[str]:
    """The required instruction sets this CPU lacks, from the x86 ``flags`` line of ``/proc/cpuinfo``.

    Where there is no such file or line (not Linux, not x86: ARM lists ``Features``) nothing is
    reported: the wheel for that platform is built for its baseline."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return [f for f in REQUIRED_CPU_FLAGS if f not in flags]
    return []


def unsupported_cpu_message(missing: Sequence[str]) -> str:
    return (
        f"this CPU lacks {', '.join(missing)}, which the prebuilt llama.cpp server (xllamacpp) needs; "
        "build llama.cpp's server for this CPU with `make native-llm` (it selects itself once built), "
        "or point PARLEY_LLM_BASE_URL at another OpenAI-compatible server"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m services.llm.xllama_serve", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--model", type=Path, required=True, help="the GGUF file")
    ap.add_argument("--alias", default=None, help="the model name clients send")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--ctx-size", type=int, default=4096, help="tokens of KV cache, shared by the slots")
    ap.add_argument("--parallel", type=int, default=1, help="slots (requests decoded together)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cache-ram", type=int, default=512, help="host-memory prompt cache bound (MiB)")
    ap.add_argument("--cache-reuse", type=int, default=0, help="reuse cached chunks of this many tokens")
    ap.add_argument("--no-webui", action="store_true", help="accepted for llama-server parity (always off)")
    ap.add_argument("--cpuinfo", type=Path, default=CPUINFO, help=argparse.SUPPRESS)  # tests: another CPU
    return ap.parse_args(argv)


def build_params(args: argparse.Namespace, xllamacpp: Any) -> Any:
    """``CommonParams`` as llama-server would set them from the same options."""
    params = xllamacpp.CommonParams()
    params.model.path = str(args.model)
    if args.alias:
        params.model_alias = {args.alias}  # a set of names: a bare string would be split into letters
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    if args.threads:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads
    params.cache_ram_mib = args.cache_ram
    params.n_cache_reuse = args.cache_reuse
    params.ui = False
    return params


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; print where, once the model is loaded and the port is open."""
    args = parse_args(argv)
    missing = missing_cpu_flags(args.cpuinfo)
    if missing:
        print(f"error: {unsupported_cpu_message(missing)}", file=sys.stderr, flush=True)
        return UNSUPPORTED_CPU_EXIT
    if not args.model.is_file():
        print(f"error: no model file at {args.model}", file=sys.stderr, flush=True)
        return 2
    try:
        # lazy: xllamacpp is the optional `embedded` extra; its absence is reported below
        import xllamacpp
    except ImportError:
        print(
            "error: xllamacpp is not installed; run `make install` (or `.venv/bin/pip install -e "
            "'.[embedded]'`)",
            file=sys.stderr,
            flush=True,
        )
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # The constructor loads the model and opens the port; requests are served on its own threads.
    server = xllamacpp.Server(build_params(args, xllamacpp))
    print(f"llama.cpp server (xllamacpp {xllamacpp.__version__}) listening on {server.listening_address}/v1")
    sys.stdout.flush()
    stop.wait()
    del server  # stops the HTTP loop and frees the model before the interpreter exits
    return 0


if __name__ == "__main__":
    sys.exit(main())

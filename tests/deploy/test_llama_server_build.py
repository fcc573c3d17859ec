"""scripts/build_llama_server.sh without a compiler: where the source comes from, how a build is laid
out once built, and the image stage that runs it (the compile itself is minutes: `make native-llm`,
`LLM_IMAGE=1 make images`)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_llama_server.sh"
VERSION = "0.3.36"
DEFAULT_VARIANTS = (
    "x64 sse42 sandybridge ivybridge piledriver haswell skylakex cannonlake cascadelake icelake "
    "cooperlake zen4 alderlake"
)


def run(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The script, offline unless a test says otherwise: a test that misses its cached build must
    fail, not download llama.cpp and compile it for minutes. On a timeout its whole process group
    (cmake, the compilers) is killed, not only bash."""
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), sys.executable, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PARLEY_OFFLINE": "1", **env},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_offline_without_the_source_says_what_to_run(tmp_path: Path) -> None:
    done = run("-", tmp_path / "sdist", "source")
    assert done.returncode == 1
    assert f"no {tmp_path}/sdist/llama_cpp_python-{VERSION}.tar.gz" in done.stderr
    assert "make wheelhouse" in done.stderr


def test_a_source_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    sdist = tmp_path / f"llama_cpp_python-{VERSION}.tar.gz"
    sdist.write_bytes(b"not the release")
    done = run("-", tmp_path, "source")
    assert done.returncode == 1
    assert "does not match its recorded sha256" in done.stderr
    # The same check guards a build that would use it.
    done = run(
        tmp_path / "cache",
        tmp_path / "venv/bin/llama-server",
        "all-variants",
        LLAMA_CPP_SDIST_DIR=str(tmp_path),
    )
    assert done.returncode != 0 and not (tmp_path / "venv/bin/llama-server").exists()


def test_an_unknown_build_kind_is_refused(tmp_path: Path) -> None:
    done = run(tmp_path / "cache", tmp_path / "llama-server", "fastest")
    assert done.returncode == 2
    assert "native, portable or all-variants" in done.stderr


def _cached_all_variants(cache: Path, variants: str) -> Path:
    """What a finished all-variants build leaves in the cache, in the folder named by its variants."""
    key = hashlib.sha256(f"{variants}\n".encode()).hexdigest()[:8]
    built = cache / f"llama-server-{VERSION}-all-variants-{key}"
    built.mkdir(parents=True)
    (built / "llama-server").write_text("#!/bin/sh\necho serving\n")
    (built / "llama-server").chmod(0o755)
    (built / "libggml-cpu-haswell.so").write_bytes(b"\x7fELF")
    (built / "libllama.so.0.5.0").write_bytes(b"\x7fELF")
    (built / "libllama.so.0").symlink_to("libllama.so.0.5.0")
    (built / "LICENSE").write_text("MIT")
    return built


def test_an_all_variants_build_is_installed_as_a_folder_with_the_server_linked(tmp_path: Path) -> None:
    _cached_all_variants(tmp_path / "cache", DEFAULT_VARIANTS)
    target = tmp_path / "venv" / "bin" / "llama-server"
    target.parent.mkdir(parents=True)
    target.write_text("an older single-binary build")
    done = run(tmp_path / "cache", target, "all-variants")
    assert done.returncode == 0, done.stderr
    libexec = tmp_path / "venv" / "libexec" / "llama-server"
    # The link is relative, so the folder can move (an image's COPY, a relocated virtualenv).
    assert target.is_symlink() and os.readlink(target) == "../libexec/llama-server/llama-server"
    assert subprocess.run([str(target)], capture_output=True, text=True).stdout == "serving\n"
    assert {p.name for p in libexec.iterdir()} == {
        "llama-server",
        "libggml-cpu-haswell.so",
        "libllama.so.0.5.0",
        "libllama.so.0",
        "LICENSE",
    }
    assert (libexec / "libllama.so.0").is_symlink()  # library links stay links
    # Another choice of levels is another build: nothing cached for it, so it would compile (and here,
    # offline without the source, it stops before touching the installed one).
    done = run(tmp_path / "cache", target, "all-variants", LLAMA_CPU_VARIANTS="haswell")
    assert done.returncode == 1 and "make wheelhouse" in done.stderr
    assert os.readlink(target) == "../libexec/llama-server/llama-server"


def test_the_image_compiles_the_server_apart_from_the_code() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stage = text.split("AS llama-server-build\n", 1)[1].split("\nFROM ", 1)[0]
    # Only the script and the pinned source go in, so a code change does not recompile llama.cpp.
    copies = [line for line in stage.splitlines() if line.startswith("COPY")]
    assert copies == ["COPY scripts/build_llama_server.sh /src/"]
    assert "all-variants" in stage and "source=wheelhouse/sdist" in stage
    llm = text.split("AS llm\n", 1)[1].split("\nFROM ", 1)[0]
    assert "COPY --from=llama-server-build /out/ /opt/parley/" in llm
    # AMX is left out by default (chosen whenever CPUID reports it, fatal where the VM does not grant it).
    assert "sapphirerapids" not in DEFAULT_VARIANTS.split()
    script = SCRIPT.read_text()
    assert f'x86_levels="{DEFAULT_VARIANTS} sapphirerapids"' in script
    assert "variants=${LLAMA_CPU_VARIANTS:-${x86_levels% sapphirerapids}}" in script
    # (that the default expands to DEFAULT_VARIANTS is shown by the cache key of the install test above)

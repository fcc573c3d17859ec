"""The speed bench names the llama-server build each path ran, from make native-llm's cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.embedded_speed import (
    BUILD_SCRIPT,
    llama_server_build,
    pinned_llama_cpp_version,
    portable_llama_server,
)


def cached(cache: Path, folder: str, content: bytes) -> Path:
    binary = cache / folder / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(content)
    return binary


def test_an_installed_copy_is_named_by_the_cached_build_it_came_from(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached(cache, "llama-server-0.3.36", b"portable build")
    cached(cache, "llama-server-0.3.36-native-0123456789ab", b"native build")
    installed = tmp_path / "venv-bin-llama-server"
    installed.write_bytes(b"native build")
    assert llama_server_build(installed, cache) == "native"
    installed.write_bytes(b"portable build")
    assert llama_server_build(installed, cache) == "portable"
    installed.write_bytes(b"some other build")
    assert llama_server_build(installed, cache) == str(installed)
    assert llama_server_build(None, cache) == "not found"


def test_the_portable_path_takes_the_portable_build_of_the_same_version(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert portable_llama_server(cache, "0.3.36") is None
    cached(cache, "llama-server-0.3.36-native-0123456789ab", b"native")
    cached(cache, "llama-server-0.3.35", b"older llama.cpp")
    assert portable_llama_server(cache, "0.3.36") is None
    same = cached(cache, "llama-server-0.3.36", b"portable")
    assert portable_llama_server(cache, "0.3.36") == same


def test_the_portable_build_defaults_to_the_llama_cpp_source_make_native_llm_pins(tmp_path: Path) -> None:
    script = tmp_path / "build.sh"
    script.write_text("pinned_version=0.3.99\nversion=${LLAMA_CPP_PYTHON_VERSION:-$pinned_version}\n")
    assert pinned_llama_cpp_version(script) == "0.3.99"
    assert pinned_llama_cpp_version() == pinned_llama_cpp_version(BUILD_SCRIPT)
    script.write_text("version=${LLAMA_CPP_PYTHON_VERSION:-0.3.99}\n")
    with pytest.raises(ValueError, match=r"no pinned llama\.cpp source version"):
        pinned_llama_cpp_version(script)

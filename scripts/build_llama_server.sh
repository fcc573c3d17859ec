#!/usr/bin/env bash
# Builds llama.cpp's own OpenAI-compatible server (llama-server, MIT licence) from the llama.cpp source
# that ships inside the installed llama-cpp-python release (its PyPI source distribution), so the
# embedded model can keep one KV cache per prompt family. Nothing but PyPI is contacted; the binary is
# cached per version outside the repository and copied into the virtualenv, so a second run (or CI on
# the same machine) takes seconds. Usage: build_llama_server.sh PYTHON CACHE_DIR TARGET
set -euo pipefail
py=$1
cache=$2
target=$3
version=$("$py" -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")
built="$cache/llama-server-$version/llama-server"
if [ ! -x "$built" ]; then
  cmake_bin=$(command -v cmake || true)
  if [ -z "$cmake_bin" ]; then
    "$py" -m pip install -q cmake
    cmake_bin="$(dirname "$py")/cmake"
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "building llama-server $version (llama.cpp from the llama-cpp-python sdist; about 10 minutes on 2 cores)"
  "$py" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$work"
  tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  # Any x86-64 CPU (not just this one); no web UI, TLS or downloads of prebuilt assets.
  "$cmake_bin" -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF >"$work/cmake.log"
  "$cmake_bin" --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log"
  mkdir -p "$(dirname "$built")"
  cp "$work/build/bin/llama-server" "$built.tmp"
  cp "$src/LICENSE" "$(dirname "$built")/LICENSE"
  mv "$built.tmp" "$built"
fi
install -m 755 "$built" "$target"

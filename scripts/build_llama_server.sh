#!/usr/bin/env bash
# The optional native upgrade of the embedded model (`make native-llm`): builds llama.cpp's own
# OpenAI-compatible server (llama-server, MIT licence) from the llama.cpp source that ships inside a
# pinned llama-cpp-python release's PyPI source distribution. Only the sdist is downloaded and unpacked
# (llama-cpp-python itself is neither built nor installed); nothing but PyPI is contacted. The binary is
# cached per version outside the repository and copied into the virtualenv, so a second run takes
# seconds. Usage: build_llama_server.sh PYTHON CACHE_DIR TARGET [native|portable]
# LLAMA_CPP_PYTHON_VERSION picks the source release (default below, whose sdist is checked against its
# recorded sha256; another version is taken as PyPI serves it).
#
# native (the default) compiles for this CPU's instruction set (AVX-512 where it has it): prompt
# evaluation, most of a debate's time, runs about 1.3x faster than the portable build on an AVX-512
# machine (bench/embedded_speed.py). The cache is then keyed by this CPU's feature flags, so a home
# folder shared with a different CPU builds its own. portable runs on any x86-64 CPU (AVX2).
set -euo pipefail
py=$1
cache=$2
target=$3
arch=${4:-native}
pinned_version=0.3.36
version=${LLAMA_CPP_PYTHON_VERSION:-$pinned_version}
pinned_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
case "$arch" in
  native)
    cpu=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | sha256sum | cut -c1-12)
    # Without AMX: ggml's AMX matrix path dies with a general protection fault on CPUs that report
    # AMX where the kernel or hypervisor does not grant the tile state (seen on a 2-core AVX-512 VM:
    # SIGSEGV in ggml_backend_amx_mul_mat at the first decode). AVX-512 and VNNI stay on. The folder
    # name says so, so a binary cached by an earlier recipe is not reused.
    built="$cache/llama-server-$version-native-noamx-$cpu/llama-server"
    cpu_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    native=ON ;;
  portable)
    built="$cache/llama-server-$version/llama-server"
    cpu_flags=""
    native=OFF ;;
  *) echo "unknown build kind '$arch' (native or portable)" >&2; exit 2 ;;
esac
if [ ! -x "$built" ]; then
  cmake_bin=$(command -v cmake || true)
  if [ -z "$cmake_bin" ]; then
    "$py" -m pip install -q cmake
    cmake_bin="$(dirname "$py")/cmake"
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "building llama-server $version, $arch (llama.cpp from the llama-cpp-python sdist; minutes on 2 cores)"
  # Only llama-cpp-python as source (its build backend, needed to read its metadata, comes as wheels).
  "$py" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work"
  sdist=$(echo "$work"/llama_cpp_python-*.tar.gz)
  if [ "$version" = "$pinned_version" ] && ! echo "$pinned_sha256  $sdist" | sha256sum -c --quiet -; then
    echo "the llama-cpp-python $version sdist does not match its recorded sha256" >&2; exit 1
  fi
  tar xzf "$sdist" -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  # No web UI, TLS or downloads of prebuilt assets.
  "$cmake_bin" -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$native \
    -DCMAKE_C_FLAGS="$cpu_flags" -DCMAKE_CXX_FLAGS="$cpu_flags" \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF >"$work/cmake.log"
  "$cmake_bin" --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  mkdir -p "$(dirname "$built")"
  cp "$work/build/bin/llama-server" "$built.tmp"
  cp "$src/LICENSE" "$(dirname "$built")/LICENSE"
  mv "$built.tmp" "$built"
fi
install -m 755 "$built" "$target"

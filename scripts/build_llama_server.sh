#!/usr/bin/env bash
# The optional native upgrade of the embedded model (`make native-llm`): builds llama.cpp's own
# OpenAI-compatible server (llama-server, MIT licence) from the llama.cpp source that ships inside a
# pinned llama-cpp-python release's PyPI source distribution. Only the sdist is downloaded and unpacked
# (llama-cpp-python itself is neither built nor installed); nothing but PyPI is contacted. The binary is
# cached per version outside the repository and copied into the virtualenv, so a second run takes
# seconds. Usage: build_llama_server.sh PYTHON CACHE_DIR TARGET [native|portable|all-variants]
# (`build_llama_server.sh PYTHON - DIR source` only puts the checked sdist into DIR).
# LLAMA_CPP_PYTHON_VERSION picks the source release (default below, whose sdist is checked against its
# recorded sha256; another version is taken as PyPI serves it). LLAMA_CPP_SDIST_DIR names a folder that
# may already hold that sdist (`make wheelhouse` puts it in wheelhouse/sdist for image builds); with
# PARLEY_OFFLINE=1 it must, and nothing is downloaded.
#
# native (the default) compiles for this CPU's instruction set (AVX-512 where it has it): prompt
# evaluation, most of a debate's time, runs about 1.3x faster than the portable build on an AVX-512
# machine (bench/embedded_speed.py). The cache is then keyed by this CPU's feature flags, so a home
# folder shared with a different CPU builds its own. portable runs on any x86-64 CPU (AVX2).
# all-variants is the one for images that run on CPUs not known at build time (the `llm` image):
# ggml's CPU backend is compiled once per x86-64 level (LLAMA_CPU_VARIANTS, below) as shared
# libraries, and llama-server loads the best one the CPU it starts on supports. The build lands in
# DIR/../libexec/llama-server/ (the server, its libraries, the licence) and TARGET links to it.
set -euo pipefail
py=$1
cache=$2
target=$3
arch=${4:-native}
pinned_version=0.3.36
version=${LLAMA_CPP_PYTHON_VERSION:-$pinned_version}
pinned_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# ggml's x86-64 CPU backend levels (ggml/src/CMakeLists.txt, GGML_CPU_ALL_VARIANTS), in its order.
x86_levels="x64 sse42 sandybridge ivybridge piledriver haswell skylakex cannonlake cascadelake icelake cooperlake zen4 alderlake sapphirerapids"
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
  all-variants)
    # Every x86-64 level of ggml's list but sapphirerapids (the last): its AMX kernels are chosen
    # whenever CPUID reports AMX, and die on the VMs that report it without granting the tile state.
    variants=${LLAMA_CPU_VARIANTS:-${x86_levels% sapphirerapids}}
    built="$cache/llama-server-$version-all-variants-$(echo "$variants" | sha256sum | cut -c1-8)/llama-server"
    cpu_flags=""
    native=OFF ;;
  source) built="" ;;
  *) echo "unknown build kind '$arch' (native, portable or all-variants)" >&2; exit 2 ;;
esac
# The sha256-checked sdist: LLAMA_CPP_SDIST_DIR's copy, else downloaded into DIR; prints its path.
fetch_sdist() {
  local sdist="${LLAMA_CPP_SDIST_DIR:-/nonexistent}/llama_cpp_python-$version.tar.gz"
  if [ ! -f "$sdist" ]; then
    if [ "${PARLEY_OFFLINE:-0}" = 1 ]; then
      echo "PARLEY_OFFLINE=1 and no $sdist: run \`make wheelhouse\` (it fetches the llama.cpp source too)" >&2
      exit 1
    fi
    # Only llama-cpp-python as source (its build backend, needed to read its metadata, comes as wheels).
    "$py" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$1" >&2
    sdist="$1/llama_cpp_python-$version.tar.gz"
  fi
  if [ "$version" = "$pinned_version" ] && ! echo "$pinned_sha256  $sdist" | sha256sum -c --quiet -; then
    echo "the llama-cpp-python $version sdist ($sdist) does not match its recorded sha256" >&2; exit 1
  fi
  echo "$sdist"
}
if [ "$arch" = source ]; then  # only the source, for image builds without an index (`make wheelhouse`)
  mkdir -p "$target"
  LLAMA_CPP_SDIST_DIR="$target" fetch_sdist "$target" >/dev/null
  exit 0
fi
if [ ! -x "$built" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "building llama-server $version, $arch (llama.cpp from the llama-cpp-python sdist; minutes on 2 cores)"
  sdist=$(fetch_sdist "$work")
  cmake_bin=$(command -v cmake || true)
  if [ -z "$cmake_bin" ]; then
    "$py" -m pip install -q cmake
    cmake_bin="$(dirname "$py")/cmake"
  fi
  tar xzf "$sdist" -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  if [ "$arch" = all-variants ]; then
    # Shared libraries found beside the server ($ORIGIN), the CPU backends loaded at start. ggml's
    # list of x86-64 levels is cut to the chosen ones (every level is a dependency of ggml itself).
    for v in $x86_levels; do
      case " $variants " in
        *" $v "*) ;;
        *) sed -i -E "/ggml_add_cpu_backend_variant\($v[ )]/d" "$src/ggml/src/CMakeLists.txt" ;;
      esac
    done
    layout=(-DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
      -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN")
  else
    layout=(-DBUILD_SHARED_LIBS=OFF)
  fi
  # No web UI, TLS or downloads of prebuilt assets.
  "$cmake_bin" -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$native \
    -DCMAKE_C_FLAGS="$cpu_flags" -DCMAKE_CXX_FLAGS="$cpu_flags" \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    "${layout[@]}" >"$work/cmake.log"
  "$cmake_bin" --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  out="$work/out" && mkdir -p "$out"
  cp "$work/build/bin/llama-server" "$out/"
  if [ "$arch" = all-variants ]; then
    cp -P "$work"/build/bin/*.so* "$out/"
  fi
  cp "$src/LICENSE" "$out/LICENSE"
  rm -rf "$(dirname "$built")" && mkdir -p "$(dirname "$(dirname "$built")")"
  mv "$out" "$(dirname "$built")"
fi
if [ "$arch" = all-variants ]; then
  dest="$(dirname "$(dirname "$target")")/libexec/llama-server"
  rm -rf "$dest" && mkdir -p "$dest"
  cp -P "$(dirname "$built")"/* "$dest/"
  ln -sfn "../libexec/llama-server/llama-server" "$target"
else
  rm -f "$target"
  install -m 755 "$built" "$target"
fi

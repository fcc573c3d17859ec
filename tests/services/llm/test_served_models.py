"""A model name the configured server does not serve is refused at start, with what it serves; a
server that cannot be asked is not refused (its retries wait it out)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from services.llm import LLMSettings, ModelNotServed, check_models_served
from tests.support.scripted_llm import ClosedPort, ScriptedLLM

pytestmark = pytest.mark.unit


def test_a_listed_model_passes_and_an_unlisted_one_is_refused_naming_what_is_served() -> None:
    with ScriptedLLM() as server:
        listed = server.base_url
        assert check_models_served(LLMSettings(base_url=listed, model="scripted")) == 1
        # The default name names no model (llama.cpp answers any): nothing to check.
        assert check_models_served(LLMSettings(base_url=listed)) == 0
        with pytest.raises(ModelNotServed) as refused:
            check_models_served(
                LLMSettings(
                    base_url=listed,
                    model="scripted",
                    judge={"model": "qwen-72b-typo"},
                    endpoints={"big": {"base_url": listed, "model": "gpt-5"}},
                )
            )
    text = str(refused.value)
    assert "PARLEY_LLM_JUDGE__MODEL='qwen-72b-typo' is not served by" in text
    assert "PARLEY_LLM_ENDPOINTS[big]='gpt-5'" in text and "it serves scripted" in text


def test_a_server_that_cannot_be_asked_is_not_refused() -> None:
    closed = ClosedPort()
    assert check_models_served(LLMSettings(base_url=f"{closed.url}/v1", model="anything")) == 0


def test_parley_ask_refuses_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from parley_cli import build_app

    with ScriptedLLM() as server:
        monkeypatch.setenv("PARLEY_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("PARLEY_LLM_MODEL", "no-such-model")
        result = CliRunner().invoke(build_app(), ["ask", "Who wrote Hamlet?", "--knowledge", "none"])
        asked = [r for r in server.requests if r.get("messages")]
    assert result.exit_code == 1, result.output
    assert "ModelNotServed" in result.output and "'no-such-model' is not served" in result.output
    assert asked == []  # no chat completion was sent

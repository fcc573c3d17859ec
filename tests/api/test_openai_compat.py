"""The OpenAI dialect's pure pieces: the model catalogue, messages to a question, settings to a
config, citations, progress lines and errors in OpenAI's shape."""

from __future__ import annotations

from typing import Any

import pytest

from api.openai_compat import (
    MODELS,
    ChatCompletionRequest,
    OpenAIError,
    citations,
    completion,
    debate_config,
    find_model,
    from_problem,
    progress_text,
    question_of,
)
from api.problems import Problem
from engine.config import DebateConfig
from engine.registry import PROTOCOLS
from engine.result import DebateResult, TranscriptRecord, Usage
from services.knowledge import KnowledgeItem
from tests.support.results import debate_result

pytestmark = pytest.mark.unit


def request(**fields: Any) -> ChatCompletionRequest:
    body: dict[str, Any] = {"model": "parley-madke", "messages": [{"role": "user", "content": "q?"}]}
    body.update(fields)
    return ChatCompletionRequest.model_validate(body)


def test_every_model_is_a_valid_config_and_every_protocol_has_one() -> None:
    for entry in MODELS.values():
        DebateConfig.model_validate(entry.config)
    assert {f"parley-{p.replace('_', '-')}" for p in PROTOCOLS} <= set(MODELS)
    assert MODELS["parley-mallm-voting"].config["mallm"]["decision"] == "simple"
    with pytest.raises(OpenAIError) as err:
        find_model("gpt-4o")
    assert (err.value.status, err.value.code, err.value.param) == (404, "model_not_found", "model")


def test_the_question_is_the_last_user_message_and_nothing_is_dropped() -> None:
    parts = [{"type": "text", "text": "What is"}, {"type": "text", "text": "the capital of France?"}]
    empty_system = [{"role": "system", "content": ""}, {"role": "user", "content": parts}]
    assert question_of(request(messages=empty_system).messages) == "What is\nthe capital of France?"
    with pytest.raises(OpenAIError, match=r"messages\.0") as err:
        question_of(
            request(
                messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}]
            ).messages
        )
    assert err.value.code == "unsupported_context"
    image = [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    with pytest.raises(OpenAIError, match="only text parts"):
        question_of(request(messages=[{"role": "user", "content": image}]).messages)
    with pytest.raises(OpenAIError, match="last message must be the user's"):
        question_of(request(messages=[{"role": "assistant", "content": "hi"}]).messages)


def test_openai_parameters_map_onto_the_config_and_parley_wins() -> None:
    entry = MODELS["parley-society"]
    config = debate_config(
        entry, request(temperature=0.3, max_tokens=64, seed=7, parley={"temperature": 0.9})
    )
    assert (config.protocol, config.temperature, config.max_tokens, config.seed) == ("society", 0.9, 64, 7)
    assert debate_config(entry, request(max_completion_tokens=32, max_tokens=64)).max_tokens == 32
    with pytest.raises(OpenAIError) as err:
        debate_config(entry, request(parley={"protocol": "mad"}))
    assert err.value.status == 400 and err.value.param == "parley.protocol"
    with pytest.raises(OpenAIError) as err:
        debate_config(entry, request(parley={"agents": 99}))
    assert err.value.status == 422 and err.value.param == "parley.agents"


def result_with_pool(selected: list[int] | None, shown: list[int]) -> DebateResult:
    items = [
        KnowledgeItem(
            n=1, source="wikipedia", title="Paris", text="…", url="https://en.wikipedia.org/wiki/Paris"
        ),
        KnowledgeItem(n=2, source="web", title="No URL", text="…"),
        KnowledgeItem(n=3, source="web", title="France", text="…", url="https://example.org/france"),
    ]
    transcript = [
        TranscriptRecord(round=1, role="select", agent=0, selected=selected),
        TranscriptRecord(
            round=1, role="debater", agent=0, knowledge=shown, prompt_tokens=10, completion_tokens=2
        ),
    ]
    return debate_result(
        items, transcript, usage=Usage(calls=2, prompt_tokens=10, completion_tokens=2, cached_tokens=4)
    )


def test_citations_are_the_selected_items_with_a_url() -> None:
    cited = citations(result_with_pool([3, 2, 3], [1, 2, 3]), "Paris")
    assert [c["url_citation"]["url"] for c in cited] == ["https://example.org/france"]
    assert cited[0] == {
        "type": "url_citation",
        "url_citation": {
            "url": "https://example.org/france",
            "title": "France",
            "start_index": 0,
            "end_index": 5,
        },
    }
    # Without a selection (a protocol that shows the whole pool), what the calls were shown.
    shown = citations(result_with_pool(None, [1, 2]), "Paris")
    assert [c["url_citation"]["title"] for c in shown] == ["Paris"]


def test_a_completion_reports_the_whole_debates_usage_and_links() -> None:
    body = completion("parley-madke", "job_1", result_with_pool([1], [1]), "http://gw/", created=5)
    assert body["choices"][0]["message"]["content"] == "Paris"
    assert body["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    assert body["parley"]["transcript"] == "http://gw/v1/debates/job_1"
    assert body["parley"]["viewer"] == "http://gw/ui/#/debate/job_1"
    assert body["id"] == "chatcmpl-job_1" and body["parley"]["answer_source"] == "summarizer"


def test_progress_lines() -> None:
    assert progress_text("pool.ready", {"items": 2, "pool": [{"title": "Paris"}, {"title": "France"}]}) == (
        "Knowledge pool ready: 2 items (Paris, France).\n"
    )
    select = {"round": 1, "role": "select", "agent": 0, "selected": [1, 3]}
    assert progress_text("turn.completed", select) == "Round 1, agent 1 selects knowledge [1], [3].\n"
    debater = {"round": 2, "role": "debater", "agent": 1, "answer": "Paris"}
    assert progress_text("turn.completed", debater) == "Round 2, agent 2 (debater): Paris\n"
    assert progress_text("turn.completed", {"round": 1, "role": "judge", "answer": None}) is None
    assert (
        progress_text("judge.verdict", {"round": 1, "consensus": False})
        == "Round 1, judge: no consensus yet.\n"
    )
    found = {"round": 1, "agent": 0, "query": "river of Paris", "added": [{"n": 5, "title": "Seine"}]}
    assert (
        progress_text("pool.search", found) == "Round 1, agent 1 searched for 'river of Paris': [5] Seine.\n"
    )
    down = {"round": 2, "agent": 1, "query": "x", "added": [], "error": "ConnectError"}
    assert "could not be reached; the debate goes on with the pool it has" in str(
        progress_text("pool.search", down)
    )


def test_problems_become_openai_errors_with_the_same_status_and_headers() -> None:
    quota = from_problem(
        Problem(429, "quota", type_="/problems/quota-exceeded", headers={"Retry-After": "100"})
    )
    assert quota.body()["error"] == {
        "message": "quota",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
    assert quota.headers == {"Retry-After": "100"}
    auth = from_problem(Problem(401, "no key", headers={"WWW-Authenticate": "Bearer"}))
    assert (auth.status, auth.type, auth.code) == (401, "authentication_error", "invalid_api_key")
    refused = from_problem(
        Problem(
            422, "parley.budget_tokens: too much", extra={"errors": [{"loc": ["parley", "budget_tokens"]}]}
        )
    )
    assert (refused.type, refused.param) == ("invalid_request_error", "parley.budget_tokens")
    assert from_problem(Problem(429, "slow", type_="/problems/rate-limited")).code == "rate_limited"

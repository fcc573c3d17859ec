"""Shared fixtures: a small NQ-style dataset, a fixed in-memory pool builder and a scripted LLM that
answers every role of both prompt styles from a question → answer table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.context import SingleModel
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient, RetryPolicy
from tests.support.scripted_llm import ScriptedLLM, request_text

# Question → what the scripted debaters answer. q1, q2 right; q3 wrong; q4 a bare number.
QUESTIONS: list[dict[str, Any]] = [
    {"id": "q1", "question": "what is the capital of france", "answers": ["Paris"]},
    {"id": "q2", "question": "who wrote hamlet", "answers": ["William Shakespeare", "Shakespeare"]},
    {"id": "q3", "question": "what is the largest planet", "answers": ["Jupiter"]},
    {"id": "q4", "question": "who painted the mona lisa", "answers": ["Leonardo da Vinci"]},
]
REPLIES = {
    "what is the capital of france": "Paris",
    "who wrote hamlet": "Shakespeare",
    "what is the largest planet": "Saturn",
    "who painted the mona lisa": "3",
}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def nq_dataset(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)


class FixedPools:
    """A PoolBuilder speaking the real interface: two items per question, and a count of builds."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.search_texts: list[str | None] = []

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        self.calls.append(question)
        self.search_texts.append(search_text)
        items = [
            KnowledgeItem(n=1, source="wikipedia", title="Encyclopedia", text=f"Facts about {question}."),
            KnowledgeItem(n=2, source="web", title="Web page", text=f"A page on {question}."),
        ]
        return KnowledgePool(pool_id=f"pool-{len(self.calls)}", question=question, items=items)


def scripted_reply(body: dict[str, Any]) -> str:
    """Plays every role of both styles: selections, verdicts, answers (looked up by question)."""
    text = request_text(body)
    fmt = body.get("response_format")
    if fmt:
        schema = fmt.get("json_schema", {}).get("schema") or fmt.get("schema") or {}
        props = schema.get("properties", {})
        if "selected" in props:
            return '{"selected": [1]}'
        if "consensus" in props:
            return '{"consensus": true}'
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    if "judge agent" in system:
        return "Both agents agree. [Yes]"
    if "You check whether" in system:
        return '{"consensus": true}'
    if "Please select knowledge" in text:
        return "Item [1] helps."
    if "Which knowledge items above" in text:
        return '{"selected": [1]}'
    for question, answer in REPLIES.items():
        if f"Question: {question}" in text:
            return f"Let me think.\nFinal answer: [{answer}]"
    return "I do not know. Final answer: [unknown]"


@pytest.fixture
def scripted() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as llm:
        llm.on(lambda body: True, scripted_reply)
        yield llm


def models_for(url: str) -> SingleModel:
    """One model for every role; one attempt so a scripted failure is an item failure at once."""
    return SingleModel(OpenAIChatClient(url, "scripted", retry=RetryPolicy(max_attempts=1)))


def asked(llm: ScriptedLLM, question: str) -> int:
    """How many requests mentioned ``question`` (to prove finished items were not redone)."""
    return sum(1 for body in llm.requests if f"Question: {question}" in request_text(body))

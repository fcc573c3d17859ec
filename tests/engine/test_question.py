"""A question is validated once, where it enters; the engine's entry points trust a validated one."""

from __future__ import annotations

import pytest

from engine import config
from engine.config import MAX_QUESTION_CHARS, Question, as_question, validate_question

pytestmark = pytest.mark.unit


def test_the_boundary_strips_bounds_and_types_the_question() -> None:
    q = validate_question("  What is the capital of France?  ")
    assert isinstance(q, Question) and q == "What is the capital of France?"
    with pytest.raises(ValueError, match="question is empty"):
        validate_question("   ")
    with pytest.raises(ValueError, match=f"the limit is {MAX_QUESTION_CHARS}"):
        validate_question("x" * (MAX_QUESTION_CHARS + 1))


def test_the_engine_validates_only_a_question_that_was_not(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def counting(question: str) -> Question:
        seen.append(question)
        return validate_question(question)

    monkeypatch.setattr(config, "validate_question", counting)
    checked = validate_question(" Who wrote Hamlet? ")
    assert as_question(checked) is checked and seen == []
    assert as_question(" Who wrote Hamlet? ") == "Who wrote Hamlet?" and seen == [" Who wrote Hamlet? "]
    with pytest.raises(ValueError, match="question is empty"):
        as_question("")

"""The LLM judge of the MADKE paper (Appendix C, "GPT4 Eval", Prompt C.1) for generative answers.

EM under-counts correct free-text answers; the paper grades them with a strong model that sees the
reference answers. The judge runs on its own endpoint and model. Its verdict is ``[True]``/``[False]``;
a reply without one is recorded as unparseable (verdict ``None`` plus the reason), never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel

from services.chat_model import ChatMessage, ChatModel, LLMError

# The role definition printed just above Prompt C.1.
JUDGE_ROLE = (
    "As a judge agent, your primary responsibility is to impartially evaluate the evaluation answer for "
    "correct. Please ensure your judgments are objective, relying solely on the coherence and alignment "
    "of the provided answers."
)
# The paper does not print its {examples}; these two show both verdicts in the same format.
JUDGE_EXAMPLES = (
    "Question: Who was the first pedestrian to be killed by a car in Britain?\n"
    "Reference answers: Bridget Driscoll\n"
    "Evaluation answer: The first pedestrian killed was [Bridget Driscoll] in 1896.\n"
    "Answer: Let's think step by step! The evaluation answer names Bridget Driscoll, which matches the "
    "reference answer. [True]\n\n"
    "Question: What is the capital city of Australia?\n"
    "Reference answers: Canberra\n"
    "Evaluation answer: [Sydney]\n"
    "Answer: Let's think step by step! The evaluation answer is Sydney, but the reference answer is "
    "Canberra. Sydney is a different city. [False]"
)
_VERDICT = re.compile(r"\[\s*(true|false)\s*\]", re.IGNORECASE)


def judge_messages(question: str, references: Sequence[str], answer: str) -> list[ChatMessage]:
    """Prompt C.1 exactly as published, with the role definition as the system message."""
    user = (
        "You need to judge the correctness of the evaluation answer based on the question and the "
        "reference answer to the question. The answer of the agents are typically denoted with the "
        "[answer] format. Return [True] if the answer to be evaluated is the correct answer to the "
        "question, otherwise return [False]. Here are some examples:\n"
        f"{JUDGE_EXAMPLES} (END OF EXAMPLES)\n\n"
        f"Question: {question}\n"
        f"Reference answers: {'; '.join(references)}\n"
        f"Evaluation answer: {answer}\n"
        "Answer: Let's think step by step!"
    )
    return [{"role": "system", "content": JUDGE_ROLE}, {"role": "user", "content": user}]


class JudgeVerdict(BaseModel):
    """A grade; ``verdict`` None = none: ``error`` says if the reply was unparseable or the call failed."""

    verdict: bool | None
    error: str | None = None
    call_failed: bool = False
    raw: str = ""
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


def parse_judge_verdict(text: str) -> tuple[bool | None, str | None]:
    """The last ``[True]``/``[False]`` in the reply (the reasoning may quote the other one earlier)."""
    found = _VERDICT.findall(text or "")
    if not found:
        return None, "no [True]/[False] in the judge's reply"
    return found[-1].lower() == "true", None


class AnswerJudge(Protocol):
    """Anything that grades an answer against references (the LLM judge, or a test double speaking it)."""

    async def grade(self, question: str, references: Sequence[str], answer: str | None) -> JudgeVerdict: ...


class LLMJudge:
    """Prompt C.1 over a ``ChatModel`` at temperature 0 (grading should not be sampled)."""

    def __init__(self, model: ChatModel, *, max_tokens: int = 256) -> None:
        self._model = model
        self._max_tokens = max_tokens

    async def grade(self, question: str, references: Sequence[str], answer: str | None) -> JudgeVerdict:
        """Ask the judge; a missing answer is False without a call (there is nothing to grade)."""
        if answer is None or not answer.strip():
            return JudgeVerdict(verdict=False, error="no answer to grade")
        try:
            completion = await self._model.complete(
                judge_messages(question, references, answer), temperature=0.0, max_tokens=self._max_tokens
            )
        except LLMError as exc:
            return JudgeVerdict(verdict=None, error=f"judge call failed: {exc}", call_failed=True)
        verdict, error = parse_judge_verdict(completion.text)
        return JudgeVerdict(
            verdict=verdict,
            error=error,
            raw=completion.text,
            model=completion.model,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
        )

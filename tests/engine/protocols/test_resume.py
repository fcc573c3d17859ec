"""A redelivered job resumes each protocol from its last checkpoint instead of starting over."""

from __future__ import annotations

from typing import Any

import pytest

from engine.config import DebateConfig
from engine.context import SingleModel
from engine.result import Checkpoint
from engine.runner import run_debate
from evaluation.kks.generator import generate_dataset
from services.knowledge import empty_pool
from services.llm.client import OpenAIChatClient
from tests.engine.protocols.helpers import QUESTION
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit


def script(server: ScriptedLLM) -> None:
    server.on("You, as the moderator", '{"Whether there is a preference": "No", "debate_answer": ""}')
    server.on("debate_answer", '{"Reason": "r", "debate_answer": "Paris"}')
    server.on("answer candidates", "Paris, Lyon")
    server.on("Extract the final solution", "Paris")
    server.on("You are tasked with voting", "1")
    server.on('"players"', lambda body: '{"players": [], "explanation": ""}')
    server.on("", "[DISAGREE] The answer is [Paris].")


async def run(server: ScriptedLLM, cfg: DebateConfig, question: str, resume: Checkpoint | None = None) -> Any:
    checkpoints: list[Checkpoint] = []

    async def keep(cp: Checkpoint) -> None:
        checkpoints.append(cp.model_copy(deep=True))

    async with OpenAIChatClient(server.base_url, "scripted") as client:
        result = await run_debate(
            question, empty_pool(question), cfg, SingleModel(client), on_checkpoint=keep, resume=resume
        )
    return result, checkpoints


@pytest.mark.parametrize(
    "fields",
    [
        {"protocol": "society", "agents": 2, "rounds": 3},
        {"protocol": "mad", "rounds": 3},
        {"protocol": "mallm", "agents": 2, "rounds": 3, "mallm": {"decision": "unanimity"}},
        {"protocol": "mallm", "agents": 2, "rounds": 3, "mallm": {"decision": "simple", "vote_after": 2}},
    ],
)
async def test_resume_after_round_one_repeats_no_call(scripted: ScriptedLLM, fields: dict[str, Any]) -> None:
    script(scripted)
    cfg = DebateConfig(**fields, sequential=True)
    full, checkpoints = await run(scripted, cfg, QUESTION)
    assert len(checkpoints) == full.rounds >= 2
    first = checkpoints[0]
    calls_in_round_one = len(first.transcript)
    scripted.requests.clear()
    resumed, _ = await run(scripted, cfg, QUESTION, resume=first)
    assert len(scripted.requests) == full.usage.calls - calls_in_round_one
    assert resumed.answer == full.answer and resumed.rounds == full.rounds
    assert resumed.usage.calls == full.usage.calls


async def test_kks_resume(scripted: ScriptedLLM) -> None:
    puzzle = next(iter(generate_dataset([4], 1, seed=2)))
    record = puzzle.record()
    script(scripted)
    cfg = DebateConfig(protocol="kks", agents=2, sequential=True, reasks=0)
    full, checkpoints = await run(scripted, cfg, record["question"])
    assert len(checkpoints) == 4 + 2
    scripted.requests.clear()
    resumed, _ = await run(scripted, cfg, record["question"], resume=checkpoints[2])
    assert len(scripted.requests) == full.usage.calls - len(checkpoints[2].transcript)
    assert resumed.usage.calls == full.usage.calls


def test_a_stored_state_of_the_wrong_shape_fails_before_any_round() -> None:
    from pydantic import ValidationError

    from engine.outcome import ProtocolRun
    from engine.protocols.madke.state import MadkeState
    from engine.result import Checkpoint

    assert ProtocolRun().resume_state(MadkeState) is None
    good = {"responses": [["r"]], "answers": [["a", None]], "consensus": False}
    assert ProtocolRun(resume=Checkpoint(round=1, transcript=[], state=good)).resume_state(MadkeState) == good
    with pytest.raises(ValidationError):
        ProtocolRun(resume=Checkpoint(round=1, transcript=[], state={"responses": "x"})).resume_state(
            MadkeState
        )

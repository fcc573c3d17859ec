"""The KKS protocol end to end against the scripted LLM (puzzles from the evaluation generator)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evaluation.kks.generator import generate_dataset
from evaluation.kks.scoring import score_kks
from tests.engine.protocols.helpers import debate
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.unit


async def test_kks_protocol_end_to_end(scripted: ScriptedLLM) -> None:
    puzzle = next(iter(generate_dataset([4], 1, seed=11)))
    record = puzzle.record()
    truth = json.dumps(
        {"players": [{"name": p, "role": r} for p, r in puzzle.solution.items()], "explanation": "e"}
    )
    wrong_player = puzzle.players[0]
    wrong_role = "spy" if puzzle.solution[wrong_player] != "spy" else "knight"
    wrong_players = [
        {"name": p, "role": wrong_role if p == wrong_player else r} for p, r in puzzle.solution.items()
    ]
    wrong = json.dumps({"players": wrong_players, "explanation": "e", "confidence": 4})

    def role_reply(body: dict[str, Any]) -> str:
        text = request_text(body)
        player = text.split("We are debating the role of ", 1)[1].split(".", 1)[0]
        return json.dumps({"player_role": player, "role": puzzle.solution[player], "agree_reasoning": "ok"})

    scripted.on("CURRENT FOCUS: We are debating", role_reply)
    scripted.on("This is the FINAL DISCUSSION phase", [truth, truth, wrong])
    scripted.on("self-adjustment", truth)
    scripted.on("You are participating in a multi-agent debate", [truth, wrong, wrong])
    result, events = await debate(
        scripted, question=record["question"], protocol="kks", agents=3, sequential=True, confidence=True
    )
    players = len(puzzle.players)
    assert result.usage.calls == 3 + players * 2 * 3 + 3
    assert score_kks(result.answer, puzzle.solution) == (1.0, 1.0)
    assert "per-player majority vote of 3 agents" in result.answer_source
    assert not result.consensus  # one agent kept a wrong role
    assert [e for e, _ in events].count("round.completed") == players + 2
    first_debate = next(
        request_text(b) for b in scripted.requests if "CURRENT FOCUS: We are debating" in request_text(b)
    )
    assert "Confidence: 4" in first_debate  # confidences are visible


async def test_kks_protocol_refuses_a_non_puzzle(scripted: ScriptedLLM) -> None:
    with pytest.raises(ValueError, match="kks"):
        await debate(scripted, protocol="kks", agents=2)


async def test_kks_protocol_robust_style_uses_schemas(scripted: ScriptedLLM) -> None:
    puzzle = next(iter(generate_dataset([5], 1, seed=4)))
    truth = json.dumps(
        {"players": [{"name": p, "role": r} for p, r in puzzle.solution.items()], "explanation": "e"}
    )

    def role_reply(body: dict[str, Any]) -> str:
        player = request_text(body).split("The team is debating ", 1)[1].split("'s role", 1)[0]
        return json.dumps({"role": puzzle.solution[player]})

    scripted.on("The team is debating", "?", json_reply=role_reply)
    scripted.on("Deduce every player's role", "?", json_reply=truth)
    scripted.on("Reply with JSON only", "?", json_reply=truth)
    result, _ = await debate(
        scripted, question=puzzle.record()["question"], protocol="kks", agents=2, prompt_style="robust"
    )
    assert all("response_format" in b for b in scripted.requests)
    assert score_kks(result.answer, puzzle.solution) == (1.0, 1.0) and result.consensus

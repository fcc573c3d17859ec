"""``mallm`` (Kaesberg et al.) end to end: consensus, voting with ties, drafting, Collective Improvement."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.config import DebateConfig
from tests.engine.protocols.helpers import debate, texts
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.unit

EXTRACT = "Extract the final solution"
DISCUSS = "Improve the current solution"
PROPOSE = "Propose a solution"
VOTE = "You are tasked with voting"


async def test_majority_consensus_stops_at_the_threshold(scripted: ScriptedLLM) -> None:
    scripted.on(EXTRACT, "Paris")
    scripted.on(DISCUSS, "[AGREE] The capital is [Paris].")
    scripted.on(PROPOSE, "I propose [Paris].")
    result, _events = await debate(scripted, protocol="mallm", agents=3, mallm={"decision": "majority"})
    # agent 0 proposes, agent 1 agrees: 2 of 3 >= 0.5, so agent 2 never speaks
    roles = [(r.round, r.role, r.agent) for r in result.transcript]
    assert roles == [(1, "debater", 0), (1, "debater", 1), (1, "extract", 1)]
    assert result.answer == "Paris" and result.consensus
    assert result.answer_source.startswith("majority consensus (2/3 agree)")
    # the [AGREE] tag is never taken for the answer
    assert result.transcript[1].answer == "Paris" and result.transcript[1].extra["agreed"] is True
    assert "Current solution: Paris" in texts(scripted, DISCUSS)[0]


async def test_unanimity_with_four_agents_falls_back_at_the_turn_limit(scripted: ScriptedLLM) -> None:
    scripted.on(EXTRACT, "Paris")
    scripted.on(DISCUSS, ["[AGREE] [Paris]", "[AGREE] [Paris]", "[DISAGREE] It is [Lyon]."] * 3)
    scripted.on(PROPOSE, "[Paris]")
    result, _ = await debate(
        scripted,
        protocol="mallm",
        agents=4,
        rounds=2,
        mallm={"decision": "unanimity", "fallback": "first_agent"},
    )
    assert result.rounds == 2 and not result.consensus
    assert "fallback: first agent's solution" in result.answer_source
    assert result.answer == result.final_answers[0]
    assert not [r for r in result.transcript if r.role == "extract"]


async def test_simple_vote_tie_adds_a_turn_and_revotes(scripted: ScriptedLLM) -> None:
    scripted.on(VOTE, ["1", "2", "2", "2"])  # turn 1: tie 1-1; turn 2: both vote for solution 2
    scripted.on("Here are the other participants' solutions", ["[Paris]", "[Lyon]"])
    scripted.on(PROPOSE, ["[Paris]", "[Lyon]"])
    result, events = await debate(
        scripted,
        protocol="mallm",
        agents=2,
        rounds=3,
        sequential=True,
        mallm={"decision": "simple", "paradigm": "collective_improvement", "vote_after": 1},
    )
    votes = [(r.round, r.agent) for r in result.transcript if r.role == "vote"]
    assert votes == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert result.rounds == 2 and result.answer == "Lyon" and result.consensus
    assert result.answer_source.startswith("simple vote (scores [0.0, 2.0]")
    verdicts = [d for e, d in events if e == "judge.verdict"]
    assert verdicts[0]["tie"] is True and verdicts[1]["consensus"] is True
    assert "Solution 1: Paris\nSolution 2: Lyon" in texts(scripted, VOTE)[0]


async def test_a_vote_after_more_turns_than_the_debate_has_is_held_after_its_last_turn(
    scripted: ScriptedLLM,
) -> None:
    scripted.on(VOTE, "2")
    scripted.on("Here are the other participants' solutions", ["[Paris]", "[Lyon]"])
    scripted.on(PROPOSE, ["[Paris]", "[Lyon]"])
    result, events = await debate(
        scripted,
        protocol="mallm",
        agents=2,
        rounds=2,
        sequential=True,
        mallm={"decision": "simple", "paradigm": "collective_improvement", "vote_after": 5},
    )
    # both turns discussed, then the one vote after turn 2 (not none: the fallback is not what decides)
    assert [(r.round, r.role) for r in result.transcript if r.role != "debater"] == [(2, "vote"), (2, "vote")]
    assert [d["round"] for e, d in events if e == "judge.verdict"] == [2]
    assert result.rounds == 2 and result.answer == "Lyon" and result.consensus
    assert result.answer_source.endswith("held after the last turn (2): vote_after=5 exceeds rounds")


async def test_a_tie_in_the_vote_after_the_last_turn_falls_back(scripted: ScriptedLLM) -> None:
    scripted.on(VOTE, ["1", "2"])
    scripted.on(PROPOSE, ["[Paris]", "[Lyon]"])
    result, _ = await debate(
        scripted,
        protocol="mallm",
        agents=2,
        rounds=1,
        sequential=True,
        mallm={"decision": "simple", "paradigm": "collective_improvement", "vote_after": 3},
    )
    assert len([r for r in result.transcript if r.role == "vote"]) == 2
    assert result.rounds == 1 and not result.consensus
    assert result.answer == "Paris" and "fallback: first agent's solution" in result.answer_source


async def test_collective_improvement_shows_only_the_others_previous_solutions(scripted: ScriptedLLM) -> None:
    scripted.on(VOTE, "1")
    scripted.on("Here are the other participants' solutions", ["[Paris]", "[Lyon]", "[Nice]"])
    scripted.on(PROPOSE, ["[Paris]", "[Lyon]", "[Nice]"])
    await debate(
        scripted,
        protocol="mallm",
        agents=3,
        rounds=2,
        sequential=True,
        mallm={"decision": "approval", "paradigm": "collective_improvement", "vote_after": 2},
    )
    later = texts(scripted, "Here are the other participants' solutions")
    assert len(later) == 3
    assert "Participant 2: [Lyon]" in later[0] and "Participant 3: [Nice]" in later[0]
    assert "Participant 1:" not in later[0]
    assert not texts(scripted, "[AGREE]")  # no agreement in CI


async def test_cumulative_robust_schema_and_unreadable_votes_abstain(scripted: ScriptedLLM) -> None:
    scripted.on(
        "Distribute 10 points",
        "I like the first",
        json_reply=['{"points": {"1": 12, "2": 3}}', "nope", "nope"],
    )
    scripted.on("Answer on your own", ["Final answer: [Paris]", "Final answer: [Lyon]"])
    scripted.on('"agree": true or false', '{"agree": false, "reason": "r", "answer": "Lyon"}')
    result, _ = await debate(
        scripted,
        protocol="mallm",
        agents=2,
        rounds=1,
        sequential=True,
        reasks=1,
        prompt_style="robust",
        mallm={"decision": "cumulative", "paradigm": "drafting", "vote_after": 1},
    )
    votes = [r for r in result.transcript if r.role == "vote"]
    assert len(votes) == 3  # agent 0 readable at once; agent 1 re-asked once, then abstained
    assert votes[-1].extra.get("abstained") is True
    assert all("response_format" in b for b in scripted.requests if "Distribute 10 points" in request_text(b))
    assert result.answer == "Paris" and "1 abstained" in result.answer_source
    assert "scaled to 10" in result.answer_source


async def test_robust_turns_are_json_with_a_schema_and_agreement_is_a_boolean(scripted: ScriptedLLM) -> None:
    """Robust style, two agents, majority consensus: the first speaker gets the answer schema; the
    second states agreement as a JSON boolean (its schema requires it), which decides as [AGREE] does
    in the paper's wording (the proposer's own half is no consensus); the extraction is
    schema-constrained too."""
    agreeing = '"agree": true or false'
    scripted.on(agreeing, "free text", json_reply='{"agree": true, "reason": "It is.", "answer": "Paris"}')
    scripted.on("Answer on your own", "free text", json_reply='{"reason": "r", "answer": "Paris"}')
    scripted.on("previous response", "free text", json_reply='{"reason": "r", "answer": "Paris"}')
    result, _ = await debate(
        scripted, protocol="mallm", agents=2, prompt_style="robust", mallm={"decision": "majority"}
    )
    assert [(r.role, r.agent) for r in result.transcript] == [("debater", 0), ("debater", 1), ("extract", 1)]
    assert result.answer == "Paris" and result.consensus
    assert result.transcript[1].extra["agreed"] is True and result.transcript[1].parse_error is None
    schemas = [b["response_format"]["json_schema"]["schema"]["required"] for b in scripted.requests]
    assert schemas == [["reason", "answer"], ["agree", "reason", "answer"], ["reason", "answer"]]
    assert "[AGREE]" not in texts(scripted, agreeing)[0]


async def test_drafting_first_turn_is_independent(scripted: ScriptedLLM) -> None:
    scripted.on(EXTRACT, "Lyon")
    scripted.on(DISCUSS, "[AGREE] [Lyon]")
    scripted.on(PROPOSE, ["[Paris]", "[Lyon]"])
    result, _ = await debate(
        scripted, protocol="mallm", agents=2, rounds=3, sequential=True, mallm={"paradigm": "drafting"}
    )
    drafts = texts(scripted, PROPOSE)
    assert len(drafts) == 2 and all("discussion so far" not in d for d in drafts)
    assert result.rounds == 2 and result.answer == "Lyon" and result.consensus


def test_invalid_combinations_name_the_field() -> None:
    with pytest.raises(ValidationError, match="paradigm"):
        DebateConfig.model_validate(
            {"protocol": "mallm", "mallm": {"decision": "majority", "paradigm": "collective_improvement"}}
        )
    with pytest.raises(ValidationError, match="rounds"):
        DebateConfig(protocol="society", rounds=0)
    with pytest.raises(ValidationError, match="ordering"):
        DebateConfig(protocol="society", ordering="alphabetical")

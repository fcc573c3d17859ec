"""MALLM decision rules on scripted ballots: pure functions, no LLM."""

from __future__ import annotations

import pytest

from engine.protocols.mallm import decisions as dr

pytestmark = pytest.mark.unit


def test_simple_vote_winner_and_tie() -> None:
    assert dr.simple_vote([0, 0, 1], 2).winner == 0
    tie = dr.simple_vote([0, 1], 2)
    assert tie.winner is None and tie.tie and not tie.decided
    # 2-2 with four agents is a tie, an abstention does not break it
    four = dr.simple_vote([0, 1, None, 1], 3)
    assert four.winner == 1 and four.abstentions == 1
    assert dr.simple_vote([0, 0, 1, 1], 2).tie


def test_simple_vote_out_of_range_and_all_abstain() -> None:
    r = dr.simple_vote([7, None, None], 2)
    assert r.winner is None and not r.tie and r.abstentions == 3 and "no valid votes" in r.notes[-1]


@pytest.mark.parametrize(
    ("supporters", "n", "threshold", "rule", "expected"),
    [
        (2, 4, 0.5, ">=", True),  # exactly half is a majority with >=
        (2, 4, 0.5, ">", False),  # but not with the strict reading
        (2, 3, 0.5, ">=", True),
        (1, 3, 0.5, ">=", False),
        (2, 3, 0.66, ">=", True),  # 0.667 >= 0.66
        (2, 3, 0.66, ">", True),
        (2, 4, 0.66, ">=", False),
        (3, 4, 0.66, ">=", True),
        (2, 3, 1.0, ">=", False),  # unanimity needs everyone
        (3, 3, 1.0, ">=", True),
        (3, 4, 1.0, ">=", False),
        (4, 4, 1.0, ">=", True),
    ],
)
def test_consensus_thresholds_with_three_and_four_agents(
    supporters: int, n: int, threshold: float, rule: str, expected: bool
) -> None:
    assert dr.threshold_met(supporters, n, threshold, rule) is expected


def test_agreement_counting_resets_on_disagreement() -> None:
    st = dr.AgreementState()
    st.update(0, None, "Paris")
    st.update(1, True, "Paris")
    assert st.supporters == {0, 1} and st.reached(4, 0.5)
    st.update(2, False, "Lyon")  # disagreement proposes a new solution and resets the count
    assert st.solution == "Lyon" and st.proposer == 2 and st.supporters == {2}
    assert not st.reached(4, 0.5)
    st.update(3, True, None)
    assert st.reached(4, 0.5) and not st.reached(4, 0.5, ">")


def test_the_proposer_alone_is_no_consensus() -> None:
    """Two agents, majority (50 %, >=): the proposer's own support is half, but nobody has agreed yet;
    the second agent's agreement decides. A single agent decides alone."""
    st = dr.AgreementState()
    st.update(0, None, "Paris")
    assert not st.reached(2, 0.5) and not st.reached(2, 0.0)
    st.update(1, True, "Paris")
    assert st.reached(2, 0.5)
    alone = dr.AgreementState()
    alone.update(0, None, "Paris")
    assert alone.reached(1, 1.0)


def test_ranked_borda_with_invalid_entries() -> None:
    # candidates 0..2; ranking 2 contains an out-of-range entry and a repeat, which are dropped
    r = dr.ranked_vote([[0, 1, 2], [1, 9, 1, 0], [1, 0, 2]], 3)
    assert r.scores == [2 + 1 + 1, 1 + 2 + 2, 0 + 0 + 0]
    assert r.winner == 1
    assert any("invalid or repeated" in n for n in r.notes)
    empty = dr.ranked_vote([[5, 6], None], 3)
    assert empty.winner is None and empty.abstentions == 2


def test_ranked_tie() -> None:
    r = dr.ranked_vote([[0, 1], [1, 0]], 2)
    assert r.tie and r.winner is None


def test_cumulative_allocations_that_do_not_sum_to_budget() -> None:
    # over budget (20 points) is scaled down to 10: 15/5 -> 7.5/2.5
    r = dr.cumulative_vote([{0: 15, 1: 5}, {1: 4}, {0: -3, 1: 2, 7: 10}], 2, 10)
    assert r.scores == [7.5, 2.5 + 4 + 2]
    assert r.winner == 1
    assert any("scaled to 10" in n for n in r.notes)
    assert any("dropped entries" in n for n in r.notes)
    tie = dr.cumulative_vote([{0: 5, 1: 5}], 2, 10)
    assert tie.tie


def test_approval_without_a_winner() -> None:
    everyone = dr.approval_vote([[0, 1], [0, 1], [1, 0]], 2)
    assert everyone.tie and everyone.winner is None
    nobody = dr.approval_vote([[], [9], None], 2)
    assert nobody.winner is None and not nobody.tie and nobody.abstentions == 3
    assert dr.approval_vote([[0, 1], [1]], 2).winner == 1


def test_vote_parsers() -> None:
    assert dr.parse_simple_vote("I vote for Solution 2.", 1) == 1
    assert dr.parse_simple_vote('{"vote": 1}', 1) == 0
    assert dr.parse_simple_vote("no idea", 1) is None
    assert dr.parse_approval("1, 3", 1) == [0, 2]
    assert dr.parse_approval('{"approved": [2]}', 1) == [1]
    assert dr.parse_ranking("2 1 3", 1) == [1, 0, 2]
    assert dr.parse_ranking("0 2 1", 0) == [0, 2, 1]
    assert dr.parse_allocation('Here: {"1": 6, "2": 4}', 1) == {0: 6.0, 1: 4.0}
    assert dr.parse_allocation('{"points": {"1": 10}}', 1) == {0: 10.0}
    assert dr.parse_allocation('{"1": "lots"}', 1) is None
    assert dr.parse_allocation("ten for the first", 1) is None


def test_parse_agreement() -> None:
    assert dr.parse_agreement("[AGREE] yes, Paris.") == (True, None)
    assert dr.parse_agreement("[DISAGREE] it is Lyon")[0] is False
    assert dr.parse_agreement("I disagree, it is Lyon")[0] is False
    assert dr.parse_agreement("It is Paris.")[0] is None


def test_every_voting_decision_has_its_rule_object() -> None:
    from engine.protocols.mallm.decisions import VOTING_RULES
    from engine.protocols.mallm.settings import VOTING_DECISIONS

    assert set(VOTING_RULES) == VOTING_DECISIONS
    assert all(rule.name == name for name, rule in VOTING_RULES.items())


def test_every_decision_is_a_consensus_or_a_voting_rule_object() -> None:
    from typing import get_args

    from engine.protocols.mallm.settings import MallmDecision

    names = set(get_args(MallmDecision))
    assert set(dr.CONSENSUS_RULES) | set(dr.VOTING_RULES) == names
    assert not set(dr.CONSENSUS_RULES) & set(dr.VOTING_RULES)
    assert all(rule.name == name for name, rule in dr.CONSENSUS_RULES.items())


def test_consensus_rules_read_their_threshold_from_the_settings() -> None:
    from engine.protocols.mallm.settings import MallmSettings

    agreement = dr.AgreementState()
    agreement.update(0, None, "Paris")
    agreement.update(1, True, None)  # 2 of 4 agree
    ms = MallmSettings(decision="majority")
    assert dr.CONSENSUS_RULES["majority"].reached(agreement, 4, ms)
    assert not dr.CONSENSUS_RULES["majority"].reached(
        agreement, 4, ms.model_copy(update={"threshold_rule": ">"})
    )
    assert not dr.CONSENSUS_RULES["supermajority"].reached(
        agreement, 4, MallmSettings(decision="supermajority")
    )
    loose = MallmSettings(decision="supermajority", supermajority_threshold=0.5)
    assert dr.CONSENSUS_RULES["supermajority"].reached(agreement, 4, loose)
    assert not dr.CONSENSUS_RULES["unanimity"].reached(agreement, 4, MallmSettings(decision="unanimity"))
    agreement.update(2, True, None)
    agreement.update(3, True, None)
    assert dr.CONSENSUS_RULES["unanimity"].reached(agreement, 4, MallmSettings(decision="unanimity"))
    assert ms.threshold() == 0.5 and MallmSettings(decision="unanimity").threshold() == 1.0
    assert MallmSettings(decision="ranked").threshold() == 1.0

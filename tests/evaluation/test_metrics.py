"""Metric functions against hand-computed cases."""

from __future__ import annotations

import pytest

from engine.protocols.kks import parse_assignment
from evaluation import metrics
from evaluation.items import Item
from evaluation.kks.scoring import score as kks_score
from evaluation.run_diagnostics import example_answers, knowledge_label
from evaluation.scoring import score_answer

pytestmark = pytest.mark.unit


def test_exact_match_uses_squad_normalisation_and_best_alias() -> None:
    assert metrics.exact_match("The Beatles!", ["beatles"]) == 1.0
    assert metrics.exact_match("Beatles", ["The Rolling Stones", "the  Beatles"]) == 1.0
    assert metrics.exact_match("Beatles band", ["Beatles"]) == 0.0
    assert metrics.exact_match(None, ["x"]) == 0.0
    # An answer that normalises to nothing never matches, even an empty alias.
    assert metrics.exact_match("the", ["a"]) == 0.0


def test_f1_hand_computed() -> None:
    # pred tokens: william, shakespeare, playwright; gold: william, shakespeare
    # common 2 -> P = 2/3, R = 2/2 -> F1 = 2*(2/3)*1/(2/3+1) = 0.8
    assert metrics.f1_score("William Shakespeare, playwright", ["William Shakespeare"]) == pytest.approx(0.8)
    # best over aliases: "Shakespeare" gives P=1/3, R=1 -> 0.5; the full name gives 0.8
    assert metrics.f1_score(
        "William Shakespeare playwright", ["Shakespeare", "William Shakespeare"]
    ) == pytest.approx(0.8)
    # repeated tokens count once per occurrence: pred "paris paris", gold "paris" -> P=1/2, R=1 -> 2/3
    assert metrics.f1_score("Paris Paris", ["Paris"]) == pytest.approx(2 / 3)
    assert metrics.f1_score("London", ["Paris"]) == 0.0
    assert metrics.f1_score("", ["Paris"]) == 0.0


def test_contains_respects_word_boundaries() -> None:
    assert metrics.contains_match("It was Bridget Driscoll, in 1896.", ["bridget driscoll"]) == 1.0
    assert metrics.contains_match("someone else", ["one"]) == 0.0
    assert metrics.contains_match("one season", ["one"]) == 1.0


def test_answer_shape_diagnostics() -> None:
    assert metrics.is_bare_number("3")
    assert metrics.is_bare_number("1, 4")
    assert metrics.is_bare_number("[2]")
    assert not metrics.is_bare_number("1896 London")
    assert not metrics.is_bare_number(None)
    # With the pool size known, only numbers that name a pool item count as knowledge references.
    assert metrics.is_bare_number("3", pool_size=5)
    assert not metrics.is_bare_number("1703", pool_size=5)
    assert not metrics.is_bare_number("3", pool_size=0)
    assert not metrics.is_bare_number("2, 9", pool_size=5)
    # The robust style labels items (K1)…(Kn): a plain number is a count or a year, "K3" is a label.
    k_label = knowledge_label("robust")
    assert not metrics.is_bare_number("3", pool_size=5, label=k_label)
    assert metrics.is_bare_number("K3", pool_size=5, label=k_label)
    assert metrics.is_bare_number("(K2), K4", pool_size=5, label=k_label)
    assert not metrics.is_bare_number("K9", pool_size=5, label=k_label)
    assert knowledge_label("no-such-style") is knowledge_label("paper")
    assert example_answers("no-such-style") == example_answers("paper") == ("Bridget Driscoll", "Canberra")
    assert metrics.is_placeholder("Your answer.")
    assert metrics.is_placeholder("")
    assert metrics.is_placeholder(None)
    assert not metrics.is_placeholder("Paris")
    assert metrics.is_placeholder("The other side is correct.")  # a debater agreeing in the answer slot
    assert metrics.is_placeholder("...") and not metrics.is_placeholder("@")
    assert metrics.is_example_copy("bridget driscoll", ["Bridget Driscoll"])
    assert not metrics.is_example_copy("Driscoll", ["Bridget Driscoll"])


def test_fever_labels_and_multiple_choice() -> None:
    assert metrics.fever_label("SUPPORTS") == "SUPPORTS"
    assert metrics.fever_label("The claim is refuted.") == "REFUTES"
    assert metrics.fever_label("NOT ENOUGH INFO") == "NOT ENOUGH INFO"
    assert metrics.fever_label("not enough information to support it") == "NOT ENOUGH INFO"
    assert metrics.fever_label("maybe") is None
    choices = ["Paris", "London", "Rome", "Berlin"]
    assert metrics.mc_choice("B", choices) == 1
    assert metrics.mc_choice("(c)", choices) == 2
    assert metrics.mc_choice("D. Berlin", choices) == 3
    assert metrics.mc_choice("rome", choices) == 2
    assert metrics.mc_choice("The answer is A", choices) == 0
    assert metrics.mc_choice("E", choices) is None


def test_kks_strict_and_smooth() -> None:
    gold = {"A": "knight", "B": "knave", "C": "spy"}
    predicted = parse_assignment("A is a knight, B: spy and C is the spy", list(gold))
    assert predicted == {"A": "knight", "B": "spy", "C": "spy"}
    assert kks_score(predicted, gold) == (0.0, pytest.approx(2 / 3))
    assert kks_score(gold, gold) == (1.0, 1.0)
    assert kks_score({}, gold) == (0.0, 0.0)


def test_co2_and_cons_hand_computed() -> None:
    # 5 questions: (consistent, correct)
    outcomes = [(True, True), (True, False), (False, True), (True, True), (False, False)]
    co2, cons = metrics.co2_cons(outcomes)
    assert co2 == pytest.approx(2 / 5)  # consistent AND correct: items 1 and 4
    assert cons == pytest.approx(3 / 5)  # consistent: items 1, 2, 4
    assert metrics.co2_cons([]) == (0.0, 0.0)
    assert metrics.is_consistent(["Paris", "paris."])
    assert not metrics.is_consistent(["Paris", None])
    assert not metrics.is_consistent(["Paris", "Rome"])


def test_paired_bootstrap_fixed_seed() -> None:
    a = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    b = [1, 1, 1, 1, 1, 0, 1, 1, 1, 0]  # b is right on 3 more items -> diff +0.3
    ci = metrics.paired_bootstrap(a, b, samples=20_000, seed=7)
    assert ci.diff == pytest.approx(0.3)
    # Per-item differences are 0 or 1 with mean 0.3: every resampled mean is a multiple of 0.1 in [0, 1].
    assert 0.0 <= ci.low <= ci.diff <= ci.high <= 1.0
    assert round(ci.low * 10) == pytest.approx(ci.low * 10)
    # Same seed, same interval, to the bit.
    again = metrics.paired_bootstrap(a, b, samples=20_000, seed=7)
    assert (again.low, again.high) == (ci.low, ci.high)
    # By hand: a resampled mean is Binomial(10, 0.3) / 10. P(X=0) = 0.7**10 = 0.028 >= 0.025, so the
    # 2.5% point is 0.0; P(X<=5) = 0.953 < 0.975 <= P(X<=6) = 0.989, so the 97.5% point is 0.6.
    assert (ci.low, ci.high) == pytest.approx((0.0, 0.6))
    assert not ci.significant  # 3 wins out of 10 could be noise


def test_paired_bootstrap_degenerate_cases() -> None:
    same = metrics.paired_bootstrap([1, 0, 1], [1, 0, 1], samples=500, seed=1)
    assert (same.diff, same.low, same.high) == (0.0, 0.0, 0.0)
    assert not same.significant
    better = metrics.paired_bootstrap([0] * 30, [1] * 30, samples=500, seed=1)
    assert (better.low, better.high) == (1.0, 1.0)
    assert better.significant
    worse = metrics.paired_bootstrap([1] * 20 + [0] * 5, [0] * 20 + [0] * 5, samples=500, seed=1)
    assert worse.high < 0 and worse.significant
    with pytest.raises(ValueError):
        metrics.paired_bootstrap([1], [1, 0])
    assert metrics.paired_bootstrap([], []).n == 0


def test_score_answer_by_kind() -> None:
    qa = Item(id="1", question="q", answers=["Bridget Driscoll"])
    s = score_answer(qa, "It was Bridget Driscoll", primary="em")
    assert (s.em, s.contains, s.correct) == (0.0, 1.0, 0.0)
    assert score_answer(qa, "It was Bridget Driscoll", primary="contains").correct == 1.0
    assert score_answer(qa, "wrong", primary="judge", judge=True).correct == 1.0
    fever = Item(id="2", question="q", answers=["REFUTES"], kind="fever")
    assert score_answer(fever, "refuted").correct == 1.0
    mc = Item(
        id="3", question="q", answers=["C", "Rome"], kind="mc", meta={"choices": ["Paris", "London", "Rome"]}
    )
    assert score_answer(mc, "(C)").choice == "C"
    assert score_answer(mc, "London").correct == 0.0
    kks = Item(
        id="4",
        question="q",
        answers=["A: knight, B: knave"],
        kind="kks",
        meta={"solution": {"A": "knight", "B": "knave"}},
    )
    s = score_answer(kks, "A is a knight and B is a spy")
    assert (s.strict, s.smooth, s.correct) == (0.0, 0.5, 0.0)

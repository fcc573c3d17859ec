"""The strict contains on hand-made cases: lists, echoes, aliases that hold separators, Unicode."""

from __future__ import annotations

import pytest
import typer

from evaluation.cli_args import check_choices
from evaluation.items import Item
from evaluation.metrics import contains_match
from evaluation.scoring import score_answer
from evaluation.strict_contains import normalize_strict, strict_contains

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("answer", "golds", "question", "strict"),
    [
        # A sentence answer that names the gold is credited, as by contains.
        (
            "It was Bridget Driscoll",
            ["Bridget Driscoll"],
            "Who was the first pedestrian killed by a car?",
            1.0,
        ),
        ("The Beatles.", ["Beatles"], "Which band recorded Abbey Road?", 1.0),
        # Lists of candidates are not, whichever separator they use.
        ("Paris, Lyon, Marseille", ["Paris"], "What is the capital of France?", 0.0),
        ("Paris or Lyon", ["Paris"], "What is the capital of France?", 0.0),
        ("Paris; Lyon", ["Paris"], "What is the capital of France?", 0.0),
        ("Paris/Lyon", ["Paris"], "What is the capital of France?", 0.0),
        ("Paris and Lyon", ["Paris"], "What is the capital of France?", 0.0),
        ("both Paris and Lyon", ["Paris"], "What is the capital of France?", 0.0),
        # An alias that holds a separator stays whole.
        ("Lewis and Clark", ["Lewis and Clark"], "Who led the Corps of Discovery?", 1.0),
        ("Washington, D.C.", ["Washington, D.C."], "Where is the White House?", 1.0),
        ("It was Washington, D.C.", ["Washington D.C."], "Where is the White House?", 1.0),
        # The longest alias that matches is set aside first.
        ("New York City", ["New York", "New York City"], "Which city hosts the UN?", 1.0),
        # An echo of the question earns nothing...
        ("Persian Gulf War", ["Persian Gulf War", "Gulf War"], "When did the Persian Gulf War start?", 0.0),
        # ...unless the question offers the choice.
        ("the Gulf War", ["Gulf War"], "Which came first, the Gulf War or the Korean War?", 1.0),
        # Unicode spaces, full-width letters, curly quotes and dashes normalise alike.
        ("Bridget\u00a0Driscoll", ["Bridget Driscoll"], "", 1.0),
        ("\uff30\uff41\uff52\uff49\uff53", ["Paris"], "", 1.0),
        ("\u201cSaint\u2013Exup\u00e9ry\u201d", ["Saint-Exup\u00e9ry"], "", 1.0),
        # Word boundaries: "one" is not in "someone"; no answer earns nothing.
        ("someone", ["one"], "", 0.0),
        ("", ["Paris"], "", 0.0),
        ("\u2026", ["Paris"], "", 0.0),
    ],
)
def test_strict_contains(answer: str, golds: list[str], question: str, strict: float) -> None:
    assert strict_contains(answer, golds, question) == strict


def test_contains_credits_what_strict_refuses() -> None:
    # The two are different metrics: the old one stays available by name.
    answer, golds = "Paris, Lyon, Marseille", ["Paris"]
    assert contains_match(answer, golds) == 1.0
    assert strict_contains(answer, golds, "What is the capital of France?") == 0.0


def test_normalisation_is_one_for_answers_golds_and_questions() -> None:
    assert normalize_strict("  The\u2003U.S.A.\u00a0") == "usa"
    assert normalize_strict("\u201cSaint\u2013Exup\u00e9ry\u201d") == normalize_strict("Saint-Exup\u00e9ry")
    assert normalize_strict(None) == ""


def test_a_run_may_take_it_as_its_accuracy_and_records_it_whatever_the_primary() -> None:
    item = Item(id="q", question="What is the capital of France?", answers=["Paris"])
    listed = score_answer(item, "Paris, Lyon", primary="strict_contains")
    assert (listed.correct, listed.contains, listed.strict_contains) == (0.0, 1.0, 0.0)
    named = score_answer(item, "It is Paris", primary="em")
    assert (named.correct, named.strict_contains) == (0.0, 1.0)


def test_parley_eval_accepts_it_as_primary_and_names_the_choices() -> None:
    check_choices(on_error="skip", primary="strict_contains")
    with pytest.raises(typer.BadParameter, match="strict_contains"):
        check_choices(on_error="skip", primary="strict")

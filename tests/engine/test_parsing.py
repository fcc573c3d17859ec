"""Parsers of LLM replies, including the garbage small models produce."""

from __future__ import annotations

import pytest

from engine.answers import answers_agree, majority_vote, normalize_answer
from engine.parsing import (
    parse_bracket_answer,
    parse_selection,
    parse_selection_json,
    parse_verdict,
    parse_verdict_json,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "answer", "error"),
    [
        ("Therefore, the answer is [July 20, 1969].", "July 20, 1969", None),
        ("Knowledge [1] says so. Answer: [Paris]", "Paris", None),
        ("[Paris] ... no wait, [Lyon]", "Lyon", None),
        ("The answer is Paris.", "Paris", "no bracketed answer; used 'answer is' phrasing"),
        ("Hmm.\nMaybe Lyon", "Maybe Lyon", "no bracketed answer; used last line"),
        ("", None, "empty reply"),
        ("The final answer is [answer].", None, "only placeholder or knowledge-number brackets"),
    ],
)
def test_bracket_answer(text: str, answer: str | None, error: str | None) -> None:
    parsed = parse_bracket_answer(text)
    assert parsed.answer == answer
    assert parsed.parse_error == error


def test_bracket_answer_can_reject_knowledge_numbers() -> None:
    assert parse_bracket_answer("See [3].").answer == "3"
    assert parse_bracket_answer("See [3].", reject_numbers=True).answer != "3"


@pytest.mark.parametrize(
    ("text", "selected", "ignored", "no_found", "error"),
    [
        ("The most helpful knowledge is [3], [12].", [3], [12], False, None),
        ("[3, 1, 3]", [3, 1], [], False, None),
        ("[1] [2] [3] [4]", [1, 2, 3], [], False, None),
        ("Nothing helps. [No Found]", [], [], True, None),
        ("[no found]", [], [], True, None),
        ("[99]", [], [99], False, None),
        ("I think the answer is July 1969.", [], [], False, "no bracketed selection or [No Found]"),
        ("", [], [], False, "empty reply"),
    ],
)
def test_selection(
    text: str, selected: list[int], ignored: list[int], no_found: bool, error: str | None
) -> None:
    parsed = parse_selection(text, pool_size=10, max_selected=3)
    assert parsed.selected == selected
    assert parsed.ignored == ignored
    assert parsed.no_found is no_found
    assert parsed.parse_error == error


def test_selection_json() -> None:
    assert parse_selection_json('{"selected": [2, 7, 70]}', 10).selected == [2, 7]
    empty = parse_selection_json('{"selected": []}', 10)
    assert empty.selected == [] and empty.no_found and empty.parse_error is None
    bad = parse_selection_json("[4]", 10)
    assert bad.selected == [4] and "invalid JSON" in (bad.parse_error or "")


@pytest.mark.parametrize(
    ("text", "verdict", "error"),
    [
        ("Consistent. [Yes]", True, None),
        ("[Yes] ... actually [No]", False, None),
        ("They are inconsistent", False, "no [Yes]/[No]; used last yes/no word"),
        ("???", None, "no verdict found"),
    ],
)
def test_verdict(text: str, verdict: bool | None, error: str | None) -> None:
    parsed = parse_verdict(text)
    assert parsed.verdict is verdict and parsed.parse_error == error


def test_verdict_json() -> None:
    assert parse_verdict_json('{"consensus": false}').verdict is False
    assert parse_verdict_json('{"consensus": "yes"}').parse_error


def test_normalisation_and_votes() -> None:
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert answers_agree(["July 20, 1969", "july 20 1969"])
    assert not answers_agree(["Paris", None])
    assert not answers_agree(["", ""])
    assert majority_vote(["Paris", "Lyon", "paris", None]) == ("Paris", 2)
    assert majority_vote(["Lyon", "Paris"]) == ("Lyon", 1)
    assert majority_vote([None, ""]) == (None, 0)
    # Symbols are compared as written (normalisation would erase them); filler never agrees.
    assert answers_agree(["@", " @ "]) and not answers_agree(["@", "#"])
    assert not answers_agree(["...", "..."]) and not answers_agree(["\u2014", "\u2014"])
    assert majority_vote(["#", "@", "@"]) == ("@", 2)
    assert majority_vote(["...", "?"]) == (None, 0)

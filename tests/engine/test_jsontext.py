"""The engine's one JSON-in-text extractor, and the parsers that now read through it."""

from __future__ import annotations

import pytest

from engine.jsontext import first_json_object, json_objects
from engine.prompts import robust
from engine.protocols.kks import parse_assignment, parse_role
from engine.protocols.mad.verdict import parse_mad_verdict
from engine.protocols.mallm import decisions

pytestmark = pytest.mark.unit


def test_whole_reply_is_the_object() -> None:
    assert first_json_object('{"answer": "Paris"}') == {"answer": "Paris"}


def test_prose_around_the_object() -> None:
    text = 'Sure! Here is my reply: {"vote": 2} — I hope that helps.'
    assert first_json_object(text) == {"vote": 2}


def test_code_fence() -> None:
    text = 'Answer:\n```json\n{"reason": "r", "answer": "1969"}\n```\n'
    assert first_json_object(text) == {"reason": "r", "answer": "1969"}


def test_several_objects_in_order_and_first_with_a_key() -> None:
    text = 'draft {"vote": 1} then corrected {"ranking": [2, 1]} and {"vote": 3}'
    assert list(json_objects(text)) == [{"vote": 1}, {"ranking": [2, 1]}, {"vote": 3}]
    assert first_json_object(text) == {"vote": 1}
    assert first_json_object(text, key="ranking") == {"ranking": [2, 1]}
    assert first_json_object(text, key="missing") is None


def test_nested_braces_outer_first_then_inner() -> None:
    text = 'x {"result": {"answer": "blue", "meta": {"k": 1}}} y'
    objs = list(json_objects(text))
    assert objs[0] == {"result": {"answer": "blue", "meta": {"k": 1}}}
    assert objs[1:] == [{"answer": "blue", "meta": {"k": 1}}, {"k": 1}]
    assert first_json_object(text, key="answer") == {"answer": "blue", "meta": {"k": 1}}


def test_braces_inside_strings_do_not_split_the_object() -> None:
    text = 'reply {"reason": "sets like {1, 2} and }", "answer": "two"} end'
    assert first_json_object(text) == {"reason": "sets like {1, 2} and }", "answer": "two"}


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "no json here",
        "{not json}",
        "{'single': 'quotes'}",
        '{"truncated": "reply',
        "[1, 2, 3]",
        '"just a string"',
        "}{",
    ],
)
def test_invalid_or_absent_json_gives_none(text: str | None) -> None:
    assert first_json_object(text) is None
    assert list(json_objects(text)) == []


def test_invalid_object_is_skipped_for_a_later_valid_one() -> None:
    text = '{"vote": 1,} oops, I meant {"vote": 2}'
    assert first_json_object(text) == {"vote": 2}


def test_object_inside_an_array_is_found() -> None:
    assert first_json_object('[{"answer": "x"}]', key="answer") == {"answer": "x"}


def test_every_parser_reads_an_object_wrapped_in_prose_and_fences() -> None:
    wrap = "I think so.\n```json\n{}\n```\nDone."
    assert robust.parse_answer(wrap.replace("{}", '{"reason": "r", "answer": "Neil Armstrong"}')).answer == (
        "Neil Armstrong"
    )
    assert robust.parse_select(wrap.replace("{}", '{"selected": [2, 9]}'), 5, 3).selected == [2]
    assert robust.parse_judge(wrap.replace("{}", '{"consensus": true}')).verdict is True
    assert decisions.parse_simple_vote(wrap.replace("{}", '{"vote": 2}'), base=1) == 1
    assert decisions.parse_ranking(wrap.replace("{}", '{"ranking": [3, 1]}'), base=1) == [2, 0]
    verdict = parse_mad_verdict(
        wrap.replace("{}", '{"Whether there is a preference": "Yes", "debate_answer": "4"}')
    )
    assert verdict.preference is True and verdict.answer == "4"
    assert parse_role(wrap.replace("{}", '{"role": "Knave"}')) == "knave"
    players = ["Ann", "Bo"]
    assert parse_assignment(wrap.replace("{}", '{"Ann": "knight", "Bo": "spy"}'), players) == {
        "Ann": "knight",
        "Bo": "spy",
    }


def test_parsers_read_nested_objects_a_flat_pattern_missed() -> None:
    # An answer object with a nested field: a ``{[^{}]*}`` pattern cannot match it inside prose.
    text = 'Here: {"reason": "r", "answer": "Paris", "sources": {"K1": true}} ok'
    assert robust.parse_answer(text).answer == "Paris"
    # A broken draft before the real vote: greedy first-to-last-brace matching failed on both.
    assert decisions.parse_approval('{"approved": [1,} no: {"approved": [1, 3]}', base=1) == [0, 2]

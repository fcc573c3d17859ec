"""Numeric answer equivalence: the forms CIAR publishes and the forms models answer in."""

from __future__ import annotations

import pytest

from evaluation.equivalence import numeric_match, parse_number

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("answer", "golds"),
    [
        ("3/2", ["1.5"]),
        ("1.5", ["3/2"]),
        ("1.50", ["1.5"]),
        ("1.5 m/s", ["1.5", "3/2"]),
        ("[1.5 m/s]", ["3/2"]),
        ("\\frac{3}{2}", ["1.5"]),
        ("1 1/2", ["1.5"]),
        ("150%", ["1.5"]),
        ("50%", ["0.5"]),
        ("50", ["50%"]),
        ("0.33", ["1/3"]),
        ("1,000", ["1000"]),
        ("-2", ["-2.0"]),
        ("x = 40 km/h", ["40"]),
        ("$40", ["40"]),
        ("12 cm^2", ["12"]),
        ("9.8 m/s²", ["9.8"]),
        ("40.", ["40"]),
        # CIAR's own forms: a rounded gold and an exact answer, or the other way round.
        ("1/11", ["0.0909"]),
        ("9.09%", ["1/11"]),
        ("0.4138", ["41%"]),
        ("86.5%", ["0.865"]),
    ],
)
def test_same_value_matches(answer: str, golds: list[str]) -> None:
    assert numeric_match(answer, golds) == 1.0


@pytest.mark.parametrize(
    ("answer", "golds"),
    [
        ("2", ["1.5"]),
        ("0.3", ["1/3"]),  # one decimal place is not a rounding of 1/3 we accept
        ("3 or 4", ["3"]),  # two numbers: not an answer of 3
        ("between 1 and 2", ["1"]),
        ("B", ["2"]),
        ("", ["0"]),
        (None, ["0"]),
        ("45", ["40"]),
        ("1/0", ["1"]),
        ("1/3", ["0.3"]),  # 0.3 is not written precisely enough to stand for 1/3
        ("0.5", ["48%"]),
    ],
)
def test_different_or_unreadable_does_not_match(answer: str | None, golds: list[str]) -> None:
    assert numeric_match(answer, golds) == 0.0


def test_parse_keeps_percent_and_decimals() -> None:
    parsed = parse_number("12.50%")
    assert parsed is not None and parsed.percent and parsed.decimals == 2
    assert parse_number("no number here") is None

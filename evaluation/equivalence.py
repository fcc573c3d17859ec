"""Numeric answer equivalence: ``3/2``, ``1.5``, ``1.50`` and ``1.5 m/s`` are the same answer.

Counter-intuitive arithmetic (CIAR, Liang et al.) publishes each answer in several forms (``"1.5"``,
``"3/2"``) and models answer in yet others (``1.5 m/s``, ``\\frac{3}{2}``, ``150%`` of something).
Comparing normalised strings would call most right answers wrong, so a number is compared by value:
fractions and decimals exactly (``Fraction``), a percentage as its value and as the bare number
(``50%`` matches ``0.5`` and ``50``), and a trailing unit is ignored. A decimal written with at least
two places also matches a fraction it rounds (``0.33`` for ``1/3``), because that is how a model
writes a repeating decimal.

An answer counts as a number only when it holds exactly one number expression: ``"3 or 4"`` is not
an answer of 3, and neither is a sentence with several numbers in it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

# One number expression: LaTeX fraction, a/b fraction, mixed number "1 1/2", decimal, with % or unit.
_EXPR = re.compile(
    r"""
    (?P<latex>[-+−]?\\d?frac\{\s*(?P<ln>[-+]?\d+(?:\.\d+)?)\s*\}\{\s*(?P<ld>[-+]?\d+(?:\.\d+)?)\s*\})
    | (?P<mixed>(?P<mw>[-+−]?\d+)\s+(?P<mn>\d+)\s*/\s*(?P<md>\d+))
    | (?P<frac>(?P<fn>[-+−]?\d+(?:\.\d+)?)\s*/\s*(?P<fd>\d+(?:\.\d+)?))
    | (?P<dec>[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+−]?\.\d+)
    """,
    re.VERBOSE,
)
_PERCENT = re.compile(r"^\s*(?:%|percent\b|per\s*cent\b)", re.IGNORECASE)
_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class NumericAnswer:
    """The value of an answer, whether it was a percentage, and how many decimals it was written with."""

    value: Fraction
    percent: bool = False
    decimals: int = 0

    def candidates(self) -> tuple[Fraction, ...]:
        """Values the answer may stand for: a percentage is its fraction of one or the bare number."""
        return (self.value / 100, self.value) if self.percent else (self.value,)

    def written(self) -> tuple[tuple[Fraction, int], ...]:
        """Each candidate with the decimal places it was written to (``9.09%`` is 0.0909: four)."""
        if self.percent:
            return ((self.value / 100, self.decimals + 2), (self.value, self.decimals))
        return ((self.value, self.decimals),)


def _fraction(text: str) -> Fraction:
    return Fraction(text.replace(",", "").replace("−", "-"))


def parse_number(text: str | None) -> NumericAnswer | None:
    """The single number in ``text`` (with its % or unit), or None when there is none or several.

    Text around the number is allowed ("x = 40 km/h", "$40"), but no second number may appear,
    except the exponent of a unit ("12 cm^2", "9.8 m/s²")."""
    if not text:
        return None
    s = text.strip().strip(".").replace("\u2212", "-")
    # Square brackets and parentheses around an answer are the prompts' answer markers, not maths.
    s = s.strip("[]()").strip()
    matches = list(_EXPR.finditer(s))
    if not matches:
        return None
    m = matches[0]
    rest = s[m.end() :]
    # A unit's exponent is not a second number ("m^2", "m²", "s^-1").
    rest_without_exponents = re.sub(r"\^\s*[-+]?\d+|[²³¹]", "", rest)
    if _DIGIT.search(rest_without_exponents) or _DIGIT.search(s[: m.start()]):
        return None
    percent = bool(_PERCENT.match(rest))
    try:
        if m.group("latex"):
            num, den = _fraction(m.group("ln")), _fraction(m.group("ld"))
            sign = -1 if m.group("latex").lstrip().startswith(("-", "−")) else 1
            if den == 0:
                return None
            return NumericAnswer(sign * num / den, percent)
        if m.group("mixed"):
            whole, num, den = _fraction(m.group("mw")), _fraction(m.group("mn")), _fraction(m.group("md"))
            if den == 0:
                return None
            frac = num / den
            return NumericAnswer(whole - frac if whole < 0 else whole + frac, percent)
        if m.group("frac"):
            num, den = _fraction(m.group("fn")), _fraction(m.group("fd"))
            if den == 0:
                return None
            return NumericAnswer(num / den, percent)
        raw = m.group("dec")
        decimals = len(raw.split(".", 1)[1]) if "." in raw else 0
        return NumericAnswer(_fraction(raw), percent, decimals)
    except (ValueError, ZeroDivisionError):
        return None


def _rounds_to(rounded: NumericAnswer, exact: Fraction) -> bool:
    """A decimal written with two or more places matches a value it is the rounding of (0.33 for
    1/3; 9.09% for 1/11)."""
    for value, decimals in rounded.written():
        if decimals < 2 or (rounded.decimals == 0 and not rounded.percent):
            continue
        scale = Fraction(10) ** decimals
        if Fraction(round(exact * scale)) / scale == value:
            return True
    return False


def numbers_equal(answer: NumericAnswer, gold: NumericAnswer) -> bool:
    """Equal by value, allowing a percentage to stand for either of its readings, and a decimal to
    stand for the value it rounds (whichever side is the rounded one: CIAR lists "0.0909" and "1/11")."""
    for a in answer.candidates():
        for g in gold.candidates():
            if a == g:
                return True
    return any(_rounds_to(answer, g) for g in gold.candidates()) or any(
        _rounds_to(gold, a) for a in answer.candidates()
    )


def numeric_match(prediction: str | None, golds: Sequence[str]) -> float:
    """1.0 when ``prediction`` and a gold alias are the same number (see the module docstring)."""
    pred = parse_number(prediction)
    if pred is None:
        return 0.0
    for gold in golds:
        parsed = parse_number(gold)
        if parsed is not None and numbers_equal(pred, parsed):
            return 1.0
    return 0.0


def is_numeric(text: str | None) -> bool:
    """The text is one number (with an optional percent sign or unit)."""
    return parse_number(text) is not None


__all__ = ["NumericAnswer", "is_numeric", "numbers_equal", "numeric_match", "parse_number"]

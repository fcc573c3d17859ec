"""Knight–Knave–Spy puzzles (Wu et al. 2025): statements, their meaning, and the exact solver.

Rules: a knight's statement is true, a knave's is false, a spy's may be either; the game manager's
hint "Among all players, there is exactly one spy" is always true. A statement may talk about roles
(anyone, the speaker included) and about whether *earlier* players are telling the truth; truth
references only point backwards, so truth values follow from a role assignment without circularity
(acyclic truth dependencies). Statement types 1-15 are listed in ``STATEMENT_TYPES``.

Statements are plain dicts so a puzzle file is self-describing JSON and a test can re-evaluate it with
its own code: ``{"type": 5, "a": 0, "b": 2}``; players are 0-based indices into ``players``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

HINT = "I am the game manager and here is a hint for you: Among all players, there is exactly one spy."

STATEMENT_TYPES: dict[int, str] = {
    1: "X is a R",
    2: "X is not a R",
    3: "X is telling the truth (X earlier)",
    4: "X is lying (X earlier)",
    5: "X and Y have the same role",
    6: "X and Y have different roles",
    7: "Among X and Y, exactly one person is telling the truth (both earlier)",
    8: "Among X and Y, there is exactly one R",
    9: "At least one of X and Y is a R",
    10: "Among all players, the number of Rs is even/odd",
    11: "Among group G, the number of people who are lying is even/odd (G earlier)",
    12: "If X is a R, then Y is a R2",
    13: "X and Y are both telling the truth (both earlier)",
    14: "Among group G, there are exactly K Rs",
    15: "Exactly one of two statements (types 1-14) is true",
}

Statement = dict[str, Any]


def truth_refs(st: Statement) -> set[int]:
    """Players whose truthfulness the statement depends on."""
    t = st["type"]
    if t in (3, 4):
        return {st["a"]}
    if t in (7, 13):
        return {st["a"], st["b"]}
    if t == 11:
        return set(st["group"])
    if t == 15:
        return truth_refs(st["sub"][0]) | truth_refs(st["sub"][1])
    return set()


def is_acyclic(statements: Sequence[Statement]) -> bool:
    """Every truth reference points to an earlier player (never the speaker or a later one)."""
    return all(all(j < i for j in truth_refs(st)) for i, st in enumerate(statements))


def _parity(count: int, parity: str) -> bool:
    return count % 2 == (0 if parity == "even" else 1)


Roles = Sequence[str]
Truth = Sequence[bool | None]

# Statement type -> its truth under the roles and the earlier statements' truth (the paper's 15 types).
_TRUTH: dict[int, Callable[[Statement, Roles, Truth], bool]] = {
    1: lambda st, roles, truth: roles[st["a"]] == st["role"],
    2: lambda st, roles, truth: roles[st["a"]] != st["role"],
    3: lambda st, roles, truth: bool(truth[st["a"]]),
    4: lambda st, roles, truth: not truth[st["a"]],
    5: lambda st, roles, truth: roles[st["a"]] == roles[st["b"]],
    6: lambda st, roles, truth: roles[st["a"]] != roles[st["b"]],
    7: lambda st, roles, truth: bool(truth[st["a"]]) != bool(truth[st["b"]]),
    8: lambda st, roles, truth: (roles[st["a"]] == st["role"]) != (roles[st["b"]] == st["role"]),
    9: lambda st, roles, truth: roles[st["a"]] == st["role"] or roles[st["b"]] == st["role"],
    10: lambda st, roles, truth: _parity(sum(1 for r in roles if r == st["role"]), st["parity"]),
    11: lambda st, roles, truth: _parity(sum(1 for j in st["group"] if not truth[j]), st["parity"]),
    12: lambda st, roles, truth: roles[st["a"]] != st["role"] or roles[st["b"]] == st["role2"],
    13: lambda st, roles, truth: bool(truth[st["a"]]) and bool(truth[st["b"]]),
    14: lambda st, roles, truth: sum(1 for j in st["group"] if roles[j] == st["role"]) == st["k"],
    15: lambda st, roles, truth: evaluate(st["sub"][0], roles, truth) != evaluate(st["sub"][1], roles, truth),
}


def evaluate(st: Statement, roles: Sequence[str], truth: Sequence[bool | None]) -> bool:
    """The statement's truth under ``roles``; ``truth[j]`` is player j's statement truth (earlier)."""
    rule = _TRUTH.get(st["type"])
    if rule is None:
        raise ValueError(f"unknown statement type {st['type']}")
    return rule(st, roles, truth)


def truth_values(statements: Sequence[Statement], roles: Sequence[str]) -> list[bool]:
    """Each player's statement truth, in order (possible because references point backwards)."""
    truth: list[bool | None] = [None] * len(statements)
    for i, st in enumerate(statements):
        truth[i] = evaluate(st, roles, truth)
    return [bool(t) for t in truth]


def consistent(statements: Sequence[Statement], roles: Sequence[str]) -> bool:
    """Whether ``roles`` obeys the rules: one spy, knights true, knaves false."""
    if sum(1 for r in roles if r == "spy") != 1:
        return False
    truth: list[bool | None] = [None] * len(statements)
    for i, st in enumerate(statements):
        value = evaluate(st, roles, truth)
        truth[i] = value
        if roles[i] == "knight" and not value:
            return False
        if roles[i] == "knave" and value:
            return False
    return True


def assignments(n: int) -> Iterator[tuple[str, ...]]:
    """Every role assignment with exactly one spy (n * 2^(n-1) of them)."""
    for spy in range(n):
        for rest in product(("knight", "knave"), repeat=n - 1):
            roles = list(rest)
            roles.insert(spy, "spy")
            yield tuple(roles)


def solve(statements: Sequence[Statement], limit: int | None = None) -> list[tuple[str, ...]]:
    """All consistent assignments (up to ``limit``): the exact solver the generator keeps puzzles by."""
    found: list[tuple[str, ...]] = []
    for roles in assignments(len(statements)):
        if consistent(statements, roles):
            found.append(roles)
            if limit is not None and len(found) >= limit:
                break
    return found


# -------------------------------------------------------------------------------------- rendering
def _name(j: int, speaker: int, players: Sequence[str]) -> str:
    return "I" if j == speaker else players[j]


def _list(group: Sequence[int], speaker: int, players: Sequence[str]) -> str:
    names = [_name(j, speaker, players) for j in group]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _exactly_k(st: Statement, speaker: int, players: Sequence[str]) -> str:
    k = st["k"]
    verb, plural = ("is", "") if k == 1 else ("are", "s")
    return f"Among {_list(st['group'], speaker, players)}, there {verb} exactly {k} {st['role']}{plural}."


def _one_of_two(st: Statement, speaker: int, players: Sequence[str]) -> str:
    one = render(st["sub"][0], speaker, players).rstrip(".")
    two = render(st["sub"][1], speaker, players).rstrip(".")
    return f"Among the following two statements, exactly one is true: (1) {one}. (2) {two}."


@dataclass(frozen=True)
class _Words:
    """The names a statement's template fills in: players ``a``/``b`` ("I" for the speaker)."""

    st: Statement
    speaker: int
    players: Sequence[str]
    a: str
    b: str
    be_a: str
    be_b: str


# Statement type -> the paper's natural-language form.
_TEXT: dict[int, Callable[[_Words], str]] = {
    1: lambda w: f"{w.a} {w.be_a} a {w.st['role']}.",
    2: lambda w: f"{w.a} {w.be_a} not a {w.st['role']}.",
    3: lambda w: f"{w.a} is telling the truth.",
    4: lambda w: f"{w.a} is lying.",
    5: lambda w: f"{w.a} and {w.b} have the same role.",
    6: lambda w: f"{w.a} and {w.b} have different roles.",
    7: lambda w: f"Among {w.a} and {w.b}, exactly one person is telling the truth.",
    8: lambda w: f"Among {w.a} and {w.b}, there is exactly one {w.st['role']}.",
    9: lambda w: f"At least one of {w.a} and {w.b} is a {w.st['role']}.",
    10: lambda w: f"Among all players, the number of {w.st['role']}s is {w.st['parity']}.",
    11: lambda w: (
        f"Among {_list(w.st['group'], w.speaker, w.players)}, the number of people who are lying is "
        f"{w.st['parity']}."
    ),
    12: lambda w: f"If {w.a} {w.be_a} a {w.st['role']}, then {w.b} {w.be_b} a {w.st['role2']}.",
    13: lambda w: f"{w.a} and {w.b} are both telling the truth.",
    14: lambda w: _exactly_k(w.st, w.speaker, w.players),
    15: lambda w: _one_of_two(w.st, w.speaker, w.players),
}


def render(st: Statement, speaker: int, players: Sequence[str]) -> str:
    """The statement in the paper's natural-language style."""
    template = _TEXT.get(st["type"])
    if template is None:
        raise ValueError(f"unknown statement type {st['type']}")
    words = _Words(
        st,
        speaker,
        players,
        a=_name(st["a"], speaker, players) if "a" in st else "",
        b=_name(st["b"], speaker, players) if "b" in st else "",
        be_a="am" if st.get("a") == speaker else "is",
        be_b="am" if st.get("b") == speaker else "is",
    )
    return template(words)


def game_text(players: Sequence[str], statements: Sequence[Statement]) -> str:
    """The game info in the paper's format (App. C.1)."""
    blocks = [
        f"Player name: {p}\nPlayer statement: {render(st, i, players)}"
        for i, (p, st) in enumerate(zip(players, statements, strict=True))
    ]
    return "---\n" + "\n---\n".join(blocks) + f"\n---\nMessage from the game manager: {HINT}"


def solution_map(players: Sequence[str], roles: Sequence[str]) -> dict[str, str]:
    return dict(zip(players, roles, strict=True))

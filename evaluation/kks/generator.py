"""Puzzle generator: random statements consistent with a hidden assignment, kept only when exactly one
assignment satisfies them all (checked by the exact solver).

How: draw the hidden roles (exactly one spy), give every player a random statement of a random type
(1-15) whose truth matches its role (knights true, knaves false, the spy either way), then repeatedly
replace one statement by another consistent one while the number of solutions does not grow, until
it is one. A replacement that would break the hidden assignment (a spy's statement read by a later
"is telling the truth") is rejected. Seeded, so ``--seed`` reproduces a dataset exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from evaluation.kks.dataset import puzzle_question
from evaluation.kks.puzzle import (
    Statement,
    consistent,
    evaluate,
    game_text,
    is_acyclic,
    solution_map,
    solve,
    truth_values,
)

NAMES = (
    "Rachel", "Violet", "Olivia", "Peter", "Uma", "Xavier", "Quinn", "Sam", "Tina", "Noah", "Liam",
    "Emma", "Mia", "Owen", "Zara", "Hugo", "Iris", "Jack", "Kate", "Leo", "Nina", "Oscar", "Paula", "Ruby",
)  # fmt: skip


@dataclass(frozen=True)
class Puzzle:
    id: str
    players: list[str]
    statements: list[Statement]
    solution: dict[str, str]

    def record(self) -> dict[str, Any]:
        """The JSONL record (the evaluation dataset contract: ``question`` + ``solution``)."""
        rec: dict[str, Any] = {
            "id": self.id,
            "size": len(self.players),
            "players": self.players,
            "statements": self.statements,
            "game": game_text(self.players, self.statements),
            "solution": self.solution,
            "difficulty": len(self.players),
        }
        rec["question"] = puzzle_question(rec)
        return rec


def _statement_types(earlier: list[int], compound: bool) -> list[int]:
    """The types player ``len(earlier)`` may state: truth references need earlier players."""
    types = [1, 2, 5, 6, 8, 9, 10, 12, 14]
    if earlier:
        types += [3, 4]
    if len(earlier) >= 2:
        types += [7, 11, 13]
    if compound:
        types.append(15)
    return types


def _random_statement(rng: random.Random, i: int, n: int, compound: bool = True) -> Statement:
    earlier = list(range(i))
    t = rng.choice(_statement_types(earlier, compound))
    others = [j for j in range(n) if j != i]
    if t in (1, 2):
        return {"type": t, "a": rng.choice(range(n)), "role": rng.choice(("knight", "knave", "spy"))}
    if t in (3, 4):
        return {"type": t, "a": rng.choice(earlier)}
    if t in (5, 6):
        a, b = rng.sample(range(n), 2)
        return {"type": t, "a": a, "b": b}
    if t in (7, 13):
        a, b = sorted(rng.sample(earlier, 2))
        return {"type": t, "a": a, "b": b}
    if t in (8, 9):
        a, b = rng.sample(range(n), 2)
        return {"type": t, "a": a, "b": b, "role": rng.choice(("knight", "knave", "spy"))}
    if t == 10:
        return {"type": t, "role": rng.choice(("knight", "knave")), "parity": rng.choice(("even", "odd"))}
    if t == 11:
        k = rng.randint(2, min(3, len(earlier)))
        return {"type": t, "group": sorted(rng.sample(earlier, k)), "parity": rng.choice(("even", "odd"))}
    if t == 12:
        a = rng.choice(range(n))
        b = rng.choice(others if a == i else [j for j in range(n) if j != a])
        return {
            "type": t,
            "a": a,
            "b": b,
            "role": rng.choice(("knight", "knave", "spy")),
            "role2": rng.choice(("knight", "knave", "spy")),
        }
    if t == 14:
        k = rng.randint(2, min(3, n))
        group = sorted(rng.sample(range(n), k))
        return {"type": t, "group": group, "k": rng.randint(0, 2), "role": rng.choice(("knight", "knave"))}
    # 15: two simpler statements, exactly one true
    return {"type": 15, "sub": [_random_statement(rng, i, n, False), _random_statement(rng, i, n, False)]}


def _fits(st: Statement, i: int, roles: tuple[str, ...], truth: list[bool]) -> bool:
    value = evaluate(st, roles, truth)
    return roles[i] == "spy" or value == (roles[i] == "knight")


def _statement_for(rng: random.Random, i: int, roles: tuple[str, ...], truth: list[bool]) -> Statement:
    for _ in range(200):
        st = _random_statement(rng, i, len(roles))
        if _fits(st, i, roles, truth):
            return st
    # Always possible: a true or false statement about the speaker's own role.
    return {"type": 1 if roles[i] != "knave" else 2, "a": i, "role": roles[i]}


def generate(
    n: int, rng: random.Random, *, max_steps: int = 400
) -> tuple[list[str], list[Statement], tuple[str, ...]]:
    """One puzzle of ``n`` players with exactly one solution."""
    if not 3 <= n <= len(NAMES):
        raise ValueError(f"size must be between 3 and {len(NAMES)}, got {n}")
    while True:
        players = rng.sample(NAMES, n)
        roles_list = [rng.choice(("knight", "knave")) for _ in range(n)]
        roles_list[rng.randrange(n)] = "spy"
        roles = tuple(roles_list)
        statements: list[Statement] = []
        truth: list[bool] = []
        for i in range(n):
            st = _statement_for(rng, i, roles, truth)
            statements.append(st)
            truth.append(evaluate(st, roles, truth))
        count = len(solve(statements))
        for _ in range(max_steps):
            if count == 1:
                break
            i = rng.randrange(n)
            candidate = list(statements)
            candidate[i] = _statement_for(rng, i, roles, truth_values(statements, roles)[:i])
            if not consistent(candidate, roles):
                continue
            new_count = len(solve(candidate))
            if new_count <= count:
                statements, count = candidate, new_count
        if count == 1 and is_acyclic(statements):
            return players, statements, roles


def generate_dataset(sizes: list[int], per_size: int, seed: int) -> Iterator[Puzzle]:
    """``per_size`` unique-solution puzzles for each size, reproducible from ``seed``."""
    rng = random.Random(seed)
    for n in sizes:
        for k in range(per_size):
            players, statements, roles = generate(n, rng)
            yield Puzzle(f"kks-{n}-{k + 1}", players, statements, solution_map(players, roles))

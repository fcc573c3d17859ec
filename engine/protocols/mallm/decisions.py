"""MALLM's decision rules (Kaesberg et al. 2025) as pure functions, plus their tolerant vote parsers.

Choices where the paper is ambiguous (each is a ``MallmSettings`` field, see docs/engine-and-protocols.md):
- thresholds: the text says "more than 50%" in one place and "requires 50%" in another; Parley
  compares with ``>=`` by default (``threshold_rule``), so 2 of 4 agents are a majority;
- cumulative voting: the prompt (Fig. 18) distributes 10 points, the text 25; default 10
  (``cumulative_points``). An allocation over the budget is scaled down to it, one under it counts as
  given ("up to"), negative or unknown entries are dropped;
- ranked voting: Borda count; the prompt's example is 0-based while solutions are listed from 1;
  ``ranking_base`` (default 1) decides, and invalid or repeated entries are dropped from a ranking;
- a tie, or no valid vote at all, is "no decision": the protocol adds a turn and votes again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.jsontext import first_json_object

# What one agent's vote is under a rule: a candidate, a set of approvals, a ranking, an allocation.
Ballot = TypeVar("Ballot")


@dataclass(frozen=True)
class VoteResult:
    """Scores per candidate (0-based), the winner if unique, and how many voters abstained."""

    scores: list[float]
    winner: int | None
    tie: bool
    abstentions: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def decided(self) -> bool:
        return self.winner is not None


def _decide(scores: list[float], abstentions: int, notes: list[str]) -> VoteResult:
    if not scores or max(scores) <= 0:
        return VoteResult(scores, None, False, abstentions, [*notes, "no valid votes"])
    best = max(scores)
    leaders = [i for i, s in enumerate(scores) if s == best]
    if len(leaders) > 1:
        return VoteResult(scores, None, True, abstentions, [*notes, f"tie between {leaders}"])
    return VoteResult(scores, leaders[0], False, abstentions, notes)


def _tally(
    ballots: Sequence[Ballot | None],
    n: int,
    read: Callable[[Ballot], tuple[Mapping[int, float], str | None]],
) -> tuple[list[float], int, list[str]]:
    """The count every voting rule shares: ``read`` turns a ballot into points per (valid) candidate
    and a note on what it dropped; a missing ballot, or one without a valid entry, is an abstention.
    The scores per candidate, the abstentions and the notes."""
    scores = [0.0] * n
    abstentions = 0
    notes: list[str] = []
    for ballot in ballots:
        if ballot is None:
            abstentions += 1
            continue
        points, note = read(ballot)
        if note:
            notes.append(note)
        if not points:
            abstentions += 1
        for c, p in points.items():
            scores[c] += p
    return scores, abstentions, notes


def simple_vote(votes: Sequence[int | None], n: int) -> VoteResult:
    """One vote per agent (0-based candidate or None = abstained); most votes wins."""

    def read(v: int) -> tuple[dict[int, float], str | None]:
        return ({v: 1}, None) if 0 <= v < n else ({}, f"vote {v} outside the candidates")

    return _decide(*_tally(votes, n, read))


def approval_vote(approvals: Sequence[Sequence[int] | None], n: int) -> VoteResult:
    """Each agent approves any number of candidates; most approvals wins (ties are common)."""

    def read(a: Sequence[int]) -> tuple[dict[int, float], str | None]:
        valid = {c for c in a if 0 <= c < n}
        dropped = sorted(set(a) - valid)
        note = f"ignored approvals outside the candidates: {dropped}" if dropped else None
        return dict.fromkeys(valid, 1.0), note

    return _decide(*_tally(approvals, n, read))


def clean_ranking(ranking: Sequence[int], n: int) -> list[int]:
    """Valid entries in the order given: inside ``0..n-1`` and each candidate once."""
    seen: list[int] = []
    for c in ranking:
        if 0 <= c < n and c not in seen:
            seen.append(c)
    return seen


def ranked_vote(rankings: Sequence[Sequence[int] | None], n: int) -> VoteResult:
    """Borda count: in a ranking of the ``n`` candidates, position p earns ``n - 1 - p`` points.

    Candidates a voter left out earn nothing from that voter; an empty ranking is an abstention.
    """

    def read(r: Sequence[int]) -> tuple[dict[int, float], str | None]:
        valid = clean_ranking(r, n)
        note = (
            f"ranking {list(r)} had invalid or repeated entries; used {valid}"
            if len(valid) != len(r)
            else None
        )
        return {c: n - 1 - pos for pos, c in enumerate(valid)}, note

    return _decide(*_tally(rankings, n, read))


def normalise_allocation(
    alloc: Mapping[int, float], n: int, budget: int
) -> tuple[dict[int, float], str | None]:
    """Keep entries for known candidates with positive points; scale down an over-budget allocation."""
    valid = {c: float(p) for c, p in alloc.items() if 0 <= c < n and p > 0}
    note = None
    if len(valid) != len(alloc):
        note = "dropped entries for unknown candidates or with non-positive points"
    total = sum(valid.values())
    if total > budget:
        valid = {c: p * budget / total for c, p in valid.items()}
        note = f"{note + '; ' if note else ''}allocation of {total:g} points scaled to {budget}"
    return valid, note


def cumulative_vote(allocations: Sequence[Mapping[int, float] | None], n: int, budget: int) -> VoteResult:
    """Each agent spreads up to ``budget`` points; most points wins."""
    scores, abstentions, notes = _tally(allocations, n, lambda a: normalise_allocation(a, n, budget))
    return _decide([round(s, 6) for s in scores], abstentions, notes)


# -------------------------------------------------------------------------------- consensus rules
def threshold_met(supporters: int, n_agents: int, threshold: float, rule: str = ">=") -> bool:
    """Whether ``supporters`` of ``n_agents`` reach the agreement level (``>=`` or ``>``)."""
    share = supporters / n_agents if n_agents else 0.0
    # A small epsilon so 2/3 reaches a 0.66 threshold but float noise never decides a boundary.
    if rule == ">":
        return share > threshold + 1e-9
    return share >= threshold - 1e-9


@dataclass
class AgreementState:
    """MALLM's agreement counting: the current solution, who proposed it and who agreed since.

    An agent that disagrees (or does not say) proposes its own solution and resets the count; an agent
    that agrees adds itself. The proposer counts as supporting its own solution, but a consensus needs
    at least one other agent's agreement: with two agents and a 50 % threshold the proposer alone would
    otherwise "agree" with itself and end the debate before anyone answered it.
    """

    solution: str | None = None
    proposer: int | None = None
    supporters: set[int] = field(default_factory=set)

    def update(self, agent: int, agreed: bool | None, answer: str | None) -> None:
        if agreed and self.proposer is not None:
            self.supporters.add(agent)
            return
        self.solution = answer
        self.proposer = agent
        self.supporters = {agent}

    def reached(self, n_agents: int, threshold: float, rule: str = ">=") -> bool:
        agreed_by_another = n_agents == 1 or len(self.supporters) > 1
        return (
            self.proposer is not None
            and agreed_by_another
            and threshold_met(len(self.supporters), n_agents, threshold, rule)
        )


@dataclass(frozen=True)
class ConsensusRule:
    """One consensus decision protocol as an object: the share of agents that must agree, read from
    the settings (``majority_threshold``, ``supermajority_threshold``) or fixed (unanimity: all).
    The runner asks ``CONSENSUS_RULES`` for the configured rule and never tests the rule's name."""

    name: str
    threshold_of: Callable[[Any], float]

    def reached(self, agreement: AgreementState, n_agents: int, settings: Any) -> bool:
        """Whether the agreement counted so far decides the debate under this rule and ``settings``
        (a ``MallmSettings``: its threshold and whether the share must be ``>=`` or ``>`` it)."""
        return agreement.reached(n_agents, self.threshold_of(settings), settings.threshold_rule)


CONSENSUS_RULES: dict[str, ConsensusRule] = {
    "majority": ConsensusRule("majority", lambda s: s.majority_threshold),
    "supermajority": ConsensusRule("supermajority", lambda s: s.supermajority_threshold),
    "unanimity": ConsensusRule("unanimity", lambda _s: 1.0),
}


_AGREE = re.compile(r"\[\s*(agree|disagree)\s*\]", re.I)
_AGREE_WORD = re.compile(r"\b(disagree|agree)\b", re.I)


def parse_agreement(text: str) -> tuple[bool | None, str | None]:
    """``[AGREE]``/``[DISAGREE]`` (regular expression, as MALLM extracts it); the first bracketed tag
    wins, then the first bare word; None when the reply says neither."""
    if not text:
        return None, "empty reply"
    m = _AGREE.search(text)
    if m:
        return m.group(1).lower() == "agree", None
    stripped = text.strip()
    # Only a reply that starts as JSON: an "agree" key quoted inside prose is not a decision.
    data = first_json_object(stripped) if stripped.startswith("{") else None
    if data is not None and isinstance(data.get("agree"), bool):
        return bool(data["agree"]), None
    m = _AGREE_WORD.search(text)
    if m:
        return m.group(1).lower() == "agree", "no [AGREE]/[DISAGREE] tag; used the first agree word"
    return None, "no agreement stated"


# ------------------------------------------------------------------------------ vote text parsers
_INT = re.compile(r"-?\d+")


def parse_simple_vote(text: str, base: int) -> int | None:
    """A single solution number (JSON ``{"vote": n}`` or the first number), returned 0-based."""
    data = first_json_object(text)
    vote = data.get("vote") if data is not None else None
    if isinstance(vote, int) and not isinstance(vote, bool):
        return vote - base
    found = _INT.findall(text or "")
    return int(found[0]) - base if found else None


def _numbers(text: str, key: str, base: int) -> list[int] | None:
    """The JSON ``{key: [..]}`` list, else every number in the text; 0-based; None when there are none."""
    data = first_json_object(text)
    listed = data.get(key) if data is not None else None
    if isinstance(listed, list):
        return [int(x) - base for x in listed if isinstance(x, int)]
    found = _INT.findall(text or "")
    return [int(x) - base for x in found] if found else None


def parse_approval(text: str, base: int) -> list[int] | None:
    """Approved solution numbers (JSON ``{"approved": [..]}`` or comma-separated), 0-based."""
    return _numbers(text, "approved", base)


def parse_ranking(text: str, base: int) -> list[int] | None:
    """A ranking, best first (JSON ``{"ranking": [..]}`` or numbers separated by spaces), 0-based."""
    return _numbers(text, "ranking", base)


def parse_allocation(text: str, base: int) -> dict[int, float] | None:
    """A points allocation ``{"1": 6, "2": 4}`` (keys are solution numbers), 0-based keys.

    A ``{"points": {...}}`` wrapper (robust style schema) is accepted too; non-numeric values are
    dropped; no JSON object at all is unreadable.
    """
    data = first_json_object(text)
    if data is None:
        return None
    inner = data.get("points")
    if isinstance(inner, dict):
        data = inner
    alloc: dict[int, float] = {}
    for k, v in data.items():
        try:
            key = int(str(k).strip().removeprefix("Solution").strip())
        except ValueError:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        alloc[key - base] = alloc.get(key - base, 0.0) + float(v)
    return alloc if alloc else None


def _as_stored(ballot: Any) -> Any:
    return ballot


@dataclass(frozen=True)
class VotingRule:
    """One voting decision protocol as an object: how a ballot is read from a reply, how a ballot
    comes back from a checkpoint (JSON keys are strings), and how ballots are counted. The runner
    asks ``VOTING_RULES`` for the configured rule and never tests the rule's name itself."""

    name: str
    parse: Callable[[str, int], Any]
    count: Callable[[Sequence[Any], int, int], VoteResult]
    restore: Callable[[Any], Any] = _as_stored

    def read(self, text: str, base: int) -> Any:
        """The ballot in a reply (None: unreadable, counted as an abstention)."""
        return self.parse(text, base)


def _allocation_ballot(text: str, base: int) -> dict[str, float] | None:
    alloc = parse_allocation(text, base)
    return {str(k): v for k, v in alloc.items()} if alloc is not None else None


VOTING_RULES: dict[str, VotingRule] = {
    "simple": VotingRule("simple", parse_simple_vote, lambda b, n, _points: simple_vote(b, n)),
    "approval": VotingRule("approval", parse_approval, lambda b, n, _points: approval_vote(b, n)),
    "ranked": VotingRule("ranked", parse_ranking, lambda b, n, _points: ranked_vote(b, n)),
    "cumulative": VotingRule(
        "cumulative",
        _allocation_ballot,
        cumulative_vote,
        restore=lambda b: {int(k): float(v) for k, v in b.items()},
    ),
}

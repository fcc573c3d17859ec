"""``mallm``: Kaesberg et al. (2025) decision protocols on one discussion engine.

Paradigms: ``memory`` (agents speak in turn order and see the last ``memory_turns`` turns),
``drafting`` (All-Agents Drafting: the first turn is drafted independently, then memory), and
``collective_improvement`` (no turn order: each turn every agent sees only the previous turn's
solutions of the others; voting decisions only).

Consensus decisions (majority/supermajority/unanimity) count agreement after every message; when
reached, the last speaker extracts the final solution (Prompt E.1). Voting decisions discuss for
``vote_after`` turns, then every agent votes (Prompts E.2); a tie (or no valid vote) adds one turn and
a revote. A ``vote_after`` above the turn limit (``rounds``) is a vote after the last turn: the agents
discuss for as many turns as the debate has, and a voting decision always comes to a vote (MALLM's
code would end such a discussion without one, on the fallback; the paper never configures it). At
the turn limit without a decision the fallback answers (the first agent's solution, as in the paper,
or the most common answer) and the outcome says so.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from engine.answers import majority_vote, normalize_answer
from engine.context import DebateContext
from engine.outcome import Outcome, ProtocolRun, StatefulDebate
from engine.pool_search import search_after_round, search_before_first
from engine.prompts import get_prompts
from engine.protocols.common import (
    AnswerReader,
    call_with_reasks,
    order_views,
    persona,
    select_knowledge,
    speaking_order,
    view_seed,
)
from engine.protocols.mallm import decisions as dr
from engine.protocols.mallm import prompts_for
from engine.protocols.mallm.settings import MallmSettings
from engine.protocols.mallm.state import MallmState
from engine.result import TranscriptRecord
from services.chat_model import ChatCompletion

_TAGS = re.compile(r"\[\s*(dis)?agree\s*\]", re.I)


def discussion_parser(prompts: AnswerReader) -> Any:
    """Answer and agreement of one message; the [AGREE] tag is never mistaken for the answer."""

    def parse(c: ChatCompletion) -> dict[str, Any]:
        agreed, agree_error = dr.parse_agreement(c.text)
        parsed = prompts.parse_answer(_TAGS.sub("", c.text))
        return {
            "answer": parsed.answer,
            "parse_error": parsed.parse_error,
            "extra": {"agreed": agreed, "agreement_error": agree_error},
        }

    return parse


def candidates_from(answers: Sequence[str | None]) -> tuple[list[str], list[list[int]]]:
    """Distinct solutions (first spelling of each normalised answer) and which agents gave each."""
    solutions: list[str] = []
    keys: list[str] = []
    owners: list[list[int]] = []
    for agent, a in enumerate(answers):
        if not a or not normalize_answer(a):
            continue
        key = normalize_answer(a)
        if key in keys:
            owners[keys.index(key)].append(agent)
        else:
            keys.append(key)
            solutions.append(a)
            owners.append([agent])
    return solutions, owners


def ballot_parser(rule: dr.VotingRule, base: int) -> Any:
    def parse(c: ChatCompletion) -> dict[str, Any]:
        ballot = rule.read(c.text, base)
        return {"extra": {"ballot": ballot}, "parse_error": None if ballot is not None else "unreadable vote"}

    return parse


def _ballot(record: TranscriptRecord, rule: dr.VotingRule) -> Any:
    b = record.extra.get("ballot")
    return None if b is None else rule.restore(b)


class MallmDebate(StatefulDebate):
    """One MALLM discussion: its turns, the agreement so far and the decision, as checkpointed."""

    def __init__(self, ctx: DebateContext, run: ProtocolRun) -> None:
        super().__init__(ctx, run)
        self.ms = self.cfg.protocol_settings(MallmSettings)
        self.style = get_prompts(self.cfg.prompt_style)
        self.prompts = prompts_for(self.cfg.prompt_style)
        self.parse_msg = discussion_parser(self.style)
        self.n = self.cfg.agents
        # A consensus rule decides by agreement after every turn; None means a voting rule decides.
        self.consensus_rule = dr.CONSENSUS_RULES.get(self.ms.decision)
        self.consensus_mode = self.consensus_rule is not None
        # turns[t] = list of {"agent", "text", "answer", "agreed"} in speaking order
        self.turns: list[list[dict[str, Any]]] = []
        self.agreement = dr.AgreementState()
        self.decided: dict[str, Any] | None = None
        # The first vote: after ``vote_after`` turns, or after the last one when the debate is shorter.
        self.next_vote = min(self.ms.vote_after, self.cfg.rounds)
        st = run.resume_state(MallmState)
        if st is not None:
            self.turns = st["turns"]
            ag = st["agreement"]
            self.agreement = dr.AgreementState(ag["solution"], ag["proposer"], set(ag["supporters"]))
            self.decided = st.get("decided")
            self.next_vote = st.get("next_vote", self.next_vote)

    async def run(self) -> Outcome:
        t = len(self.turns)
        while self.decided is None and t < self.cfg.rounds:
            t += 1
            current = await self.play_turn(t)
            answers_now = [m["answer"] for m in current]
            await self.ctx.emit(
                "round.completed", {"round": t, "answers": answers_now, "consensus": self.decided is not None}
            )
            if self.decided is None and t < self.cfg.rounds:
                latest = [(self.latest(i) or {}).get("answer") for i in range(self.cfg.agents)]
                await search_after_round(self.ctx, t, latest)
            await self.run_info.checkpoint(self.ctx, t, self.state())
        return self.outcome(t)

    async def play_turn(self, t: int) -> list[dict[str, Any]]:
        """One turn of the paradigm, then the decision rule (consensus reached, or a vote due)."""
        ms = self.ms
        reached = False
        if ms.paradigm == "collective_improvement" or (ms.paradigm == "drafting" and t == 1):
            current = await self.independent_turn(t)
            if ms.paradigm == "drafting":
                for m in current:  # drafts propose; agreement counting starts with turn 2
                    self.agreement.update(m["agent"], None, m["answer"])
        else:
            current, reached = await self.memory_turn(t)
        self.turns.append(current)
        if self.consensus_mode and reached:
            last = current[-1]
            answer, how = await self.extract_final(t, last["agent"], last["text"])
            self.decided = {
                "answer": answer,
                "how": f"{ms.decision} consensus ({len(self.agreement.supporters)}/{self.n} agree); {how}",
            }
        elif not self.consensus_mode and t >= self.next_vote:
            outcome = await self.vote_round(t)
            if outcome["decided"]:
                how = outcome["how"]
                if t < ms.vote_after:
                    how += f"; held after the last turn ({t}): vote_after={ms.vote_after} exceeds rounds"
                self.decided = {"answer": outcome["winner"], "how": how}
            else:
                self.next_vote = t + 1  # a tie adds one turn and a revote
        return current

    def state(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "agreement": {
                "solution": self.agreement.solution,
                "proposer": self.agreement.proposer,
                "supporters": sorted(self.agreement.supporters),
            },
            "decided": self.decided,
            "next_vote": self.next_vote,
        }

    def outcome(self, t: int) -> Outcome:
        final_answers = [(self.latest(i) or {}).get("answer") for i in range(self.n)]
        decided = self.decided
        if decided is not None and decided.get("answer"):
            return Outcome(decided["answer"], decided["how"], t, True, final_answers)
        # Turn limit without a decision: the stated fallback.
        if self.ms.fallback == "first_agent" and final_answers and final_answers[0]:
            return Outcome(
                final_answers[0],
                f"no decision in {t} turns; fallback: first agent's solution",
                t,
                False,
                final_answers,
            )
        answer, votes = majority_vote(final_answers)
        return Outcome(
            answer,
            f"no decision in {t} turns; fallback: most common answer ({votes} agents)"
            if answer
            else "no parseable answer",
            t,
            False,
            final_answers,
        )

    def latest(self, agent: int) -> dict[str, Any] | None:
        for turn in reversed(self.turns):
            for m in turn:
                if m["agent"] == agent:
                    return m
        return None

    async def speak(
        self, t: int, i: int, history: list[tuple[str, str]], with_agreement: bool
    ) -> TranscriptRecord:
        ctx, cfg = self.ctx, self.cfg
        own = self.latest(i)
        knowledge = await select_knowledge(ctx, self.style, t, i, own["text"] if own else None)
        if t == 1 and not knowledge and await search_before_first(ctx, i):
            knowledge = await select_knowledge(ctx, self.style, t, i, None)
        return await ctx.call(
            round=t,
            role="debater",
            agent=i,
            messages=self.prompts.discussion(
                ctx.question,
                knowledge,
                history,
                self.agreement.solution,
                persona=persona(cfg, i),
                agent=i,
                agreement=with_agreement,
            ),
            parse=self.parse_msg,
            temperature=cfg.agent_temperature(i),
            knowledge=[k.n for k in knowledge],
            json_schema=self.prompts.AGREEMENT_SCHEMA if with_agreement else self.prompts.ANSWER_SCHEMA,
        )

    @staticmethod
    def msg(rec: TranscriptRecord) -> dict[str, Any]:
        return {"agent": rec.agent, "text": rec.text, "answer": rec.answer, "agreed": rec.extra.get("agreed")}

    def remembered(self, current: list[dict[str, Any]]) -> list[tuple[str, str]]:
        memory = self.ms.memory_turns
        past = [m for turn in self.turns[-(memory - 1) :] for m in turn] if memory > 1 else []
        return [(f"Participant {m['agent'] + 1}", m["text"]) for m in [*past, *current]]

    async def independent_turn(self, t: int) -> list[dict[str, Any]]:
        """Drafts (turn 1 of drafting/CI) or a Collective Improvement turn: all agents at once."""
        cfg, n = self.cfg, self.n
        prev = self.turns[-1] if self.turns else []
        prev_answers = [None] * n
        prev_text = [""] * n
        for m in prev:
            prev_answers[m["agent"]], prev_text[m["agent"]] = m["answer"], m["text"]

        def history(i: int) -> list[tuple[str, str]]:
            if not prev:
                return []
            order = order_views(
                [j for j in range(n) if j != i],
                prev_answers,
                cfg.ordering,
                seed=view_seed(cfg, t, i),
                gold=self.run_info.gold,
            )
            return [(f"Participant {j + 1}", prev_text[j]) for j in order]

        order = speaking_order(n, cfg.speaking_order, seed=view_seed(cfg, t, -1))
        records = await self.ctx.gather(
            [functools.partial(self.speak, t, i, history(i), False) for i in order]
        )
        return [self.msg(r) for r in records]

    async def memory_turn(self, t: int) -> tuple[list[dict[str, Any]], bool]:
        """Agents one after another, each seeing the remembered turns and this turn so far."""
        ms, n = self.ms, self.n
        current: list[dict[str, Any]] = []
        for i in speaking_order(n, self.cfg.speaking_order, seed=view_seed(self.cfg, t, -1)):
            any_before = bool(current) or bool(self.turns)
            rec = await self.speak(t, i, self.remembered(current), any_before)
            m = self.msg(rec)
            if not any_before:
                m["agreed"] = None
            current.append(m)
            agreed = m["agreed"] if any_before else None
            answer = m["answer"] or (self.agreement.solution if agreed else None)
            self.agreement.update(i, agreed, answer)
            if self.consensus_rule is not None and self.consensus_rule.reached(self.agreement, n, ms):
                return current, True
        return current, False

    async def extract_final(self, t: int, speaker: int, text: str) -> tuple[str | None, str]:
        rec = await self.ctx.call(
            round=t,
            role="extract",
            agent=speaker,
            messages=self.prompts.extraction(self.ctx.question, text, persona(self.cfg, speaker), speaker),
            parse=self.parse_msg,
            temperature=0.0,
            json_schema=self.prompts.ANSWER_SCHEMA,
        )
        if rec.answer:
            return rec.answer, "extracted by the last speaker (E.1)"
        return self.agreement.solution, "agreed solution (extraction unparseable)"

    async def vote_round(self, t: int) -> dict[str, Any]:
        ms = self.ms
        answers = [(self.latest(i) or {}).get("answer") for i in range(self.n)]
        solutions, _owners = candidates_from(answers)
        if len(solutions) <= 1:
            return {
                "winner": solutions[0] if solutions else None,
                "how": "single candidate (vote skipped)" if solutions else "no candidates",
                "decided": bool(solutions),
            }
        records = await self.ctx.gather(
            [functools.partial(self.vote, t, i, solutions) for i in range(self.n)]
        )
        rule = dr.VOTING_RULES[ms.decision]
        ballots = [_ballot(r, rule) for r in sorted(records, key=lambda r: r.agent or 0)]
        result = rule.count(ballots, len(solutions), ms.cumulative_points)
        await self.ctx.emit(
            "judge.verdict",
            {
                "round": t,
                "consensus": result.decided,
                "mode": f"mallm-{ms.decision}",
                "scores": result.scores,
                "tie": result.tie,
                "abstentions": result.abstentions,
            },
        )
        return {
            "winner": solutions[result.winner] if result.winner is not None else None,
            "how": f"{ms.decision} vote (scores {result.scores}, {result.abstentions} abstained"
            + (f"; {'; '.join(result.notes)}" if result.notes else "")
            + ")",
            "decided": result.decided,
        }

    async def vote(self, t: int, i: int, solutions: list[str]) -> TranscriptRecord:
        ms = self.ms
        rec, _ = await call_with_reasks(
            self.ctx,
            round=t,
            role="vote",
            agent=i,
            messages=self.prompts.vote(
                ms.decision,
                self.ctx.question,
                solutions,
                base=ms.ranking_base,
                points=ms.cumulative_points,
                persona=persona(self.cfg, i),
                agent=i,
            ),
            parse=ballot_parser(dr.VOTING_RULES[ms.decision], ms.ranking_base),
            readable=lambda r: r.extra.get("ballot") is not None,
            temperature=0.0,
            json_schema=self.prompts.VOTE_SCHEMAS[ms.decision],
        )
        return rec


run_mallm = MallmDebate.start

"""``kks``: Wu et al. (2025), the stepwise Knight–Knave–Spy debate, with its team factors.

Phases: every agent proposes a full assignment (C.1); then, ``depth`` times, a player-by-player loop:
agents argue about one player's role one after another in ``speaking_order`` (C.2 debate phase),
then all revise their full assignment (C.2 self-adjustment); finally every agent decides (C.3). The
team answer is the per-player majority vote. ``confidence`` makes agents state 1-10 and shows it to
the others; ``team`` gives agents their own models/temperatures; ``ordering`` orders the positions an
agent is shown. Unreadable replies are re-asked (``reasks``), then the agent keeps its previous view
and the abstention is recorded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from engine.context import DebateContext
from engine.jsontext import first_json_object
from engine.outcome import Outcome, ProtocolRun, StatefulDebate
from engine.protocols.common import (
    call_with_reasks,
    order_views,
    parse_confidence,
    speaking_order,
    view_seed,
)
from engine.protocols.kks import prompts_for
from engine.protocols.kks.parsing import (
    parse_assignment,
    parse_role,
    players_from_question,
    render_assignment,
    team_answer,
)
from engine.protocols.kks.prompts import Position, agent_name
from engine.protocols.kks.state import KksState
from engine.result import TranscriptRecord
from services.chat_model import ChatCompletion, ChatMessage


def _confidence(data: dict[str, Any], text: str) -> int | None:
    c = data.get("confidence")
    if isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 10:
        return c
    return parse_confidence(text)


def game_of(question: str) -> str:
    """The game-info block of a puzzle question (from the first ``---`` to the manager's message)."""
    start = question.find("---")
    if start < 0:
        return question
    end = question.find("\n", question.find("Message from the game manager", start))
    return question[start : end if end > 0 else len(question)].strip()


class KksDebate(StatefulDebate):
    """One stepwise KKS debate: every agent's current assignment, explanation and confidence."""

    def __init__(self, ctx: DebateContext, run: ProtocolRun) -> None:
        super().__init__(ctx, run)
        cfg = self.cfg
        self.prompts = prompts_for(cfg.prompt_style)
        self.players = players = players_from_question(ctx.question)
        if not players:
            raise ValueError(
                "protocol: 'kks' needs a Knight-Knave-Spy puzzle question ('Player name:' lines)"
            )
        self.game = game_of(ctx.question)
        self.n = n = cfg.agents
        self.names = [agent_name(i) for i in range(n)]
        self.steps: list[tuple[str, int]] = [("initial", -1)]
        self.steps += [("player", p) for _ in range(cfg.depth) for p in range(len(players))]
        self.steps.append(("final", -1))
        self.gold_assign = parse_assignment(run.gold[0], players) if run.gold else {}
        self.assign: list[dict[str, str]] = [{} for _ in range(n)]
        self.expl: list[str] = [""] * n
        self.conf: list[int | None] = [None] * n
        self.abstentions = 0
        self.done = 0
        st = run.resume_state(KksState)
        if st is not None:
            self.assign, self.expl, self.conf = st["assign"], st["expl"], st["conf"]
            self.done, self.abstentions = st["done"], st["abstentions"]

    async def run(self) -> Outcome:
        ctx, players = self.ctx, self.players
        for index in range(self.done, len(self.steps)):
            kind, p = self.steps[index]
            r = index + 1
            if kind == "initial":
                msgs = self.prompts.initial(self.game, len(players), self.cfg.confidence)
                await ctx.gather([functools.partial(self.full, r, i, "propose", msgs) for i in range(self.n)])
            elif kind == "player":
                await self.player_step(r, players[p])
            else:
                await self.final_step(r)
            await ctx.emit(
                "round.completed",
                {
                    "round": r,
                    "phase": kind,
                    "player": players[p] if p >= 0 else None,
                    "answers": [render_assignment(a, players) for a in self.assign],
                },
            )
            await self.run_info.checkpoint(ctx, r, self.state(index + 1))
        return self.outcome()

    def state(self, done: int) -> KksState:
        return {
            "assign": self.assign,
            "expl": self.expl,
            "conf": self.conf,
            "done": done,
            "abstentions": self.abstentions,
        }

    def outcome(self) -> Outcome:
        players = self.players
        team = team_answer(self.assign, players)
        final_answers = [render_assignment(a, players) or None for a in self.assign]
        answer = render_assignment(team, players) or None
        unanimous = len({f for f in final_answers}) == 1 and final_answers[0] is not None
        source = f"per-player majority vote of {self.n} agents"
        if self.abstentions:
            source += f" ({self.abstentions} unreadable replies abstained)"
        missing = [pl for pl in players if pl not in team]
        if missing:
            source += f"; no role for {', '.join(missing)}"
        return Outcome(answer, source, len(self.steps), unanimous, final_answers)

    def assignment_parser(self, c: ChatCompletion) -> dict[str, Any]:
        parsed = parse_assignment(c.text, self.players)
        data = first_json_object(c.text) or {}
        return {
            "answer": render_assignment(parsed, self.players) or None,
            "parse_error": None if parsed else "no player roles found",
            "extra": {
                "assignment": parsed,
                "explanation": str(data.get("explanation", ""))[:600],
                "confidence": _confidence(data, c.text),
            },
        }

    @staticmethod
    def role_parser(c: ChatCompletion) -> dict[str, Any]:
        role = parse_role(c.text)
        data = first_json_object(c.text) or {}
        reasoning = " ".join(str(data.get(k, "")) for k in ("agree_reasoning", "disagree_reasoning")).strip()
        return {
            "answer": role,
            "parse_error": None if role else "no role found",
            "extra": {"reasoning": reasoning[:600], "confidence": _confidence(data, c.text)},
        }

    def shown(
        self, me: int, views: list[Position], keys: list[str | None], gold: list[str] | None, r: int
    ) -> list[Position]:
        cfg = self.cfg
        others = order_views(
            [j for j in range(self.n) if j != me], keys, cfg.ordering, seed=view_seed(cfg, r, me), gold=gold
        )
        return [views[me], *(views[j] for j in others)]

    def latest_views(self) -> list[Position]:
        return [
            Position(
                self.names[i],
                render_assignment(self.assign[i], self.players) or "(none)",
                self.expl[i],
                self.conf[i],
            )
            for i in range(self.n)
        ]

    def view_keys(self) -> list[str | None]:
        return [render_assignment(a, self.players) or None for a in self.assign]

    def gold_text(self) -> list[str] | None:
        return [render_assignment(self.gold_assign, self.players)] if self.gold_assign else None

    async def full(self, r: int, i: int, role: str, messages: list[Any]) -> TranscriptRecord:
        """A full assignment from agent ``i``; an unreadable one keeps its previous view (abstains)."""
        cfg = self.cfg
        rec, ok = await call_with_reasks(
            self.ctx,
            round=r,
            role=role,
            agent=i,
            messages=messages,
            parse=self.assignment_parser,
            readable=lambda x: bool(x.extra.get("assignment")),
            temperature=cfg.agent_temperature(i),
            json_schema=self.prompts.ASSIGNMENT_SCHEMA,
        )
        if ok:
            self.assign[i] = {**self.assign[i], **rec.extra["assignment"]}
            self.expl[i] = rec.extra.get("explanation", "")
            self.conf[i] = rec.extra.get("confidence") if cfg.confidence else None
        else:
            self.abstentions += 1
        return rec

    async def player_step(self, r: int, player: str) -> None:
        """The agents argue about one player's role in turn (C.2 debate), then all adjust (C.2)."""
        arguments = await self.argue(r, player)
        await self.all_assign(
            r,
            "adjust",
            lambda i, latest: self.prompts.adjust(
                self.names[i], player, self.game, arguments, latest, self.cfg.confidence
            ),
        )

    async def argue(self, r: int, player: str) -> list[Position]:
        cfg, n, names, assign = self.cfg, self.n, self.names, self.assign
        arguments: list[Position] = []
        current = [
            Position(names[i], assign[i].get(player, "(none)"), self.expl[i], self.conf[i]) for i in range(n)
        ]
        keys: list[str | None] = [assign[i].get(player) for i in range(n)]
        # Without a gold role for this player, order_views raises the error naming `ordering`.
        gold_role = [self.gold_assign[player]] if player in self.gold_assign else None
        for i in speaking_order(n, cfg.speaking_order, seed=view_seed(cfg, r, -1)):
            rec, ok = await call_with_reasks(
                self.ctx,
                round=r,
                role="debater",
                agent=i,
                messages=self.prompts.debate(
                    names[i],
                    player,
                    self.game,
                    self.shown(i, current, keys, gold_role, r),
                    arguments,
                    [x for x in names if x != names[i]],
                    cfg.confidence,
                ),
                parse=self.role_parser,
                readable=lambda x: x.answer is not None,
                temperature=cfg.agent_temperature(i),
                json_schema=self.prompts.ROLE_SCHEMA,
            )
            if not ok:
                self.abstentions += 1
            role = rec.answer or assign[i].get(player, "(none)")
            c = rec.extra.get("confidence") if cfg.confidence else None
            arguments.append(Position(names[i], role, rec.extra.get("reasoning", ""), c))
        return arguments

    async def final_step(self, r: int) -> None:
        """Every agent decides on its full assignment, seeing the others' latest (C.3)."""
        await self.all_assign(
            r,
            "debater",
            lambda i, latest: self.prompts.final(self.names[i], self.game, latest, self.cfg.confidence),
        )

    async def all_assign(
        self, r: int, role: str, prompt: Callable[[int, Sequence[Position]], list[ChatMessage]]
    ) -> None:
        """Every agent gives its full assignment at once; ``prompt`` asks agent i, shown the latest
        solutions as it may see them (``shown``), all taken before any agent answers."""
        views, keys, gold = self.latest_views(), self.view_keys(), self.gold_text()
        await self.ctx.gather(
            [
                functools.partial(self.full, r, i, role, prompt(i, self.shown(i, views, keys, gold, r)))
                for i in range(self.n)
            ]
        )


run_kks = KksDebate.start

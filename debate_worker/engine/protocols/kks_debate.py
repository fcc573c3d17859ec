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
from typing import Any

from debate_worker.engine.context import DebateContext
from debate_worker.engine.jsontext import first_json_object
from debate_worker.engine.outcome import Outcome, ProtocolRun
from debate_worker.engine.protocols import kks_prompts as kp
from debate_worker.engine.protocols.common import (
    call_with_reasks,
    order_views,
    parse_confidence,
    speaking_order,
    view_seed,
)
from debate_worker.engine.result import TranscriptRecord
from debate_worker.kks.dataset import players_from_question
from debate_worker.kks.scoring import parse_assignment, parse_role, render_assignment, team_answer
from services.llm import ChatCompletion


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


async def run_kks(ctx: DebateContext, run: ProtocolRun) -> Outcome:
    cfg = ctx.config
    style = cfg.prompt_style
    players = players_from_question(ctx.question)
    if not players:
        raise ValueError("protocol: 'kks' needs a Knight-Knave-Spy puzzle question ('Player name:' lines)")
    game = game_of(ctx.question)
    n = cfg.agents
    names = [kp.agent_name(i) for i in range(n)]
    steps: list[tuple[str, int]] = [("initial", -1)]
    steps += [("player", p) for _ in range(cfg.depth) for p in range(len(players))]
    steps.append(("final", -1))
    gold_assign = parse_assignment(run.gold[0], players) if run.gold else {}

    assign: list[dict[str, str]] = [{} for _ in range(n)]
    expl: list[str] = [""] * n
    conf: list[int | None] = [None] * n
    abstentions = 0
    done = 0
    if run.resume is not None:
        st = run.resume.state
        assign, expl, conf = st["assign"], st["expl"], st["conf"]
        done, abstentions = st["done"], st["abstentions"]

    def assignment_parser(c: ChatCompletion) -> dict[str, Any]:
        parsed = parse_assignment(c.text, players)
        data = first_json_object(c.text) or {}
        return {
            "answer": render_assignment(parsed, players) or None,
            "parse_error": None if parsed else "no player roles found",
            "extra": {
                "assignment": parsed,
                "explanation": str(data.get("explanation", ""))[:600],
                "confidence": _confidence(data, c.text),
            },
        }

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
        me: int, views: list[kp.Position], keys: list[str | None], gold: list[str] | None, r: int
    ) -> list[kp.Position]:
        others = order_views(
            [j for j in range(n) if j != me], keys, cfg.ordering, seed=view_seed(cfg, r, me), gold=gold
        )
        return [views[me], *(views[j] for j in others)]

    def latest_views() -> list[kp.Position]:
        return [
            kp.Position(names[i], render_assignment(assign[i], players) or "(none)", expl[i], conf[i])
            for i in range(n)
        ]

    def gold_text() -> list[str] | None:
        return [render_assignment(gold_assign, players)] if gold_assign else None

    async def full(r: int, i: int, role: str, messages: list[Any]) -> TranscriptRecord:
        nonlocal abstentions
        rec, ok = await call_with_reasks(
            ctx,
            round=r,
            role=role,
            agent=i,
            messages=messages,
            parse=assignment_parser,
            readable=lambda x: bool(x.extra.get("assignment")),
            temperature=cfg.agent_temperature(i),
            json_schema=kp.ASSIGNMENT_SCHEMA if style == "robust" else None,
        )
        if ok:
            assign[i] = {**assign[i], **rec.extra["assignment"]}
            expl[i] = rec.extra.get("explanation", "")
            conf[i] = rec.extra.get("confidence") if cfg.confidence else None
        else:
            abstentions += 1
        return rec

    for index in range(done, len(steps)):
        kind, p = steps[index]
        r = index + 1
        if kind == "initial":
            msgs = kp.initial(style, game, len(players), cfg.confidence)
            await ctx.gather([functools.partial(full, r, i, "propose", msgs) for i in range(n)])
        elif kind == "player":
            player = players[p]
            arguments: list[kp.Position] = []
            current = [
                kp.Position(names[i], assign[i].get(player, "(none)"), expl[i], conf[i]) for i in range(n)
            ]
            keys: list[str | None] = [assign[i].get(player) for i in range(n)]
            gold_role = [gold_assign[player]] if player in gold_assign else None
            if cfg.ordering == "truth_last" and not gold_role:
                gold_role = None  # order_views raises the validation error naming `ordering`
            for i in speaking_order(n, cfg.speaking_order, seed=view_seed(cfg, r, -1)):
                rec, ok = await call_with_reasks(
                    ctx,
                    round=r,
                    role="debater",
                    agent=i,
                    messages=kp.debate(
                        style,
                        names[i],
                        player,
                        game,
                        shown(i, current, keys, gold_role, r),
                        arguments,
                        [x for x in names if x != names[i]],
                        cfg.confidence,
                    ),
                    parse=role_parser,
                    readable=lambda x: x.answer is not None,
                    temperature=cfg.agent_temperature(i),
                    json_schema=kp.ROLE_SCHEMA if style == "robust" else None,
                )
                if not ok:
                    abstentions += 1
                role = rec.answer or assign[i].get(player, "(none)")
                c = rec.extra.get("confidence") if cfg.confidence else None
                arguments.append(kp.Position(names[i], role, rec.extra.get("reasoning", ""), c))
            views = latest_views()
            view_keys: list[str | None] = [render_assignment(a, players) or None for a in assign]
            await ctx.gather(
                [
                    functools.partial(
                        full,
                        r,
                        i,
                        "adjust",
                        kp.adjust(
                            style,
                            names[i],
                            player,
                            game,
                            arguments,
                            shown(i, views, view_keys, gold_text(), r),
                            cfg.confidence,
                        ),
                    )
                    for i in range(n)
                ]
            )
        else:
            views = latest_views()
            view_keys = [render_assignment(a, players) or None for a in assign]
            await ctx.gather(
                [
                    functools.partial(
                        full,
                        r,
                        i,
                        "debater",
                        kp.final(
                            style, names[i], game, shown(i, views, view_keys, gold_text(), r), cfg.confidence
                        ),
                    )
                    for i in range(n)
                ]
            )
        team = team_answer(assign, players)
        await ctx.emit(
            "round.completed",
            {
                "round": r,
                "phase": kind,
                "player": players[p] if p >= 0 else None,
                "answers": [render_assignment(a, players) for a in assign],
            },
        )
        await run.checkpoint(
            ctx,
            r,
            {"assign": assign, "expl": expl, "conf": conf, "done": index + 1, "abstentions": abstentions},
        )

    team = team_answer(assign, players)
    final_answers = [render_assignment(a, players) or None for a in assign]
    answer = render_assignment(team, players) or None
    unanimous = len({f for f in final_answers}) == 1 and final_answers[0] is not None
    source = f"per-player majority vote of {n} agents"
    if abstentions:
        source += f" ({abstentions} unreadable replies abstained)"
    missing = [pl for pl in players if pl not in team]
    if missing:
        source += f"; no role for {', '.join(missing)}"
    return Outcome(answer, source, len(steps), unanimous, final_answers)

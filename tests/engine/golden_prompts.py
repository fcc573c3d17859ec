"""Every prompt of every protocol, rendered in every style from fixed inputs: the golden record.

The prompts are the papers' specification (paper style) and a measured variant (robust style), so a
refactoring of how they are built must not change one byte of them. ``render_all`` calls each prompt
through the protocols' public face (``prompts_for(style)``, ``get_prompts(style)``) over inputs that
reach every branch (knowledge or none, confidence, agreement, each decision, each tit-for-tat level);
``golden_prompts.json`` holds what the code rendered when the record was made, written by running
``.venv/bin/python -m tests.engine.golden_prompts --write``, never typed by hand.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.prompts import get_prompts
from engine.protocols import baselines, kks, mad, madke, mallm, society
from engine.protocols.kks.prompts import Position
from engine.protocols.society.prompts import View
from engine.styles import STYLE_NAMES
from services.knowledge import KnowledgeItem

GOLDEN = Path(__file__).parent / "data" / "golden_prompts.json"

Q = "Who wrote the novel that was adapted into the 1962 film 'Lawrence of Arabia'? {not a slot}"
KNOWLEDGE = (
    KnowledgeItem(
        n=1, source="wikipedia", title="Seven Pillars", text="T. E. Lawrence wrote it [1926].", url=None
    ),
    KnowledgeItem(
        n=2, source="web", title="Film <notes>", text="Directed by David Lean; {json}.", url="https://x"
    ),
)
REPLY_A = 'I think so.\n{"reason": "the memoir", "answer": "T. E. Lawrence"}'
REPLY_B = "Long reasoning " * 105 + "Therefore, the answer is [Robert Bolt]."
GAME = (
    "Player name: Ann\nPlayer statement: Bob is a knave.\n---\n"
    "Player name: Bob\nPlayer statement: I am a spy."
)
POSITIONS = (
    Position(agent="Agent 1", role="knight", reasoning="x" * 450, confidence=7),
    Position(agent="Agent 2", role="spy"),
)


def _cases(style: str) -> Iterator[tuple[str, Any]]:
    shared = get_prompts(style)
    yield "shared.select.first", shared.select(Q, KNOWLEDGE, None)
    yield "shared.select.later", shared.select(Q, KNOWLEDGE, REPLY_A)
    yield "shared.render_knowledge.empty", shared.render_knowledge(())
    yield "shared.search_passage", shared.search_passage(Q)

    b = baselines.prompts_for(style)
    yield "baselines.standard", b.standard(Q)
    yield "baselines.chain_of_thought", b.chain_of_thought(Q)
    yield "baselines.rag", b.rag(Q, KNOWLEDGE)
    yield "baselines.rag.no_knowledge", b.rag(Q, ())

    m = madke.prompts_for(style)
    for name, k in (("knowledge", KNOWLEDGE), ("no_knowledge", ())):
        yield f"madke.simultaneous.{name}", m.simultaneous(Q, k)
        yield f"madke.orderly.{name}", m.orderly(Q, k, [REPLY_A, REPLY_B], [REPLY_B, REPLY_A])
    yield "madke.orderly.no_history", m.orderly(Q, KNOWLEDGE, [REPLY_A], [])
    yield "madke.judge", m.judge(Q, [REPLY_A, REPLY_B, "no answer here"])
    yield "madke.summary", m.summary(Q, [REPLY_A, REPLY_B])

    s = society.prompts_for(style)
    views = [[View(REPLY_A, 8), View(REPLY_B)], [View(REPLY_B, 3), View(REPLY_A, None)]]
    for conf in (False, True):
        for persona in (None, "A careful historian"):
            for n_own in (0, 1, 2):
                yield (
                    f"society.messages.conf={conf}.persona={bool(persona)}.own={n_own}",
                    s.messages(
                        Q,
                        KNOWLEDGE,
                        views[:n_own],
                        [REPLY_A, REPLY_B][:n_own],
                        confidence=conf,
                        persona=persona,
                    ),
                )

    d = mad.prompts_for(style)
    for level in range(4):
        for side in ("affirmative", "negative"):
            yield (
                f"mad.debater_system.{level}.{side}",
                d.debater_system(Q, level, side),
            )
    for name, k in (("knowledge", KNOWLEDGE), ("no_knowledge", ())):
        yield f"mad.opening.{name}", d.opening(Q, k)
        yield f"mad.rebut_first.{name}", d.rebut_first(REPLY_A, k)
        yield f"mad.respond.{name}", d.respond(REPLY_B, k)
    yield "mad.moderator_system", d.moderator_system(Q)
    for r in (1, 3, 12):
        yield f"mad.moderator.{r}", d.moderator(r, REPLY_A, REPLY_B)
    yield "mad.judge_candidates", d.judge_candidates(REPLY_A, REPLY_B)
    yield "mad.judge_final", d.judge_final(Q)

    ml = mallm.prompts_for(style)
    history = [("Participant 1", REPLY_A), ("Agent 2", REPLY_B)]
    for agreement in (False, True):
        for hist_name, hist in (("history", history), ("no_history", [])):
            for current in (None, "T. E. Lawrence"):
                for name, k in (("knowledge", KNOWLEDGE), ("no_knowledge", ())):
                    yield (
                        f"mallm.discussion.agree={agreement}.{hist_name}.current={bool(current)}.{name}",
                        ml.discussion(Q, k, hist, current, persona=None, agent=1, agreement=agreement),
                    )
    yield (
        "mallm.discussion.persona",
        ml.discussion(Q, KNOWLEDGE, history, "x", persona="A judge", agent=0, agreement=True),
    )
    yield "mallm.extraction", ml.extraction(Q, REPLY_B, None, 2)
    yield "mallm.extraction.persona", ml.extraction(Q, REPLY_A, "A judge", 0)
    for decision in ("simple", "approval", "cumulative", "ranked"):
        for base in (0, 1):
            yield (
                f"mallm.vote.{decision}.{base}",
                ml.vote(
                    decision, Q, [REPLY_A, "Robert Bolt", "x"], base=base, points=10, persona=None, agent=0
                ),
            )
    yield (
        "mallm.vote.persona",
        ml.vote("cumulative", Q, ["a", "b"], base=1, points=25, persona="A judge", agent=3),
    )

    kp = kks.prompts_for(style)
    for conf in (False, True):
        yield f"kks.initial.conf={conf}", kp.initial(GAME, 2, conf)
        for earlier in ((), POSITIONS[:1]):
            yield (
                f"kks.debate.conf={conf}.earlier={len(earlier)}",
                kp.debate("Agent 1", "Bob", GAME, POSITIONS, earlier, ["Agent 2", "Agent 3"], conf),
            )
        yield (
            f"kks.adjust.conf={conf}",
            kp.adjust("Agent 2", "Bob", GAME, POSITIONS, POSITIONS[::-1], conf),
        )
        yield f"kks.final.conf={conf}", kp.final("Agent 2", GAME, POSITIONS, conf)


def _schemas(style: str) -> dict[str, Any]:
    """The JSON schemas and flags each style's prompts are sent with (part of what a style is)."""
    return {
        "shared": [get_prompts(style).ANSWER_SCHEMA, get_prompts(style).SELECT_SCHEMA],
        "baselines": baselines.prompts_for(style).ANSWER_SCHEMA,
        "madke": [
            madke.prompts_for(style).ANSWER_SCHEMA,
            madke.prompts_for(style).JUDGE_SCHEMA,
            madke.prompts_for(style).SUMMARIZE_AGREEMENT,
        ],
        "society": [society.prompts_for(style).ANSWER_SCHEMA, society.prompts_for(style).CONFIDENCE_SCHEMA],
        "mad": [
            mad.prompts_for(style).ANSWER_SCHEMA,
            mad.prompts_for(style).VERDICT_SCHEMA,
            mad.prompts_for(style).FINAL_SCHEMA,
        ],
        "mallm": [
            dict(mallm.prompts_for(style).VOTE_SCHEMAS),
            mallm.prompts_for(style).ANSWER_SCHEMA,
            mallm.prompts_for(style).AGREEMENT_SCHEMA,
        ],
        "kks": [kks.prompts_for(style).ASSIGNMENT_SCHEMA, kks.prompts_for(style).ROLE_SCHEMA],
    }


def render_all() -> dict[str, Any]:
    """Every prompt and schema of every protocol in every style, keyed ``style/protocol.prompt.case``."""
    out: dict[str, Any] = {}
    for style in STYLE_NAMES:
        for key, rendered in _cases(style):
            out[f"{style}/{key}"] = rendered
        out[f"{style}/schemas"] = _schemas(style)
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.engine.golden_prompts --write")
    GOLDEN.write_text(json.dumps(render_all(), indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")

"""``mad`` in the robust style: one-sentence roles, (K3) knowledge, JSON answers and verdicts."""

from __future__ import annotations

from engine.prompts import robust
from engine.protocols.mad.prompts import MadPrompts

ANSWER_TAIL = "\n\n" + robust.ANSWER_INSTRUCTION

ROBUST = MadPrompts(
    ANSWER_SCHEMA=robust.ANSWER_SCHEMA,
    VERDICT_SCHEMA={
        "type": "object",
        "properties": {
            "preference": {"type": "boolean"},
            "supported_side": {"type": "string", "enum": ["affirmative", "negative", "none"]},
            "reason": {"type": "string"},
            "debate_answer": {"type": "string"},
        },
        "required": ["preference", "supported_side", "debate_answer"],
        "additionalProperties": False,
    },
    FINAL_SCHEMA={
        "type": "object",
        "properties": {"reason": {"type": "string"}, "debate_answer": {"type": "string"}},
        "required": ["debate_answer"],
        "additionalProperties": False,
    },
    debater_system_template=(
        "You are the $side side in a debate about a factual question. $tit_for_tat Question: $question"
    ),
    side_prompts={},
    opening_template="Question: $question" + ANSWER_TAIL,
    rebut_first_template=(
        "The affirmative side says: $opponent\n\n"
        "You disagree with this answer. Give your own answer and reasons." + ANSWER_TAIL
    ),
    respond_template=(
        "The other side says: $opponent\n\nDo you agree? Give your reasons and your answer." + ANSWER_TAIL
    ),
    moderator_system_template=(
        "You moderate a debate about a factual question and decide whether one side's answer is clearly "
        "correct. Question: $question"
    ),
    moderator_template=(
        "Round $round has ended.\n"
        "- Affirmative: $affirmative\n"
        "- Negative: $negative\n\n"
        "Is one side clearly correct? Reply with JSON only: "
        '{"preference": true or false, "supported_side": "affirmative" or "negative" or "none", '
        '"reason": "...", "debate_answer": "..."}\n'
        "reason: one short sentence. debate_answer: the answer you think is correct, only the name, "
        "date, number or few words, or empty when neither side is clearly correct."
    ),
    judge_candidates_template=(
        "- Affirmative: $affirmative\n"
        "- Negative: $negative\n\n"
        "List the answer candidates, one per line, without reasons."
    ),
    judge_final_template=(
        "Question: $question\nWhich candidate is correct? Reply with JSON only: "
        '{"reason": "...", "debate_answer": "..."}\n'
        "reason: one short sentence. debate_answer: only the name, date, number or few words of the "
        "candidate that answers the question."
    ),
    turn_quote=robust.answer_with_reason,
    verdict_quote=robust.answer_with_reason,
    render_knowledge=robust.render_knowledge,
)

"""``mad`` in the paper style: Liang et al.'s prompts and the released configuration's verdicts."""

from __future__ import annotations

from engine.prompts import paper
from engine.protocols.mad.prompts import MadPrompts


def as_said(text: str) -> str:
    """The paper quotes the opponent's whole turn, as it was said."""
    return text


# The paper's debaters answer in free text; its verdicts are JSON asked for in the prompt, sent as
# free text.
PAPER = MadPrompts(
    ANSWER_SCHEMA=None,
    VERDICT_SCHEMA=None,
    FINAL_SCHEMA=None,
    debater_system_template=(
        "You are a debater. Hello and welcome to the debate competition. "
        "$tit_for_tat The debate topic is stated as follows: $question\n\n$side_prompt"
    ),
    side_prompts={
        "affirmative": "You are affirmative side. Please express your viewpoints.",
        "negative": "You are negative side. You disagree with the affirmative side's points. Provide your "
        "reasons and answer.",
    },
    opening_template="$question",
    rebut_first_template="$opponent\n\nYou disagree with my answer. Provide your answer and reasons.",
    respond_template="$opponent\n\nDo you agree with my perspective? Please provide your reasons and answer.",
    moderator_system_template=(
        "You are a moderator. There will be two debaters involved in a debate competition. They will "
        "present their answers and discuss their perspectives on the $question. At the end of each "
        "round, you will evaluate both sides' answers and decide which one is correct."
    ),
    moderator_template=(
        "Now the $ordinal round of debate for both sides has ended.\n\n"
        "Affirmative side arguing:\n$affirmative\n\n"
        "Negative side arguing: $negative\n\n"
        "You, as the moderator, will evaluate both sides' answers and determine if there is a clear "
        "preference for an answer candidate. If so, please summarize your reasons for supporting "
        "affirmative/negative side and give the final answer that you think is correct, and the "
        "debate will conclude. If not, the debate will continue to the next round. Now please output "
        'your answer in json format, with the format as follows: {"Whether there is a preference": '
        '"Yes or No", "Supported Side": "Affirmative or Negative", "Reason": "", '
        '"debate_answer": ""}. Please strictly output in JSON format, do not output irrelevant '
        "content."
    ),
    judge_candidates_template=(
        "Affirmative side arguing: $affirmative\n\n"
        "Negative side arguing: $negative\n\n"
        "Now, what answer candidates do we have? Present them without reasons."
    ),
    judge_final_template=(
        "Therefore, $question\nPlease summarize your reasons and give the final answer that you think "
        "is correct. Now please output your answer in json format, with the format as follows: "
        '{"Reason": "", "debate_answer": ""}. Please strictly output in JSON format, do not '
        "output irrelevant content."
    ),
    turn_quote=as_said,
    verdict_quote=paper.truncate,
    render_knowledge=paper.render_knowledge,
)

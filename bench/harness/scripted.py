"""Scripted replies for the in-process scripted LLM (``parley_testing.scripted_llm``), so a study that
measures the service and not a model gets debates that end the same way every time."""

from __future__ import annotations

from parley_testing.scripted_llm import JUDGE, SELECT, SUMMARY, ScriptedLLM


def agreeing_debate(llm: ScriptedLLM, debater_prompt: str = "") -> None:
    """Every debate picks passage 1, its agents answer Paris, the judge agrees in round 1 and the
    summary says Paris: the fewest calls a debate makes. ``debater_prompt`` is the text a debater's
    request must hold (empty: any request the rules before it did not take)."""
    llm.on(SELECT, "The most helpful knowledge is [1].")
    llm.on(JUDGE, "The agents agree. [Yes]")
    llm.on(SUMMARY, "All agents agree. The final answer is [Paris].")
    llm.on(debater_prompt, "Based on the knowledge, the answer is [Paris].")

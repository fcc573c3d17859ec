"""The search passage prompt (``DebateConfig.search_query="passage"``), as ``bench/query_rewrite.py``
measured it: two or three encyclopaedia sentences that answer the question (query2doc / HyDE), which
the pool's Wikipedia searches then look for after the question.

None of the debate papers writes a query before retrieval, so both styles send this one prompt, as
plain text (no JSON schema: the reply is searched, not parsed). It is the operator's text: a client
only chooses the mode.
"""

from __future__ import annotations

from services.chat_model import ChatMessage

SEARCH_PASSAGE = (
    "Write two or three sentences from a Wikipedia article that answer this question. Write only the "
    "sentences.\nQuestion: {question}\nPassage:"
)


def search_passage(question: str) -> list[ChatMessage]:
    """The one user message that asks for the passage (no system prompt: as measured)."""
    return [{"role": "user", "content": SEARCH_PASSAGE.format(question=question)}]

"""What the Wikipedia searches are given: the question, or the question followed by a search text.

A search text is a passage the debate's model wrote before retrieval (query2doc / HyDE): searching
with it after the question puts the answer into more pools (bench/query_rewrite.py). Both texts come
from outside the service, so they are cleaned of what the encoders and the JVM refuse.
"""

from __future__ import annotations


def clean_text(text: str) -> str:
    """``text`` with lone UTF-16 surrogates (which JSON's ``\\ud800`` escapes let through) replaced by
    U+FFFD: the tokenizers and the JVM refuse them, so they would otherwise fail the search (a 500)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def searched_text(search_text: str) -> str | None:
    """A search text as the searches see it: cleaned, whitespace collapsed; None when blank (a blank
    text searches for the question alone, and shares its pools)."""
    return " ".join(clean_text(search_text).split()) or None


def search_query(question: str, search_text: str | None) -> str:
    """What the first and second stages search for: the question, then the search text if there is one."""
    return question if search_text is None else f"{question} {search_text}"

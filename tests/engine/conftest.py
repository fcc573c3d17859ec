from __future__ import annotations

import pytest

from services.knowledge import KnowledgeItem, KnowledgePool

APOLLO = "Apollo 11 was the spaceflight that first landed humans on the Moon, on July 20, 1969."


@pytest.fixture
def pool() -> KnowledgePool:
    items = [
        KnowledgeItem(n=1, source="wikipedia", title="Apollo 11", text=APOLLO),
        KnowledgeItem(
            n=2,
            source="wikipedia",
            title="Neil Armstrong",
            text="Neil Armstrong was an American astronaut, the first person to walk on the Moon.",
        ),
        KnowledgeItem(
            n=3,
            source="web",
            title="Moon landing - History",
            text="July 20, 1969: one small step.",
            url="https://example.org/moon",
        ),
    ]
    return KnowledgePool(pool_id="p1", question="q", items=items)

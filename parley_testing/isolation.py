"""Conversations that tell whether a server keeps concurrent requests apart.

Each conversation holds one access code in a knowledge block of its own (a few invented survey
records around it) and asks for it back; the prompts share the robust style's opening example, as a
debate's calls do, so a server's prompt cache has many near matches to choose from. A reply that
names another conversation's code, or is missing its own, shows that the server answered from some
other request's state: the check needs no reference output and no particular model quality (the
packaged 0.5B copies the code in every reply when requests are kept apart).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from services.chat_model import ChatMessage

_WORDS = [
    *("amber", "basalt", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper"),
    *("kestrel", "lagoon", "meadow", "nickel", "onyx", "pewter", "quartz", "russet", "saffron"),
    *("tundra", "umber", "violet", "walnut", "xenon", "yarrow", "zephyr"),
]

# The same opening as every robust-style agent prompt: a shared prefix of about 90 tokens.
_EXAMPLE = (
    "=== FORMAT EXAMPLE (a different question from another domain; never reuse its answer) ===\n"
    "Question: Which gas do plants take from the air to make sugar?\n"
    '{"reason": "Plants take in carbon dioxide during photosynthesis.", "answer": "carbon dioxide"}\n'
    "=== END OF EXAMPLE ===\n\n"
)
REPLY_SCHEMA = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "answer": {"type": "string"}},
    "required": ["reason", "answer"],
}


@dataclass(frozen=True)
class Conversation:
    code: str
    prompt: str

    def messages(self, family: int) -> list[ChatMessage]:
        """The conversation's prompt as prompt family ``family`` sends it (a note per family at the
        end, so the families of one conversation share all but their last line)."""
        note = f"\n(Request {family} of this conversation.)" if family else ""
        return [
            {"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": self.prompt + note},
        ]


def conversations(n: int, seed: int = 1, records: tuple[int, int] = (4, 14)) -> list[Conversation]:
    """``n`` conversations with distinct codes; prompt lengths vary (``records`` survey lines before
    the code), so a slot's previous occupant is sometimes longer and sometimes shorter."""
    rng = random.Random(seed)
    out: list[Conversation] = []
    codes: set[str] = set()
    for i in range(n):
        code = f"{rng.choice(_WORDS).upper()}-{rng.randint(100, 999)}"
        while code in codes:
            code = f"{rng.choice(_WORDS).upper()}-{rng.randint(100, 999)}"
        codes.add(code)
        name = f"Station {rng.choice(_WORDS).title()} {i}"
        lines = " ".join(
            f"In year {1800 + rng.randint(0, 200)} the {rng.choice(_WORDS)} survey at {name} recorded "
            f"{rng.randint(2, 90)} {rng.choice(_WORDS)} samples near the {rng.choice(_WORDS)} ridge."
            for _ in range(rng.randint(*records))
        )
        prompt = (
            f"{_EXAMPLE}Knowledge:\n{lines}\nThe access code of {name} is {code}.\n"
            f"{lines[: len(lines) // 2]}\n\n"
            f"Question: What is the access code of {name}? "
            'Reply with JSON only: {"reason": "...", "answer": "..."}'
        )
        out.append(Conversation(code, prompt))
    return out


@dataclass(frozen=True)
class Verdict:
    own: bool  # the reply names its own conversation's code
    foreign: tuple[str, ...]  # other conversations' codes it names

    @property
    def mixed(self) -> bool:
        return bool(self.foreign)


def judge(reply: str, own: Conversation, everyone: list[Conversation]) -> Verdict:
    return Verdict(
        own=own.code in reply,
        foreign=tuple(c.code for c in everyone if c.code != own.code and c.code in reply),
    )

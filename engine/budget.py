"""A debate's call and token budget as a hard limit: every LLM call reserves its worst case first.

Checking a budget before a round and counting the round's calls afterwards lets a round overrun it
by all of its calls (twenty self-consistency samples, eight MADKE agents sent at once). Here each call
reserves, before it is sent, one call and its worst case in tokens: an upper bound of its prompt plus
the ``max_tokens`` it is sent with. The reservation is taken synchronously (no ``await`` between the
check and the take), so concurrent calls of one event loop cannot both get the last of a budget; a call
that does not fit is never sent. When the reply comes, the reservation is settled with the tokens the
server reports, also when the server answers after the debate stopped waiting for it (a cancellation,
or a timeout within the client's grace); a call cut off before the server answered keeps its whole
reservation as used, since the server may have spent it. A call that does not fit while siblings are
in flight waits for them to settle and tries again, so a round of concurrent calls uses the budget
about as far as one made call by call would.

The prompt bound: a byte-level BPE or SentencePiece (byte fallback) tokenizer never makes more tokens
of a text than it has UTF-8 bytes, and a chat template adds a few marker tokens per message. The bound
is therefore safe for the tokenizers of every OpenAI-compatible server Parley talks to, at the price of
stopping a debate up to a few calls before its budget is truly spent (English runs near four bytes a
token).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from services.chat_model import ChatMessage

# Role markers a chat template puts around each message, and the assistant header after them.
TEMPLATE_TOKENS_PER_MESSAGE = 8
TEMPLATE_TOKENS_REPLY = 8
# The reply length reserved when neither the config nor the model says how long a reply may be.
DEFAULT_REPLY_TOKENS = 512


def prompt_token_bound(messages: Sequence[ChatMessage]) -> int:
    """An upper bound of the prompt tokens any byte-level tokenizer counts for ``messages``."""
    text = sum(len(m["content"].encode("utf-8", "surrogatepass")) for m in messages)
    return text + TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + TEMPLATE_TOKENS_REPLY


class BudgetExhausted(Exception):
    """The debate reached its call or token budget; ``run_debate`` answers from what it has."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)
class Reservation:
    """One call's hold on the budget: one call and its worst case, the prompt bound plus the reply.

    ``calls`` is 0 for an extra attempt of a call already counted (``hold_attempt``)."""

    prompt: int
    reply: int
    calls: int = 1

    @property
    def tokens(self) -> int:
        return self.prompt + self.reply


class CallBudget:
    """The calls and tokens a debate may still spend; ``None`` limits are unlimited.

    ``calls_used``/``tokens_used`` start from what the job already spent (a resumed job's transcript,
    or more when an interrupted round's calls were served but not kept).
    """

    def __init__(
        self, calls: int | None, tokens: int | None, *, calls_used: int = 0, tokens_used: int = 0
    ) -> None:
        self.calls_limit = calls
        self.tokens_limit = tokens
        self.calls_used = calls_used
        self.tokens_used = tokens_used
        self.tokens_reserved = 0
        self.calls_reserved = 0
        # Calls waiting for siblings in flight to settle (``acquire``).
        self._waiters: list[asyncio.Future[None]] = []

    async def acquire(self, prompt_bound: int, reply_tokens: int) -> Reservation:
        """``reserve``, but a call that does not fit only because sibling calls hold their worst case
        waits for them to settle (they usually use far less) and tries again; it gives up when
        nothing is in flight any more. Without waiting a round would stop at the first few calls."""
        while True:
            try:
                return self.reserve(prompt_bound, reply_tokens)
            except BudgetExhausted:
                if self.calls_reserved == 0 or self._calls_exhausted():
                    raise
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def _calls_exhausted(self) -> bool:
        # Waiting cannot help the call cap: settled calls count as used.
        return self.calls_limit is not None and self.calls_used + self.calls_reserved + 1 > self.calls_limit

    def reserve(self, prompt_bound: int, reply_tokens: int) -> Reservation:
        """Hold one call and its worst case, or raise ``BudgetExhausted`` without holding anything."""
        calls = self.calls_used + self.calls_reserved
        if self.calls_limit is not None and calls + 1 > self.calls_limit:
            raise BudgetExhausted(f"call budget of {self.calls_limit} reached")
        worst = prompt_bound + reply_tokens
        held = self.tokens_used + self.tokens_reserved
        if self.tokens_limit is not None and held + worst > self.tokens_limit:
            raise BudgetExhausted(
                f"token budget of {self.tokens_limit} reached: {self.tokens_used} tokens used, "
                f"{self.tokens_reserved} held by calls in flight, the next call may need {worst}"
            )
        self.calls_reserved += 1
        self.tokens_reserved += worst
        return Reservation(prompt_bound, reply_tokens)

    def hold_attempt(self, call: Reservation) -> Reservation:
        """Hold the worst case of an attempt that was sent besides ``call``'s own (its client timed out
        on one replica and sent the call to another; the first may still be served). It is on its way
        already, so it is held without a check, and it counts as no call of its own."""
        self.tokens_reserved += call.tokens
        return Reservation(call.prompt, call.reply, calls=0)

    def settle(self, reservation: Reservation, tokens: int) -> int:
        """Replace the hold with the tokens the call really used; returns what is charged.

        A server that reports more than the bound (it should not) is charged at most the bound, so
        the budget holds even then; the transcript keeps what the server said.
        """
        charged = min(max(tokens, 0), reservation.tokens)
        self._release(reservation)
        self.calls_used += reservation.calls
        self.tokens_used += charged
        return charged

    def forfeit(self, reservation: Reservation) -> int:
        """A call cut off in flight: the server may have spent all of it, so all of it is used."""
        return self.settle(reservation, reservation.tokens)

    def cancel(self, reservation: Reservation) -> None:
        """A call that was never served (refused before any token was spent): nothing is used."""
        self._release(reservation)

    def _release(self, reservation: Reservation) -> None:
        self.calls_reserved -= reservation.calls
        self.tokens_reserved -= reservation.tokens
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

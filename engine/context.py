"""The per-debate context every protocol calls the LLM through.

One place does the accounting the paper comparisons rely on: each call picks the model for its role,
is timed, parsed by the caller's parser, recorded as a ``TranscriptRecord``, added to the usage totals
and announced as a ``turn.completed`` event. Protocols only build prompts and decide what happens next.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.budget import (
    DEFAULT_REPLY_TOKENS,
    BudgetExhausted,
    CallBudget,
    Reservation,
    prompt_token_bound,
)
from engine.config import DebateConfig
from engine.models import RoleModels, SingleModel, cache_key, endpoint_for, fallback_model
from engine.result import TranscriptRecord, Usage
from services.chat_model import ChatCompletion, ChatMessage, ChatModel, LateReply, LLMError, LLMTimeout
from services.knowledge import KnowledgePool
from services.observability.metrics import observe_late_settlement, observe_llm_call, observe_llm_error
from services.observability.telemetry import RoundSpans

if TYPE_CHECKING:
    from engine.pool_search import DebateSearches

EventSink = Callable[[str, dict[str, Any]], Awaitable[None] | None]


@dataclass(frozen=True)
class Spend:
    """A change to what the debate's LLM calls cost, told to the ``UsageSink`` at once (the job's owner
    is charged call by call, not when the debate finishes).

    Each call is charged twice: its worst case (``calls=1``) before it is sent, so a worker killed
    while the call is in flight leaves it charged, and then the difference to what the server
    reported (negative deltas, ``calls=0``), also when the server answers after the debate stopped
    waiting (a cancellation, or a timeout within the client's grace). A call that was never served
    is refunded whole; a call cut off before the server answered keeps its worst case (nothing more
    is told). An attempt the client sent besides the call's own (it timed out on one replica and
    went to another, and the first may still be served) is charged the same way with ``calls=0``:
    its worst case once the engine learns of it, then the difference to what that server reported.
    """

    prompt_tokens: int
    completion_tokens: int
    calls: int = 1

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


UsageSink = Callable[[Spend], Awaitable[None]]


@dataclass(frozen=True)
class CallLabels:
    """What metrics name a call by: its role, model and endpoint name (never a URL)."""

    role: str
    model: str
    endpoint: str


Parser = Callable[[ChatCompletion], dict[str, Any]]


__all__ = ["BudgetExhausted", "DebateContext", "EventSink", "RoleModels", "SingleModel", "Spend", "UsageSink"]


class DebateContext:
    def __init__(
        self,
        question: str,
        pool: KnowledgePool,
        config: DebateConfig,
        models: RoleModels,
        on_event: EventSink | None = None,
        transcript: Sequence[TranscriptRecord] = (),
        *,
        on_usage: UsageSink | None = None,
        spent: Spend | None = None,
    ) -> None:
        self.question = question
        self.pool = pool
        self.config = config
        self.models = models
        self._on_event = on_event
        self.transcript: list[TranscriptRecord] = list(transcript)
        self._seq = itertools.count(len(self.transcript))
        # Budget accounting survives a resume: it starts from the transcript carried over, or from
        # what the job was charged when that is more (calls of an interrupted round were served).
        kept_tokens = sum(r.prompt_tokens + r.completion_tokens for r in self.transcript)
        self.budget = CallBudget(
            config.budget_calls,
            config.budget_tokens,
            calls_used=max(len(self.transcript), spent.calls if spent else 0),
            tokens_used=max(kept_tokens, spent.tokens if spent else 0),
        )
        self._on_usage = on_usage
        # Calls the debate stopped waiting for while the server was working on them (a cancellation,
        # a timeout within the client's grace, an attempt on a replica the client failed over from):
        # each is left to end (the server answers, or the connection ends) and then charged what it
        # really cost.
        self._late: set[asyncio.Task[None]] = set()
        self._event_counts: dict[str, int] = {}
        self._order: dict[int, int] = {id(r): i for i, r in enumerate(self.transcript)}
        # Trace spans per round (no-ops unless tracing is configured), under the caller's span.
        self._spans = RoundSpans()
        # The debate's searches (``engine.pool_search``), set by ``run_debate``; None: none.
        self.searches: DebateSearches | None = None

    async def emit(self, event: str, data: dict[str, Any]) -> None:
        if event == "round.completed":
            self._spans.end_round(int(data.get("round", 0)))
        if self._on_event is None:
            return
        maybe = self._on_event(event, {**data, "key": self._event_key(event, data)})
        if inspect.isawaitable(maybe):
            await maybe

    def _event_key(self, event: str, data: dict[str, Any]) -> str:
        """A key that names the same step in every attempt: a job resumed after an interruption
        redoes the interrupted round, and its events carry the keys of the first try, so a client
        replaces what it showed instead of showing the round twice."""
        if event == "turn.completed":
            base = f"turn/{data.get('round')}/{data.get('role')}/{data.get('agent')}"
        elif event == "round.completed":
            return f"round/{data.get('round')}"
        else:
            base = f"{event}/{data.get('round')}"
        n = self._event_counts.get(base, 0)
        self._event_counts[base] = n + 1
        return f"{base}/{n}"

    async def call(
        self,
        *,
        round: int,
        role: str,
        agent: int | None,
        messages: list[ChatMessage],
        parse: Parser,
        temperature: float | None = None,
        json_schema: dict[str, Any] | None = None,
        knowledge: Sequence[int] = (),
    ) -> TranscriptRecord:
        """Run one LLM call and record it; ``parse`` turns the completion into record fields.

        Raises ``BudgetExhausted`` instead of calling when the call's worst case (its prompt bound
        plus ``max_tokens``) does not fit what is left of the budget: the call is then not sent.
        """
        seq = next(self._seq)
        endpoint = endpoint_for(role)
        model = self.models.for_role(endpoint, agent)
        reply_tokens = self._reply_tokens(model)
        # Taken without an await between check and take, so concurrent calls cannot share the last
        # of it; one that does not fit waits for its siblings in flight to settle, then gives up.
        reservation = await self.budget.acquire(
            prompt_token_bound(messages), reply_tokens or DEFAULT_REPLY_TOKENS
        )
        # Metrics and the call's span are labelled with the endpoint's name, never its URL.
        degraded: str | None = None

        async def send(to: ChatModel, held: Reservation) -> ChatCompletion:
            return await self._complete(
                to, endpoint, role, messages, held, seq, reply_tokens, temperature, json_schema, agent
            )

        with self._spans.llm_call(round, role, agent, model.model, endpoint, messages) as span:
            try:
                completion = await send(model, reservation)
            except LLMError as exc:
                # The operator's fallback for this role (judge, summarizer) answers instead, and the
                # step says so: a verdict from another model must never pass for the judge's own.
                fallback = fallback_model(self.models, endpoint)
                if fallback is None:
                    raise
                degraded = (
                    f"the {endpoint} endpoint failed ({type(exc).__name__}); answered by the fallback "
                    f"endpoint's model {fallback.model}"
                )
                model = fallback
                reservation = await self.budget.acquire(
                    prompt_token_bound(messages), reply_tokens or DEFAULT_REPLY_TOKENS
                )
                completion = await send(model, reservation)
            observe_llm_call(
                role,
                model.model,
                endpoint,
                latency_s=completion.latency_ms / 1000,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                cached_tokens=completion.cached_tokens,
            )
            span.record(
                text=completion.text,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                attempts=completion.attempts,
            )
        fields = parse(completion)
        record = TranscriptRecord(
            round=round,
            role=role,
            agent=agent,
            model=completion.model,
            knowledge=list(knowledge),
            text=completion.text,
            output_mode=completion.output_mode,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cached_tokens=completion.cached_tokens,
            latency_ms=float(f"{completion.latency_ms:.1f}"),  # "round" is the debate round here
            messages=[{"role": m["role"], "content": m["content"]} for m in messages],
            degraded=degraded,
            from_cache=completion.from_cache,
            **fields,
        )
        self._order[id(record)] = seq
        self.transcript.append(record)
        await self.emit(
            "turn.completed",
            {
                "round": round,
                "role": role,
                "agent": agent,
                "answer": record.answer,
                "selected": record.selected,
                "verdict": record.verdict,
                "parse_error": record.parse_error,
                "degraded": record.degraded,
                # What a live view shows of the call, the reply cut so a long-winded model cannot
                # bloat the event stream; the transcript keeps the whole text.
                "text": record.text[:2000],
                "knowledge": record.knowledge,
                "prompt_tokens": record.prompt_tokens,
                "completion_tokens": record.completion_tokens,
                "latency_ms": record.latency_ms,
            },
        )
        return record

    def _reply_tokens(self, model: ChatModel) -> int | None:
        """The ``max_tokens`` a call is sent with: the config's, else (under a token budget, which
        must know it) the model's own default; ``None`` leaves it to the client."""
        if self.config.max_tokens is not None:
            return self.config.max_tokens
        if self.config.budget_tokens is None:
            return None
        default = getattr(model, "max_tokens", None)
        return default if isinstance(default, int) and default > 0 else DEFAULT_REPLY_TOKENS

    async def _complete(
        self,
        model: ChatModel,
        endpoint: str,
        role: str,
        messages: list[ChatMessage],
        reservation: Reservation,
        seq: int,
        reply_tokens: int | None,
        temperature: float | None,
        json_schema: dict[str, Any] | None,
        agent: int | None,
    ) -> ChatCompletion:
        """Send the reserved call and settle the reservation, whatever way the call ends."""
        held = Spend(reservation.prompt, reservation.reply, 1)
        refund = Spend(-reservation.prompt, -reservation.reply, -1)
        labels = CallLabels(role, model.model, endpoint)
        try:
            await self._charge(held)  # the worst case is charged before anything is sent
        except BaseException:
            self.budget.cancel(reservation)
            await self._charge(refund)
            raise
        call = asyncio.ensure_future(
            model.complete(
                messages,
                temperature=self.config.temperature if temperature is None else temperature,
                max_tokens=reply_tokens,
                json_schema=json_schema,
                seed=None if self.config.seed is None else self.config.seed + seq,
                cache_key=cache_key(role, agent),
            )
        )
        try:
            # Shielded: a cancellation of the debate does not cut the request, whose real usage is
            # then charged once the server answers or the connection ends (settle_late_calls).
            completion = await asyncio.shield(call)
        except asyncio.CancelledError:
            # Settled by how the request ends, or ended: it may have failed (a refusal, given back) or
            # answered in the same instant as the cancellation, or been cut itself (worst case kept).
            self._settle_later(call, reservation, labels)
            raise
        except LLMTimeout as exc:
            # Past the client's deadline the request runs on for the client's grace: its reply, if
            # the server gives one within it, settles the call; until then (and for good, when the
            # grace runs out and the request is cut) the worst case stays charged.
            observe_llm_error(role, model.model, endpoint, exc)
            self._settle_later(call, reservation, labels)
            raise
        except LLMError as exc:
            # Refused or unreachable: no tokens were served (by this attempt; one the client timed
            # out on before it went to another replica may still be).
            observe_llm_error(role, model.model, endpoint, exc)
            self.budget.cancel(reservation)
            try:
                await self._charge(refund)
            finally:
                await self._settle_attempts(exc.late_attempts, reservation, labels)
            raise
        except BaseException:
            self.budget.cancel(reservation)
            await self._charge(refund)
            raise
        if completion.from_cache:
            # A replayed reply: no model call, so the worst case charged for it is given back whole.
            self.budget.cancel(reservation)
            await self._charge(refund)
            return completion
        await self._settle_served(reservation, completion, labels)
        return completion

    async def _settle(self, reservation: Reservation, completion: ChatCompletion) -> None:
        """Replace the worst case charged for a call with what the server says it used."""
        self.budget.settle(reservation, completion.prompt_tokens + completion.completion_tokens)
        await self._charge(
            Spend(
                completion.prompt_tokens - reservation.prompt,
                completion.completion_tokens - reservation.reply,
                0,
            )
        )

    async def _settle_served(
        self, reservation: Reservation, completion: ChatCompletion, labels: CallLabels
    ) -> None:
        """Settle an answered call, and take on the attempts it failed over from, even when a
        cancellation arrives in between (each step's charge is shielded)."""
        try:
            await self._settle(reservation, completion)
        finally:
            await self._settle_attempts(completion.late_attempts, reservation, labels)

    def _settle_later(
        self, call: Awaitable[ChatCompletion], reservation: Reservation, labels: CallLabels
    ) -> None:
        """Settle ``reservation`` in the background by how ``call`` ends (``settle_late_calls``)."""
        self._late.add(asyncio.ensure_future(self._settle_when_done(call, reservation, labels)))

    async def _settle_attempts(
        self, attempts: Sequence[LateReply], call: Reservation, labels: CallLabels
    ) -> None:
        """Attempts the client timed out on before it sent the call to another replica: each is held
        and charged at the call's worst case (counting no call of its own) at once, then settled in
        the background by what its server did."""
        if not attempts:
            return
        extras = [self.budget.hold_attempt(call) for _ in attempts]

        def settle_each() -> None:
            for attempt, extra in zip(attempts, extras, strict=True):
                self._settle_later(attempt, extra, labels)

        try:
            # One charge for all of them: a cancellation cannot leave some told and some not.
            await self._charge(Spend(call.prompt * len(extras), call.reply * len(extras), 0))
        except asyncio.CancelledError:
            settle_each()  # the sink is told all the same (shielded)
            raise
        except BaseException:
            for attempt, extra in zip(attempts, extras, strict=True):
                attempt.cancel()  # never charged: cut, and nothing to settle
                self.budget.cancel(extra)
            raise
        settle_each()

    async def _settle_when_done(
        self, call: Awaitable[ChatCompletion], reservation: Reservation, labels: CallLabels
    ) -> None:
        """A call (or attempt) the debate stopped waiting for: charged what it served once it ends.
        A request cut before the server answered (cancelled, or past the client's grace) keeps the
        worst case charged; a refusal gives it back (nothing served). A timeout's late reply, and the
        attempts the client failed over from, are settled the same way."""
        try:
            completion = await call
        except LLMTimeout as exc:
            await self._settle_attempts(exc.late_attempts, reservation, labels)
            if exc.late is not None:
                await self._settle_when_done(exc.late, reservation, labels)
                return
            self.budget.forfeit(reservation)
            observe_late_settlement(labels.role, labels.model, labels.endpoint, "worst_case")
            return
        except asyncio.CancelledError:
            self.budget.forfeit(reservation)
            observe_late_settlement(labels.role, labels.model, labels.endpoint, "worst_case")
            return
        except BaseException as exc:
            self.budget.cancel(reservation)
            observe_late_settlement(labels.role, labels.model, labels.endpoint, "refused")
            try:
                await self._charge(Spend(-reservation.prompt, -reservation.reply, -reservation.calls))
            finally:
                if isinstance(exc, LLMError):
                    await self._settle_attempts(exc.late_attempts, reservation, labels)
            return
        observe_late_settlement(
            labels.role,
            labels.model,
            labels.endpoint,
            "served",
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cached_tokens=completion.cached_tokens,
        )
        await self._settle_served(reservation, completion, labels)

    async def settle_late_calls(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``, undisturbed by a cancellation) for the calls the debate stopped
        waiting for to end and be charged their real usage; those still running then stay charged at
        their worst case (safe for the operator) and their requests are cut."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        cancelled: asyncio.CancelledError | None = None
        # Settling one may reveal more (the attempts a timed-out call failed over from).
        while self._late:
            late = list(self._late)
            self._late.clear()
            waiting = asyncio.ensure_future(asyncio.wait(late, timeout=max(0.0, deadline - loop.time())))
            while not waiting.done():
                try:
                    await asyncio.shield(waiting)
                except asyncio.CancelledError as exc:
                    cancelled = exc  # a cancellation (a second one, a caller's timeout) waits too
            _, pending = waiting.result()
            for task in pending:
                task.cancel()
        if cancelled is not None:
            raise cancelled

    async def _charge(self, spend: Spend) -> None:
        """Tell the usage sink, shielded so a cancellation arriving meanwhile cannot lose the charge."""
        if self._on_usage is not None:
            await asyncio.shield(self._on_usage(spend))

    async def gather(self, calls: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
        """Run independent calls concurrently, or one after another with ``sequential``."""
        if self.config.sequential:
            return [await c() for c in calls]
        tasks = [asyncio.ensure_future(c()) for c in calls]
        try:
            return list(await asyncio.gather(*tasks))
        except BudgetExhausted:
            # A call that did not fit was never sent; the ones that fit are already on their way:
            # let them finish so their answers (and the tokens they cost) are kept, then stop.
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        except BaseException:
            # One call failed (budget reached, LLM down, cancelled): stop its siblings too, so no
            # orphaned call keeps running and recording after the debate has ended.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def ordered_transcript(self) -> list[TranscriptRecord]:
        """Calls grouped by round, agents in order within a round, then judge/summary calls."""

        def key(r: TranscriptRecord) -> tuple[int, int, int, int]:
            return (
                r.round if r.round > 0 else 10_000,
                r.agent is None,
                r.agent or 0,
                self._order.get(id(r), 0),
            )

        return sorted(self.transcript, key=key)

    def usage(self) -> tuple[Usage, dict[str, Usage]]:
        total = Usage()
        by_role: dict[str, Usage] = {}
        for rec in self.transcript:
            total.add(rec)
            by_role.setdefault(rec.role, Usage()).add(rec)
        return total, by_role

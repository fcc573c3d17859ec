"""``ParleyClient``: the same client for code without an event loop.

It runs an ``AsyncParleyClient`` on a private event loop in a background thread, so the two clients
cannot drift apart: every call here is the async method, awaited there. The thread is a daemon: a
client nobody closed does not keep the interpreter from exiting.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from parley_client.aio import AsyncParleyClient, Config, Items, settings_args
from parley_wire import models as wire

T = TypeVar("T")

if TYPE_CHECKING:
    from parley_client.settings import ClientSettings


class _LoopThread:
    """An event loop running forever in a daemon thread; ``run`` waits for one coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="parley-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: stop the request on the loop as well
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


class ParleyClient:
    """Blocking twin of ``AsyncParleyClient`` (same arguments, same methods, same retries); use it as
    a context manager or call ``close()``."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        self._loop = _LoopThread()
        self._closed = False

        async def build() -> AsyncParleyClient:
            return AsyncParleyClient(base_url, **kwargs)

        self.aio = self._loop.run(build())

    @classmethod
    def from_settings(cls, settings: ClientSettings | None = None, url: str | None = None) -> ParleyClient:
        """A client for ``PARLEY_API_URL`` with ``PARLEY_API_KEY`` (or the settings given)."""
        base_url, kwargs = settings_args(settings, url)
        return cls(base_url, **kwargs)

    @property
    def retries(self) -> int:
        """How many 429/503 answers were waited out and retried."""
        return self.aio.retries

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self.aio.aclose())
        finally:
            self._loop.stop()

    def __enter__(self) -> ParleyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        async def run() -> T:
            return await fn(*args, **kwargs)

        return self._loop.run(run())

    def _iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._loop.run(_next(agen))
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and not self._closed:
                self._loop.run(aclose())

    def submit(
        self,
        question: str,
        config: Config = None,
        *,
        answers: list[str] | None = None,
        pool: list[dict[str, Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> wire.Accepted:
        return self._call(
            self.aio.submit, question, config, answers=answers, pool=pool, idempotency_key=idempotency_key
        )

    def get(self, job_id: str) -> wire.JobView:
        return self._call(self.aio.get, job_id)

    def cancel(self, job_id: str) -> wire.JobView:
        return self._call(self.aio.cancel, job_id)

    def delete(self, job_id: str) -> wire.DebateDeleted:
        return self._call(self.aio.delete, job_id)

    def events(self, job_id: str, *, last_event_id: str | None = None) -> Iterator[wire.DebateEvent]:
        return self._iterate(self.aio.events(job_id, last_event_id=last_event_id))

    def wait(self, job_id: str, *, poll_s: float = 1.0, timeout_s: float | None = None) -> wire.JobView:
        return self._call(self.aio.wait, job_id, poll_s=poll_s, timeout_s=timeout_s)

    def ask(self, question: str, config: Config = None, *, timeout_s: float | None = None) -> wire.JobView:
        return self._call(self.aio.ask, question, config, timeout_s=timeout_s)

    def usage(self, days: int = 7) -> wire.UsageView:
        return self._call(self.aio.usage, days)

    def submit_batch(
        self, items: Items, config: Config = None, *, idempotency_key: str | None = None
    ) -> wire.BatchAccepted:
        return self._call(self.aio.submit_batch, items, config, idempotency_key=idempotency_key)

    def get_batch(self, batch_id: str) -> wire.BatchView:
        return self._call(self.aio.get_batch, batch_id)

    def cancel_batch(self, batch_id: str) -> wire.BatchView:
        return self._call(self.aio.cancel_batch, batch_id)

    def delete_batch(self, batch_id: str) -> wire.BatchDeleted:
        return self._call(self.aio.delete_batch, batch_id)

    def wait_batch(
        self,
        batch_id: str,
        *,
        poll_s: float = 1.0,
        on_progress: Callable[[wire.BatchView], None] | None = None,
        timeout_s: float | None = None,
    ) -> wire.BatchView:
        return self._call(
            self.aio.wait_batch, batch_id, poll_s=poll_s, on_progress=on_progress, timeout_s=timeout_s
        )

    def iter_results(self, batch_id: str) -> Iterator[wire.BatchResult]:
        return self._iterate(self.aio.iter_results(batch_id))

    def results(self, batch_id: str) -> list[wire.BatchResult]:
        return list(self.iter_results(batch_id))

    def run_batch(
        self,
        items: Items,
        config: Config = None,
        *,
        chunk_size: int | None = None,
        progress: bool = True,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
    ) -> Iterator[wire.BatchResult]:
        return self._iterate(
            self.aio.run_batch(
                items, config, chunk_size=chunk_size, progress=progress, poll_s=poll_s, timeout_s=timeout_s
            )
        )


async def _next(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()

"""``ParleyClient``: the same client for code without an event loop.

It runs an ``AsyncParleyClient`` on a private event loop in a background thread, so the two clients
cannot drift apart: every call here is the async method, awaited there. The thread is a daemon: a
client nobody closed does not keep the interpreter from exiting.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from parley_client.aio import AsyncParleyClient, settings_args
from parley_wire import models as wire

T = TypeVar("T")
P = ParamSpec("P")

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


def _blocking(
    method: Callable[Concatenate[AsyncParleyClient, P], Awaitable[T]],
) -> Callable[Concatenate[ParleyClient, P], T]:
    """``method`` of the async client as a blocking method: awaited on the client's loop thread."""

    @functools.wraps(method)
    def call(self: ParleyClient, *args: P.args, **kwargs: P.kwargs) -> T:
        async def run() -> T:
            return await method(self.aio, *args, **kwargs)

        return self._loop.run(run())

    return call


def _blocking_iter(
    method: Callable[Concatenate[AsyncParleyClient, P], AsyncIterator[T]],
) -> Callable[Concatenate[ParleyClient, P], Iterator[T]]:
    """An async generator method of the async client as a blocking iterator over the same items."""

    @functools.wraps(method)
    def call(self: ParleyClient, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._iterate(method(self.aio, *args, **kwargs))

    return call


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

    # Every method is the async client's, awaited on the loop thread: same arguments, same docstring.
    submit = _blocking(AsyncParleyClient.submit)
    get = _blocking(AsyncParleyClient.get)
    cancel = _blocking(AsyncParleyClient.cancel)
    delete = _blocking(AsyncParleyClient.delete)
    events = _blocking_iter(AsyncParleyClient.events)
    wait = _blocking(AsyncParleyClient.wait)
    ask = _blocking(AsyncParleyClient.ask)
    usage = _blocking(AsyncParleyClient.usage)
    submit_batch = _blocking(AsyncParleyClient.submit_batch)
    get_batch = _blocking(AsyncParleyClient.get_batch)
    cancel_batch = _blocking(AsyncParleyClient.cancel_batch)
    delete_batch = _blocking(AsyncParleyClient.delete_batch)
    wait_batch = _blocking(AsyncParleyClient.wait_batch)
    iter_results = _blocking_iter(AsyncParleyClient.iter_results)
    run_batch = _blocking_iter(AsyncParleyClient.run_batch)

    def results(self, batch_id: str) -> list[wire.BatchResult]:
        """The batch's result lines in input order, as a list."""
        return list(self.iter_results(batch_id))


async def _next(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()

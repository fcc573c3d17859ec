"""Debating in this process, without the gateway: the configured or embedded LLM and the retrieval
service or the embedded index. ``parley ask`` and ``parley mcp --in-process`` run debates this way."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

from rich.console import Console

from engine.config import DebateConfig
from engine.context import RoleModels
from engine.result import DebateResult, TranscriptRecord
from engine.runner import EventSink, run_debate
from engine.search_passage import prepare_knowledge
from retriever.settings import RetrieverSettings
from services.knowledge import KnowledgePool, PoolBuilder, empty_pool
from services.llm import LLMSettings, ServedModel, build_role_models, describe_model, embedded_from_settings
from services.settings import RetrieverClientSettings


@contextlib.contextmanager
def llm_endpoint(settings: LLMSettings, console: Console) -> Iterator[ServedModel]:
    """The configured server, or the embedded one started for the duration of the block."""
    if settings.base_url:
        yield ServedModel(settings.base_url, settings.model)
        return

    with console.status(f"Preparing embedded model {describe_model(settings.embedded_model)} …") as status:

        def progress(done: int, total: int) -> None:
            status.update(f"Checking {settings.embedded_model}: {done * 100 // max(total, 1)}%")

        with embedded_from_settings(settings, progress) as server:
            status.stop()
            console.print(
                f"[dim]Embedded LLM {server.alias} serving at {server.base_url} ({server.kind})[/dim]"
            )
            yield server.served()


@contextlib.asynccontextmanager
async def pool_builder(console: Console) -> AsyncIterator[PoolBuilder]:
    """The retrieval service's client, or the in-process retriever on the embedded index."""
    client_settings = RetrieverClientSettings()
    if client_settings.url:
        # lazy: the retrieval client brings FastAPI's models (~120 ms), not for `parley --help`
        from services.retriever_client import RetrieverClient

        client = RetrieverClient(
            client_settings.url,
            timeout_s=client_settings.client_timeout_s,
            max_attempts=client_settings.client_max_attempts,
            retry_window_s=client_settings.client_retry_window_s,
        )
        try:
            yield client
        finally:
            await client.aclose()
        return
    # lazy: the in-process index brings Qdrant's engine, numpy and the encoder (~0.7 s)
    from retriever.local import LocalPoolBuilder, ensure_index

    settings = RetrieverSettings()
    ensure_index(settings, progress=True)
    builder = LocalPoolBuilder.open(settings)
    try:
        yield builder
    finally:
        close = getattr(builder, "close", None)
        if close is not None:
            close()


@contextlib.asynccontextmanager
async def knowledge_source(config: DebateConfig, console: Console) -> AsyncIterator[PoolBuilder | None]:
    """The retrieval a debate builds its pool with and, with ``debate_search``, searches during the
    debate: open for the whole debate; None when the protocol reads no pool."""
    if not config.needs_pool:
        yield None
        return
    async with pool_builder(console) as builder:
        yield builder


async def build_knowledge(
    question: str,
    config: DebateConfig,
    models: RoleModels,
    builder: PoolBuilder | None,
    console: Console,
    on_event: EventSink | None = None,
    *,
    status: bool = False,
) -> tuple[KnowledgePool, TranscriptRecord | None]:
    """The debate's pool and, with ``search_query="passage"``, the call that wrote the passage it was
    searched with (for ``run_debate(search=...)``, which counts it in the usage and the budget). A
    passage that could not be written leaves the question alone searched, with a warning on the pool.
    ``builder`` is ``knowledge_source``'s (None: no pool)."""
    if builder is None or not config.needs_pool:
        return empty_pool(question), None
    source = builder

    async def build(search_text: str | None) -> KnowledgePool:
        with contextlib.ExitStack() as shown:
            if status:
                shown.enter_context(console.status("Building the knowledge pool …"))
            return await source.build_pool(
                question, k_wiki=config.k_wiki, k_web=config.k_web, search_text=search_text
            )

    return await prepare_knowledge(question, config, models, build, on_event=on_event)


class LocalDebater:
    """Runs debates in this process; the LLM endpoint (the embedded server, if none is configured) is
    started on the first debate and kept until ``close``."""

    def __init__(self, llm_settings: LLMSettings, console: Console) -> None:
        self.llm_settings = llm_settings
        self.console = console
        self._stack = contextlib.ExitStack()
        self._served: ServedModel | None = None

    def close(self) -> None:
        self._stack.close()
        self._served = None

    async def debate(
        self, question: str, config: DebateConfig, on_event: EventSink | None = None
    ) -> DebateResult:
        if self._served is None:
            self._served = self._stack.enter_context(llm_endpoint(self.llm_settings, self.console))
        models = build_role_models(self.llm_settings, served=self._served)
        try:
            async with knowledge_source(config, self.console) as builder:
                pool, search = await build_knowledge(
                    question, config, models, builder, self.console, on_event
                )
                return await run_debate(
                    question, pool, config, models, on_event, search=search, searcher=builder
                )
        finally:
            await models.aclose()

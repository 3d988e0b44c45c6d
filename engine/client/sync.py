"""Synchronous facades: run an async core on a private event-loop thread (no second implementation)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from engine.client.calls import EncodeResult, ExtractResult, Item, ItemT, ModelCalls, ScoreResult
from engine.client.http import AsyncClient
from engine.client.loop import EXIT_PATIENCE_S, Closable, LoopThread, close_at_exit, forget
from engine.client.retry import RetryPolicy
from engine.tasks.extract import ExtractBody
from engine.tasks.requests import EncodeBody, Options, ScoreBody
from engine.tasks.results import EncodeResult as EncodeAnswer
from engine.tasks.results import ExtractResult as ExtractAnswer
from engine.tasks.results import ScoreResult as ScoreAnswer

if TYPE_CHECKING:
    from engine.model.tokenizer import TextTokenizer

T = TypeVar("T")
C = TypeVar("C", bound=ModelCalls)


class LoopBridge(ModelCalls):
    """A blocking facade's async core, awaited from another event loop: each wire call runs on the facade's
    loop thread and is awaited here without holding a thread; chunking and retries run on the caller's side."""

    def __init__(self, core: ModelCalls, loop: LoopThread) -> None:
        self._core, self._loop = core, loop
        self.retry, self.stream_window = core.retry, core.stream_window

    async def _there(self, coro: Coroutine[object, None, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop.loop))

    async def encode_body(self, model: str, body: EncodeBody) -> EncodeAnswer:
        return await self._there(self._core.encode_body(model, body))

    async def score_body(self, model: str, body: ScoreBody) -> ScoreAnswer:
        return await self._there(self._core.score_body(model, body))

    async def extract_body(self, model: str, body: ExtractBody) -> ExtractAnswer:
        return await self._there(self._core.extract_body(model, body))

    async def models(self) -> list[dict[str, Any]]:
        return await self._there(self._core.models())

    async def item_cap(self) -> int:
        return await self._there(self._core.item_cap())

    async def tokenizer(self, model: str) -> TextTokenizer:
        return await self._there(self._core.tokenizer(model))

    async def close(self) -> None:
        """Nothing: the facade owns the core, and its `close()` stops it."""


class SyncFacade(Closable, Generic[C]):
    """Blocking encode / score / models over an async core (AsyncEngine or AsyncClient) made on the loop thread;
    `aio` is the same core for async callers (the pipeline, the agent tools) on any other event loop.

    `close()`, a `with` block, or interpreter exit (when neither came) stops the core and joins its threads."""

    def __init__(self, make: Callable[[], Coroutine[object, None, C]]) -> None:
        self._loop = LoopThread()
        try:
            self._core: C = self._loop.run(make())
        except BaseException:
            self._loop.stop()
            raise
        self.aio: ModelCalls = LoopBridge(self._core, self._loop)
        self._closed = False
        close_at_exit(self)

    def _run(self, coro: Coroutine[object, None, T]) -> T:
        return self._loop.run(coro)

    @overload
    def encode(
        self,
        model: str,
        items: Item,
        *,
        output_types: list[str] | None = None,
        instruction: str | None = None,
        output_dtype: str | None = None,
        is_query: bool | None = None,
        options: Options | None = None,
    ) -> EncodeResult: ...

    @overload
    def encode(
        self,
        model: str,
        items: list[ItemT],
        *,
        output_types: list[str] | None = None,
        instruction: str | None = None,
        output_dtype: str | None = None,
        is_query: bool | None = None,
        options: Options | None = None,
    ) -> list[EncodeResult]: ...

    def encode(
        self,
        model: str,
        items: Item | list[ItemT],
        *,
        output_types: list[str] | None = None,
        instruction: str | None = None,
        output_dtype: str | None = None,
        is_query: bool | None = None,
        options: Options | None = None,
    ) -> EncodeResult | list[EncodeResult]:
        """Encode one item (returns one result) or a list (returns a list of results, in order)."""
        call: Coroutine[object, None, EncodeResult | list[EncodeResult]] = self._core.encode(
            model,
            items,
            output_types=output_types,
            instruction=instruction,
            output_dtype=output_dtype,
            is_query=is_query,
            options=options,
        )
        return self._run(call)

    def score(
        self,
        model: str,
        query: Item,
        items: Sequence[Item],
        *,
        instruction: str | None = None,
        options: Options | None = None,
    ) -> ScoreResult:
        """Rank items against a query: {model, query_id?, scores: [{item_id, score, rank}]}, best first."""
        return self._run(self._core.score(model, query, items, instruction=instruction, options=options))

    @overload
    def extract(
        self,
        model: str,
        items: Item,
        *,
        labels: list[str] | None = None,
        instruction: str | None = None,
        options: Options | None = None,
    ) -> ExtractResult: ...

    @overload
    def extract(
        self,
        model: str,
        items: list[ItemT],
        *,
        labels: list[str] | None = None,
        instruction: str | None = None,
        options: Options | None = None,
    ) -> list[ExtractResult]: ...

    def extract(
        self,
        model: str,
        items: Item | list[ItemT],
        *,
        labels: list[str] | None = None,
        instruction: str | None = None,
        options: Options | None = None,
    ) -> ExtractResult | list[ExtractResult]:
        """Entities or classifications of one item (one result) or a list (a list of results, in order)."""
        call: Coroutine[object, None, ExtractResult | list[ExtractResult]] = self._core.extract(
            model, items, labels=labels, instruction=instruction, options=options
        )
        return self._run(call)

    def models(self) -> list[dict[str, Any]]:
        """The model catalogue: one description per model."""
        return self._run(self._core.models())

    def close(self) -> None:
        """Stop the core (its background precision tune at once, its worker) and join its threads; idempotent."""
        self._close(None)

    def close_at_exit(self) -> None:
        self._close(EXIT_PATIENCE_S)

    def _close(self, timeout: float | None) -> None:
        if self._closed:
            return
        self._closed = True
        forget(self)
        try:
            self._loop.run(self._core.close(), timeout)
        finally:
            self._loop.stop()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client(SyncFacade[AsyncClient]):
    """Blocking HTTP client; the same calls (and the same Retry-After `retry` policy) as AsyncClient."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        api_key: str | None = None,
        timeout: float = 300.0,
        use_json: bool = False,
        max_items: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        async def make() -> AsyncClient:
            return AsyncClient(
                url, api_key=api_key, timeout=timeout, use_json=use_json, max_items=max_items, retry=retry
            )

        super().__init__(make)

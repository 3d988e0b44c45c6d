"""Blocking facades over an async core, generated from it: each method runs the core's coroutine of the same
name on a private event-loop thread (`blocking`), and the `aio` bridge awaits the core's wire primitives from
any other loop (`bridged`); no call is written a second time."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack, overload

from engine.client.calls import (
    EncodeArgs,
    EncodeResult,
    ExtractArgs,
    ExtractResult,
    Item,
    ItemT,
    ModelCalls,
    ScoreArgs,
    ScoreResult,
)
from engine.client.http import AsyncClient, ClientOptions
from engine.client.loop import EXIT_PATIENCE_S, LoopThread, close_at_exit, forget

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
C = TypeVar("C", bound=ModelCalls)
CoreMethod = Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]


class blocking(Generic[P, R]):
    """A facade method made from the core's method of the same name: same parameters, its coroutine run on the
    facade's loop thread, its result (or its ShoalError) returned here."""

    def __init__(self, method: CoreMethod[P, R]) -> None:
        self._method = method
        self._name = method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, facade: None, owner: type) -> blocking[P, R]: ...
    @overload
    def __get__(self, facade: SyncFacade[Any], owner: type) -> Callable[P, R]: ...

    def __get__(self, facade: SyncFacade[Any] | None, owner: type) -> blocking[P, R] | Callable[P, R]:
        if facade is None:
            return self
        method: Callable[P, Coroutine[Any, Any, R]] = getattr(facade.core, self._name)  # the core's own override

        @functools.wraps(self._method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return facade.loop_thread.run(method(*args, **kwargs))

        return call


class bridged(Generic[P, R]):
    """A LoopBridge method made from the core's: its coroutine runs on the facade's loop thread and is awaited
    from the caller's loop without holding a thread."""

    def __init__(self, method: CoreMethod[P, R]) -> None:
        self._name = method.__name__
        self._method = method

    @overload
    def __get__(self, bridge: None, owner: type) -> bridged[P, R]: ...
    @overload
    def __get__(self, bridge: LoopBridge, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, bridge: LoopBridge | None, owner: type) -> bridged[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if bridge is None:
            return self
        method: Callable[P, Coroutine[Any, Any, R]] = getattr(bridge.core, self._name)
        loop = bridge.loop_thread.loop

        @functools.wraps(self._method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(method(*args, **kwargs), loop))

        return call


class LoopBridge(ModelCalls):
    """A blocking facade's async core, awaited from another event loop: each wire call runs on the facade's
    loop thread and is awaited here without holding a thread; chunking and retries run on the caller's side."""

    def __init__(self, core: ModelCalls, loop: LoopThread) -> None:
        self.core, self.loop_thread = core, loop
        self.retry, self.stream_window = core.retry, core.stream_window

    encode_body = bridged(ModelCalls.encode_body)
    score_body = bridged(ModelCalls.score_body)
    extract_body = bridged(ModelCalls.extract_body)
    models = bridged(ModelCalls.models)
    item_cap = bridged(ModelCalls.item_cap)
    tokenizer = bridged(ModelCalls.tokenizer)

    async def close(self) -> None:
        """Nothing: the facade owns the core, and its `close()` stops it."""


class SyncFacade(Generic[C]):
    """Blocking encode / score / extract / models over an async core (AsyncEngine or AsyncClient) made on the loop
    thread; `aio` is the same core for async callers (the pipeline, the agent tools) on any other event loop.

    `close()`, a `with` block, or interpreter exit (when neither came) stops the core and joins its threads."""

    def __init__(self, make: Callable[[], Coroutine[object, None, C]]) -> None:
        self.loop_thread = LoopThread()
        try:
            self.core: C = self.loop_thread.run(make())
        except BaseException:
            self.loop_thread.stop()
            raise
        self.aio: ModelCalls = LoopBridge(self.core, self.loop_thread)
        self._closed = False
        close_at_exit(self)

    if TYPE_CHECKING:  # the overloads of one item or a list, as the core declares them

        @overload
        def encode(self, model: str, items: Item, **args: Unpack[EncodeArgs]) -> EncodeResult: ...
        @overload
        def encode(self, model: str, items: list[ItemT], **args: Unpack[EncodeArgs]) -> list[EncodeResult]: ...
        def encode(self, model: str, items: Item | list[ItemT], **args: Unpack[EncodeArgs]) -> Any: ...
        @overload
        def extract(self, model: str, items: Item, **args: Unpack[ExtractArgs]) -> ExtractResult: ...
        @overload
        def extract(self, model: str, items: list[ItemT], **args: Unpack[ExtractArgs]) -> list[ExtractResult]: ...
        def extract(self, model: str, items: Item | list[ItemT], **args: Unpack[ExtractArgs]) -> Any: ...
        def score(self, model: str, query: Item, items: Sequence[Item], **args: Unpack[ScoreArgs]) -> ScoreResult: ...
    else:
        encode = blocking(ModelCalls.encode)
        extract = blocking(ModelCalls.extract)
        score = blocking(ModelCalls.score)
    models = blocking(ModelCalls.models)

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
            self.loop_thread.run(self.core.close(), timeout)
        finally:
            self.loop_thread.stop()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client(SyncFacade[AsyncClient]):
    """Blocking HTTP client; the same calls (and the same Retry-After `retry` policy) as AsyncClient."""

    def __init__(self, url: str = "http://127.0.0.1:8080", **options: Unpack[ClientOptions]) -> None:
        async def make() -> AsyncClient:
            return AsyncClient(url, **options)

        super().__init__(make)

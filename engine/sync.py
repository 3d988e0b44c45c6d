"""Synchronous facades: run the async core on a private event-loop thread (no second implementation)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from engine.client import AsyncClient
from engine.config import EngineSettings
from engine.runtime import AsyncEngine

T = TypeVar("T")


class LoopThread:
    """An event loop on a daemon thread; `run` executes a coroutine there and blocks for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="shoal-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)


def _blocking(name: str, owner: type) -> Any:
    """A method that runs `self._core.<name>(...)` on the loop thread and returns its result."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._loop.run(getattr(self._core, name)(*args, **kwargs))

    method.__name__ = name
    method.__doc__ = getattr(owner, name).__doc__
    return method


class _SyncFacade:
    _loop: LoopThread
    _core: Any

    def close(self) -> None:
        """Stop the core and its loop thread."""
        try:
            self._loop.run(self._core.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Engine(_SyncFacade):
    """The in-process engine: no server, same `encode(model, items, ...)` as the HTTP clients."""

    def __init__(self, settings: EngineSettings | None = None, **overrides: Any) -> None:
        settings = settings or EngineSettings(**overrides)
        self._loop = LoopThread()

        async def make() -> AsyncEngine:
            return await AsyncEngine(settings).start()

        self._core = self._loop.run(make())

    @property
    def core(self) -> AsyncEngine:
        return self._core

    encode = _blocking("encode", AsyncEngine)
    encode_body = _blocking("encode_body", AsyncEngine)
    score = _blocking("score", AsyncEngine)
    models = _blocking("models", AsyncEngine)


class Client(_SyncFacade):
    """Blocking HTTP client; the same calls as AsyncClient."""

    def __init__(self, url: str = "http://127.0.0.1:8080", **kwargs: Any) -> None:
        self._loop = LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(url, **kwargs)

        self._core = self._loop.run(make())

    encode = _blocking("encode", AsyncClient)
    score = _blocking("score", AsyncClient)
    models = _blocking("models", AsyncClient)

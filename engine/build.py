"""The server and the worker as `shoal serve` and `shoal worker` run them, built from settings alone: the CLI
parses options into EngineSettings and calls these; tests and embedders call the same functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from engine.config import EngineSettings

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI

    from engine.client.protocol import ShoalClient
    from engine.runtime import AsyncEngine

RouterFactory = Callable[["ShoalClient"], "APIRouter"]  # routes over the serving engine (tools, search)


def build_app(settings: EngineSettings, routers: Sequence[RouterFactory] = ()) -> FastAPI:
    """The HTTP app over one engine: embedded (its own worker), or a gateway only when the settings name a
    queue (workers run elsewhere); each of `routers` is made over that engine and mounted. The engine starts
    and drains with the app (`engine.http.server.serve_app` runs it; so does starlette's TestClient)."""
    from engine.http.app import create_app
    from engine.runtime import AsyncEngine

    engine = AsyncEngine(settings, worker=not settings.queue_url)
    app = create_app(engine)
    for make in routers:
        app.include_router(make(engine))
    return app


def build_worker(settings: EngineSettings) -> AsyncEngine:
    """A pull worker over the shared queue the settings name (not started: `await worker.start()`)."""
    from engine.runtime import AsyncEngine

    if not settings.queue_url:
        raise ValueError("a worker needs a queue URL (--queue nats://host:port or SHOAL_QUEUE_URL)")
    return AsyncEngine(settings, worker=True)

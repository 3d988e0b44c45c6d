"""The HTTP app: middleware (auth, metrics, never a bare 500), health routes, and the route families.

A route family is one module with a router (engine.http.native, .openai, .rerank, .cohere, .tei); adding
one is a new module and one entry in FAMILIES.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import InternalError, ShoalError, Unauthorized
from engine.http import cohere, native, openai, rerank, tei
from engine.http.replies import RouteFamily, error_response, native_error
from engine.metrics import LATENCY, QUEUE_DEPTH, REQUESTS
from engine.runtime import AsyncEngine

FAMILIES: tuple[RouteFamily, ...] = (native.FAMILY, openai.FAMILY, rerank.FAMILY, cohere.FAMILY, tei.FAMILY)
OPEN_PATHS = ("/healthz", "/readyz", "/metrics")
ENDPOINTS = {"encode", "score", "extract", "embeddings", "rerank", "models"}


def create_app(engine: AsyncEngine) -> FastAPI:
    """The FastAPI app over one engine; the engine starts and drains with the app."""
    settings = engine.settings
    error_bodies = {path: f.error_body for f in FAMILIES for path in f.error_paths}

    def error_for(request: Request, err: ShoalError) -> JSONResponse:
        body = error_bodies.get(request.url.path, native_error)(err)
        return error_response(err, body)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        yield
        await engine.close()

    app = FastAPI(title="shoal", version="0.1.0", lifespan=lifespan)
    app.state.engine = engine

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """Auth, metrics and the never-a-bare-500 rule for every path."""
        path = request.url.path
        started = time.perf_counter()
        try:
            authorized = request.headers.get("authorization", "") == f"Bearer {settings.api_key}"
            if settings.api_key and not path.startswith(OPEN_PATHS) and not authorized:
                raise Unauthorized("missing or wrong API key; send 'Authorization: Bearer <key>'")
            response = await call_next(request)
        except ShoalError as e:
            response = error_for(request, e)
        except Exception as e:  # noqa: BLE001 - last resort: a typed 500, and the server stays up
            response = error_for(request, InternalError(f"{type(e).__name__}: {e}"))
        if path.startswith("/v1/"):
            # bounded label sets: arbitrary paths and unknown model names must not grow the metrics
            endpoint = path.split("/")[2] if path.split("/")[2] in ENDPOINTS else "other"
            model = request.scope.get("shoal_model", "") if response.status_code != 404 else "unknown"
            REQUESTS.labels(endpoint, model, str(response.status_code)).inc()
            LATENCY.labels(endpoint, model).observe(time.perf_counter() - started)
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        """Unknown routes and methods get the same error shape as everything else."""
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(err.status_code, "HTTP_ERROR")
        message = f"{request.method} {request.url.path}: {err.detail}"
        return JSONResponse({"detail": {"code": code, "message": message}}, status_code=err.status_code)

    @app.exception_handler(ShoalError)
    async def _shoal_error(request: Request, err: ShoalError) -> JSONResponse:
        return error_for(request, err)

    for family in FAMILIES:
        app.include_router(family.router)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        if engine.ready and not engine.draining:
            return JSONResponse({"status": "ready"})
        state = "draining" if engine.draining else "starting"
        return JSONResponse({"status": state}, status_code=503, headers={"Retry-After": "1"})

    @app.get("/metrics")
    async def metrics() -> Response:
        if engine.queue is not None:
            QUEUE_DEPTH.set(await engine.queue.depth())
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app

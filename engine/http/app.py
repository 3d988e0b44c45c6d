"""The HTTP app: the edge middleware (engine.http.edge), CORS when configured, health and metrics routes,
the route families, the web console at / and the offline /docs.

A route family is one module with a router (engine.http.native, .openai, .rerank, .cohere, .tei); adding
one is a new module and one entry in FAMILIES. `create_app` raises AuthConfigError for a key configuration
it cannot use: the gateway refuses to start rather than run open.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import ShoalError
from engine.http import cohere, console, docs, native, openai, rerank, status, tei
from engine.http.edge import Edge
from engine.http.openai import openai_error
from engine.http.policy import ServerPolicy
from engine.http.redact import scrub_body
from engine.http.replies import ErrorBody, RouteFamily, error_response, native_error
from engine.metrics import QUEUE_DEPTH
from engine.runtime import AsyncEngine
from engine.tasks.results import JSONObject

FAMILIES: tuple[RouteFamily, ...] = (
    native.FAMILY, openai.FAMILY, rerank.FAMILY, cohere.FAMILY, tei.FAMILY, status.FAMILY, console.FAMILY,
)  # fmt: skip


class NotFound(ShoalError):
    code, status = "NOT_FOUND", 404


class MethodNotAllowed(ShoalError):
    code, status = "METHOD_NOT_ALLOWED", 405


def routing_error(method: str, path: str, status: int, detail: str) -> ShoalError:
    """Starlette's routing failure as a typed error."""
    if status == 404:
        return NotFound(f"{method} {path}: no such route")
    if status == 405:
        return MethodNotAllowed(f"{method} {path}: the route does not take {method}")
    err = ShoalError(f"{method} {path}: {detail}")
    err.status, err.code = status, "HTTP_ERROR"
    return err


def both_shapes(err: ShoalError) -> JSONObject:
    """Native and OpenAI error bodies at once, for routes both sie-sdk and the openai client read."""
    return {**native_error(err), **openai_error(err)}


def family_error(exact: dict[str, ErrorBody], path: str) -> ErrorBody:
    """The error body of a path's route family: exact paths first, then the families of whole prefixes."""
    found = exact.get(path)
    if found is not None:
        return found
    if path.startswith("/v1/models/"):  # GET /v1/models/{id}: sie-sdk and openai's models.retrieve
        return both_shapes
    if path.startswith("/infinity/"):
        return openai_error
    return native_error


def create_app(engine: AsyncEngine) -> FastAPI:
    """The FastAPI app over one engine; the engine starts and drains with the app."""
    settings = engine.settings
    policy = ServerPolicy.of(settings)  # AuthConfigError: refuse to start
    auth, scrub = policy.auth, policy.scrub
    error_bodies = {path: f.error_body for f in FAMILIES for path in f.error_paths}

    def error_body(path: str, err: ShoalError) -> JSONObject:
        """An error in its route family's shape, with no server paths when local folders are off."""
        return scrub_body(family_error(error_bodies, path)(err), scrub)

    def error_for(path: str, err: ShoalError) -> JSONResponse:
        return error_response(err, error_body(path, err))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        yield
        await engine.close()

    # /docs and /redoc come from engine.http.docs (assets from a package, not a CDN)
    app = FastAPI(title="shoal", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.engine = engine
    engine.control_admission()  # overload sheds network requests (503 QUEUE_FULL) at once
    app.state.error_body = error_body  # the connection layer answers protocol errors in the same shapes
    app.add_middleware(
        Edge,
        settings=settings,
        auth=auth,
        catalogue=engine.catalogue,
        respond=error_for,
        scrub=None if settings.local_models else scrub,
        public=console.is_public,  # the console's page and assets (never data) need no key
    )
    if settings.cors_origins:  # outside the edge: preflight requests carry no key
        from engine.http.cors import JsonCors

        app.add_middleware(JsonCors, respond=error_for, origins=settings.cors_origins)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        """Unknown routes and methods get their path's family error shape, like everything else."""
        path = request.url.path
        shoal_err = routing_error(request.method, path, err.status_code, str(err.detail))
        response = error_for(path, shoal_err)
        for name, value in (err.headers or {}).items():  # Allow on a 405
            response.headers[name] = value
        return response

    @app.exception_handler(ShoalError)
    async def _shoal_error(request: Request, err: ShoalError) -> JSONResponse:
        return error_for(request.url.path, err)

    for family in FAMILIES:
        app.include_router(family.router)
    app.include_router(docs.router)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        if engine.ready and not engine.draining:
            count = getattr(engine.queue, "workers", None)  # a gateway: are there workers to take the work?
            if count is None:
                return JSONResponse({"status": "ready"})
            workers = await count()
            if workers == 0:  # ready itself (a gateway may start first); requests get 503 NO_WORKER meanwhile
                return JSONResponse({"status": "ready", "workers": 0, "warning": "NO_WORKER: no worker is pulling"})
            return JSONResponse({"status": "ready", "workers": workers})
        state = "draining" if engine.draining else "starting"
        return JSONResponse({"status": state}, status_code=503, headers={"Retry-After": "1"})

    if settings.metrics_port is None:  # else /metrics is served on its own port (engine.http.server)

        @app.get("/metrics")
        async def metrics() -> Response:
            if engine.queue is not None:
                QUEUE_DEPTH.set(await engine.queue.depth())
            return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app

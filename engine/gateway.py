"""The HTTP gateway: validates and annotates requests, hands them to the engine's queue, shapes replies."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.cards import check_task
from engine.errors import InternalError, InvalidInput, PayloadTooLarge, ShoalError, Unauthorized
from engine.metrics import LATENCY, QUEUE_DEPTH, REQUESTS
from engine.openai_compat import embeddings_body, embeddings_response
from engine.runtime import AsyncEngine
from engine.schemas import rerank_body
from engine.wire import decode_body, encode_response, response_type

OPEN_PATHS = ("/healthz", "/readyz", "/metrics")
ENDPOINTS = {"encode", "score", "extract", "embeddings", "rerank", "models"}


def error_response(err: ShoalError, openai: bool = False) -> JSONResponse:
    """API.md's error body: {"detail": {code, message}}, or OpenAI's {"error": {...}} on OpenAI paths."""
    if openai:
        body: dict[str, Any] = {"error": {"message": err.message, "type": err.code.lower(), "code": err.code}}
    else:
        body = {"detail": err.to_dict()}
    headers = {"Retry-After": str(max(1, round(err.retry_after)))} if err.retry_after is not None else None
    return JSONResponse(body, status_code=err.status, headers=headers)


def timing_headers(timing: dict[str, float]) -> dict[str, str]:
    names = {"queue_ms": "X-Queue-Time", "tokenization_ms": "X-Tokenization-Time"}
    names |= {"inference_ms": "X-Inference-Time", "total_ms": "X-Total-Time"}
    return {h: f"{timing[k]:.2f}" for k, h in names.items() if k in timing}


def native_reply(request: Request, result: dict[str, Any]) -> Response:
    """A native result in the media type the client asked for, with the timing headers."""
    media = response_type(request.headers.get("accept"), request.headers.get("content-type"))
    headers = timing_headers(result.get("timing", {}))
    return Response(encode_response(result, media), media_type=media, headers=headers)


def create_app(engine: AsyncEngine) -> FastAPI:
    """The FastAPI app over one engine; the engine starts and drains with the app."""
    settings = engine.settings

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        yield
        await engine.close()

    app = FastAPI(title="shoal", version="0.1.0", lifespan=lifespan)
    app.state.engine = engine

    async def read_body(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise PayloadTooLarge(f"body of {declared} bytes is over the limit of {settings.max_body_bytes}")
        raw = await request.body()
        if len(raw) > settings.max_body_bytes:
            raise PayloadTooLarge(f"body of {len(raw)} bytes is over the limit of {settings.max_body_bytes}")
        return decode_body(raw, request.headers.get("content-type"))

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        """Auth, metrics and the never-a-bare-500 rule for every path."""
        path = request.url.path
        openai = path in ("/v1/embeddings", "/v1/rerank")
        started = time.perf_counter()
        try:
            authorized = request.headers.get("authorization", "") == f"Bearer {settings.api_key}"
            if settings.api_key and not path.startswith(OPEN_PATHS) and not authorized:
                raise Unauthorized("missing or wrong API key; send 'Authorization: Bearer <key>'")
            response = await call_next(request)
        except ShoalError as e:
            response = error_response(e, openai)
        except Exception as e:  # noqa: BLE001 - last resort: a typed 500, and the server stays up
            response = error_response(InternalError(f"{type(e).__name__}: {e}"), openai)
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
        return error_response(err, request.url.path in ("/v1/embeddings", "/v1/rerank"))

    @app.post("/v1/encode/{model:path}")
    async def encode(model: str, request: Request) -> Response:
        request.scope["shoal_model"] = model
        return native_reply(request, await engine.encode_body(model, await read_body(request)))

    @app.post("/v1/extract/{model:path}")
    async def extract(model: str, request: Request) -> Response:
        """No extraction model family exists yet: unknown models are 404, the others say they cannot extract."""
        request.scope["shoal_model"] = model
        await read_body(request)
        check_task(engine.card(model), "extract")
        raise InvalidInput(f"model {model!r} declares 'extract', but this version has no extraction runner")

    @app.post("/v1/score/{model:path}")
    async def score(model: str, request: Request) -> Response:
        request.scope["shoal_model"] = model
        return native_reply(request, await engine.score_body(model, await read_body(request)))

    @app.post("/v1/rerank")
    async def rerank(request: Request) -> Response:
        """Cohere / Jina style: {model, query, documents, top_n?, return_documents?} -> {model, results}."""
        body = await read_body(request)
        model, score_body, top_n, return_documents = rerank_body(body)
        request.scope["shoal_model"] = model
        result = await engine.score_body(model, score_body)
        results = []
        for s in result["scores"][:top_n]:
            index = int(s["item_id"])
            entry: dict[str, Any] = {"index": index, "relevance_score": s["score"]}
            if return_documents:
                entry["document"] = {"text": score_body["items"][index]["text"]}
            results.append(entry)
        usage = result.get("usage", {})
        out = {"model": model, "results": results, "usage": {"total_tokens": usage.get("input_tokens", 0)}}
        return JSONResponse(out, headers=timing_headers(result.get("timing", {})))

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body = await read_body(request)
        model, wire_body, base64 = embeddings_body(body)
        request.scope["shoal_model"] = model
        result = await engine.encode_body(model, wire_body)
        return JSONResponse(embeddings_response(model, result, base64))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"models": await engine.models()}

    @app.get("/v1/models/{model:path}")
    async def model_detail(model: str) -> dict[str, Any]:
        return await engine.model(model)

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

"""Reading request bodies and writing replies: error bodies, timing headers, native results in msgpack or JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import PayloadTooLarge, ShoalError
from engine.metrics import timed
from engine.runtime import AsyncEngine
from engine.wire import decode_body, encode_response, response_type


def native_error(err: ShoalError) -> dict[str, Any]:
    """API.md's error body: {"detail": {code, message}}."""
    return {"detail": err.to_dict()}


@dataclass(frozen=True)
class RouteFamily:
    """A group of routes in one client's dialect: its router, and the error body its paths answer with."""

    router: APIRouter
    error_paths: tuple[str, ...] = ()  # paths whose errors use `error_body` instead of the native one
    error_body: Callable[[ShoalError], dict[str, Any]] = native_error


def error_response(err: ShoalError, body: dict[str, Any] | None = None) -> JSONResponse:
    """An error in its route family's body (native by default), with Retry-After on transient errors."""
    headers = {"Retry-After": str(max(1, round(err.retry_after)))} if err.retry_after is not None else None
    return JSONResponse(body or native_error(err), status_code=err.status, headers=headers)


def timing_headers(timing: dict[str, float]) -> dict[str, str]:
    names = {"queue_ms": "X-Queue-Time", "tokenization_ms": "X-Tokenization-Time"}
    names |= {"inference_ms": "X-Inference-Time", "total_ms": "X-Total-Time"}
    return {h: f"{timing[k]:.2f}" for k, h in names.items() if k in timing}


def native_reply(request: Request, result: dict[str, Any]) -> Response:
    """A native result in the media type the client asked for, with the timing headers."""
    media = response_type(request.headers.get("accept"), request.headers.get("content-type"))
    headers = timing_headers(result.get("timing", {}))
    with timed("serialise"):
        body = encode_response(result, media)
    return Response(body, media_type=media, headers=headers)


async def read_body(request: Request) -> Any:
    """The decoded body (msgpack or JSON by Content-Type); 413 past the engine's body limit."""
    limit = engine_of(request).settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes is over the limit of {limit}")
    raw = await request.body()
    if len(raw) > limit:
        raise PayloadTooLarge(f"body of {len(raw)} bytes is over the limit of {limit}")
    with timed("decode"):
        return decode_body(raw, request.headers.get("content-type"))


def engine_of(request: Request) -> AsyncEngine:
    """The engine the app was made for."""
    engine: AsyncEngine = request.app.state.engine
    return engine


def name_model(request: Request, model: str) -> None:
    """Label this request's metrics with its model (the middleware reads it)."""
    request.scope["shoal_model"] = model

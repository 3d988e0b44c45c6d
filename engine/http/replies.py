"""Reading request bodies and writing replies: error bodies, timing headers, native results in msgpack or JSON."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import PayloadTooLarge, ShoalError
from engine.metrics import timed
from engine.runtime import AsyncEngine
from engine.tasks.results import JSONObject, Reply, Timing
from engine.wire import JSON, MSGPACK, BodyLimits, Decoded, decode_body, encode_response, response_type

OFFLOAD_ITEMS = 32  # replies with more items than this are encoded off the event loop


def native_error(err: ShoalError) -> JSONObject:
    """API.md's error body: {"detail": {code, message}}."""
    return {"detail": {"code": err.code, "message": err.message}}


ErrorBody = Callable[[ShoalError], JSONObject]  # a route family's error body


@dataclass(frozen=True)
class RouteFamily:
    """A group of routes in one client's dialect: its router, and the error body its paths answer with."""

    router: APIRouter
    error_paths: tuple[str, ...] = ()  # paths whose errors use `error_body` instead of the native one
    error_body: ErrorBody = native_error


def error_response(err: ShoalError, body: JSONObject | None = None) -> JSONResponse:
    """An error in its route family's body (native by default), with Retry-After on transient errors; 408
    and 413 close the connection (the rest of that body is not worth reading)."""
    headers = {"Retry-After": str(max(1, round(err.retry_after)))} if err.retry_after is not None else {}
    if err.status in (408, 413):
        headers["Connection"] = "close"
    return JSONResponse(body or native_error(err), status_code=err.status, headers=headers)


def timing_headers(timing: Timing) -> dict[str, str]:
    """The X-*-Time headers of the times a result has."""
    times = {"X-Queue-Time": timing.get("queue_ms"), "X-Tokenization-Time": timing.get("tokenization_ms")}
    times |= {"X-Inference-Time": timing.get("inference_ms"), "X-Total-Time": timing.get("total_ms")}
    return {h: f"{ms:.2f}" for h, ms in times.items() if ms is not None}


async def native_reply(request: Request, result: Reply) -> Response:
    """A native result in the media type the client asked for, with the timing headers; a large one is
    encoded off the event loop."""
    media = response_type(request.headers.get("accept"), request.headers.get("content-type"))
    headers = timing_headers(result.get("timing", {}))
    if "precision" in result:
        headers["X-Precision"] = result["precision"]  # the precision of the model that served the request
    items = result.get("items")  # encode and extract results; a score result has none
    with timed("serialise"):
        if isinstance(items, list) and len(items) > OFFLOAD_ITEMS:
            data = await asyncio.to_thread(encode_response, result, media)
        else:
            data = encode_response(result, media)
    return Response(data, media_type=media, headers=headers)


async def read_body(request: Request, default_type: str = MSGPACK) -> Decoded:
    """The decoded body (msgpack or JSON by Content-Type; `default_type` when none is sent), nesting and
    list lengths bounded. The edge has bounded the body's size and time while it streamed in; a large body
    is decoded off the event loop, so health checks never wait behind it."""
    settings = engine_of(request).settings
    raw = await request.body()
    if len(raw) > settings.max_body_bytes:  # the edge stops it first; this holds without the edge too
        raise PayloadTooLarge(f"body of {len(raw):,} bytes is over the limit of {settings.max_body_bytes:,}")
    limits = BodyLimits(settings.max_body_depth, max(settings.max_body_list, settings.max_items))
    ctype = request.headers.get("content-type") or default_type
    with timed("decode"):
        if len(raw) > settings.offload_bytes:
            return await asyncio.to_thread(decode_body, raw, ctype, limits)
        return decode_body(raw, ctype, limits)


async def read_json_body(request: Request) -> Decoded:
    """The body of a JSON-only route (OpenAI, rerank, Cohere, TEI): JSON when no Content-Type is sent, as
    those APIs' own servers read it (msgpack only when the client says so)."""
    return await read_body(request, JSON)


def engine_of(request: Request) -> AsyncEngine:
    """The engine the app was made for."""
    engine: AsyncEngine = request.app.state.engine
    return engine


def name_model(request: Request, model: str) -> None:
    """Label this request's metrics with its model (the middleware reads it)."""
    request.scope["shoal_model"] = model

"""Native routes (the SIE-compatible wire contract): encode, score, extract, models; and Infinity's GET
/models and /health (at the root and under /infinity)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response

from engine.http.bodies import request_body
from engine.http.replies import RouteFamily, engine_of, name_model, native_reply, read_body
from engine.tasks.extract import ExtractRequest
from engine.tasks.requests import EncodeRequest, ScoreRequest

STARTED = int(time.time())  # OpenAI's `created` for every model: when this server started


def openai_model(info: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's model object for one native model description."""
    return {"id": info["name"], "object": "model", "owned_by": "shoal", "created": STARTED}


router = APIRouter()


@router.post("/v1/encode/{model:path}", openapi_extra=request_body(EncodeRequest))
async def encode(model: str, request: Request) -> Response:
    name_model(request, model)
    engine = engine_of(request)
    return await native_reply(request, await engine.run(model, engine.read_encode(model, await read_body(request))))


@router.post("/v1/extract/{model:path}", openapi_extra=request_body(ExtractRequest))
async def extract(model: str, request: Request) -> Response:
    """Entities (GLiNER) or classifications (NLI, embeddings) of each item; 404 unknown model, 400 one that
    cannot extract."""
    name_model(request, model)
    engine = engine_of(request)
    return await native_reply(request, await engine.run(model, engine.read_extract(model, await read_body(request))))


@router.post("/v1/score/{model:path}", openapi_extra=request_body(ScoreRequest))
async def score(model: str, request: Request) -> Response:
    name_model(request, model)
    engine = engine_of(request)
    return await native_reply(request, await engine.run(model, engine.read_score(model, await read_body(request))))


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    """The native list under `models` and OpenAI's list under `object`/`data`, so both clients read it."""
    native = await engine_of(request).models()
    return {"object": "list", "data": [openai_model(m) for m in native], "models": native}


@router.get("/models")
@router.get("/infinity/models")
async def infinity_models(request: Request) -> dict[str, Any]:
    """Infinity's model list (infinity_client reads `data[].id`; `capabilities` says what each model does)."""
    native = await engine_of(request).models()
    return {"object": "list", "data": [openai_model(m) | {"capabilities": capabilities(m)} for m in native]}


@router.get("/health")
@router.get("/infinity/health")
async def infinity_health() -> dict[str, float]:
    """Infinity's health answer: the server's clock."""
    return {"unix": time.time()}


def capabilities(info: dict[str, Any]) -> list[str]:
    """Infinity's capability names for a native model description."""
    names = {"encode": "embed", "score": "rerank", "extract": "classify"}
    return sorted({names[t] for t in info.get("tasks", []) if t in names})


@router.get("/v1/models/{model:path}")
async def model_detail(model: str, request: Request) -> dict[str, Any]:
    """One model: the native fields plus OpenAI's id/object/owned_by/created."""
    info = await engine_of(request).model(model)
    return {**info, **openai_model(info)}


FAMILY = RouteFamily(router)

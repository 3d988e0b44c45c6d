"""Native routes (the SIE-compatible wire contract): encode, score, extract, models."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from engine.catalogue.catalogue import check_task
from engine.errors import InvalidInput
from engine.http.replies import RouteFamily, engine_of, name_model, native_reply, read_body
from engine.tasks.limits import check_labels, count_before_parsing

router = APIRouter()


@router.post("/v1/encode/{model:path}")
async def encode(model: str, request: Request) -> Response:
    name_model(request, model)
    return await native_reply(request, await engine_of(request).encode_body(model, await read_body(request)))


@router.post("/v1/extract/{model:path}")
async def extract(model: str, request: Request) -> Response:
    """No extraction model family exists yet: unknown models are 404, the others say they cannot extract
    (after the request's limits, which hold for every extract request, are checked)."""
    name_model(request, model)
    body = await read_body(request)
    engine = engine_of(request)
    card = engine.card(model)
    count_before_parsing(body, "items", engine.settings.max_items)
    params = body.get("params") if isinstance(body, dict) else None
    labels = params.get("labels") if isinstance(params, dict) else None
    if labels is not None:
        if not isinstance(labels, list):
            raise InvalidInput("params.labels must be a list of strings")
        check_labels(labels, engine.settings)
    check_task(card, "extract")
    raise InvalidInput(f"model {model!r} declares 'extract', but this version has no extraction runner")


@router.post("/v1/score/{model:path}")
async def score(model: str, request: Request) -> Response:
    name_model(request, model)
    return await native_reply(request, await engine_of(request).score_body(model, await read_body(request)))


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    return {"models": await engine_of(request).models()}


@router.get("/v1/models/{model:path}")
async def model_detail(model: str, request: Request) -> dict[str, Any]:
    return await engine_of(request).model(model)


FAMILY = RouteFamily(router)

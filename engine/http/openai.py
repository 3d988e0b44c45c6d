"""OpenAI routes: POST /v1/embeddings (request -> typed encode request; native result -> OpenAI response)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import InvalidInput, ShoalError
from engine.http.bodies import EmbeddingsBody, request_body
from engine.http.replies import RouteFamily, engine_of, name_model, read_body
from engine.tasks.requests import EncodeOptions, EncodeRequest, EncodeRequestParams, Item

router = APIRouter()


def openai_error(err: ShoalError) -> dict[str, Any]:
    """OpenAI's error envelope."""
    return {"error": {"message": err.message, "type": err.code.lower(), "code": err.code}}


def embeddings_request(body: Any) -> tuple[str, EncodeRequest, bool]:
    """(model, encode request, base64?) from an OpenAI embeddings request."""
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object with 'model' and 'input'")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required")
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise InvalidInput("'input' must be a non-empty string or list of strings (token arrays are not supported)")
    fmt = body.get("encoding_format", "float") or "float"
    if fmt not in ("float", "base64"):
        raise InvalidInput("'encoding_format' must be 'float' or 'base64'")
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims < 1):
        raise InvalidInput("'dimensions' must be a positive integer")
    params = EncodeRequestParams(output_types=["dense"], output_dtype="float32", options=EncodeOptions(dimensions=dims))
    return model, EncodeRequest(items=[Item(text=t) for t in texts], params=params), fmt == "base64"


def embeddings_response(model: str, result: dict[str, Any], as_base64: bool) -> dict[str, Any]:
    data = []
    for i, item in enumerate(result["items"]):
        vec = np.asarray(item["dense"]["values"], dtype=np.float32)
        emb: Any = base64.b64encode(vec.astype("<f4").tobytes()).decode() if as_base64 else vec.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    tokens = int(result.get("usage", {}).get("input_tokens", 0))
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@router.post("/v1/embeddings", openapi_extra=request_body(EmbeddingsBody, msgpack=False))
async def embeddings(request: Request) -> Response:
    model, req, as_base64 = embeddings_request(await read_body(request))
    name_model(request, model)
    result = await engine_of(request).encode_request(model, req)
    return JSONResponse(embeddings_response(model, result, as_base64))


FAMILY = RouteFamily(router, ("/v1/embeddings",), openai_error)

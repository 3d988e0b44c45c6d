"""OpenAI routes: POST /v1/embeddings (request -> typed encode request; native result -> OpenAI response).

`input` may be text or token-id arrays (engine.tasks.token_input); token ids are decoded back to text as
`EngineSettings.token_ids` says, then encoded like any text. Up to `max_items` inputs (2,048) a request.
"""

from __future__ import annotations

import asyncio
import base64

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import InvalidInput, ShoalError
from engine.http.bodies import EmbeddingsBody, request_body
from engine.http.replies import RouteFamily, engine_of, name_model, read_json_body
from engine.runtime import AsyncEngine
from engine.tasks.annotate import check_limits
from engine.tasks.limits import check_count
from engine.tasks.requests import EncodeOptions, EncodeRequest, EncodeRequestParams, Item
from engine.tasks.results import EncodeReply, JSONObject, JSONValue
from engine.tasks.token_input import decode_cl100k, parse_input
from engine.wire import Decoded, DecodedMap, as_map

router = APIRouter()
BODY = request_body(EmbeddingsBody, msgpack=False)


def openai_error(err: ShoalError) -> JSONObject:
    """OpenAI's error envelope."""
    return {"error": {"message": err.message, "type": err.code.lower(), "code": err.code}}


def embeddings_request(body: DecodedMap, texts: list[str]) -> tuple[EncodeRequest, bool]:
    """(encode request, base64?) from an OpenAI embeddings request whose input reads as `texts`."""
    fmt = body.get("encoding_format", "float") or "float"
    if fmt not in ("float", "base64"):
        raise InvalidInput("'encoding_format' must be 'float' or 'base64'")
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims < 1):
        raise InvalidInput("'dimensions' must be a positive integer")
    params = EncodeRequestParams(output_types=["dense"], output_dtype="float32", options=EncodeOptions(dimensions=dims))
    return EncodeRequest(items=[Item(text=t) for t in texts], params=params), fmt == "base64"


def embeddings_body(raw: Decoded, infinity: bool) -> DecodedMap:
    """The embeddings body as a map; on Infinity's paths, `dimensions: 0` ("not set") is read as absent."""
    body = as_map(raw, "the body must be a JSON object with 'model' and 'input'")
    if infinity and type(body.get("dimensions")) is int and body["dimensions"] == 0:
        return {**body, "dimensions": None}
    return body


async def input_texts(engine: AsyncEngine, body: DecodedMap) -> tuple[str, list[str]]:
    """(model, texts) of an embeddings request; token-id arrays decoded as the settings say."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required")
    value = parse_input(body.get("input"))
    check_count("input", len(value), engine.settings.max_items, "SHOAL_MAX_ITEMS")  # before items are built
    if value and isinstance(value[0], str):
        return model, [t for t in value if isinstance(t, str)]
    arrays = [a for a in value if isinstance(a, list)]
    check_limits(engine.settings, len(arrays), [])  # 413 before decoding thousands of arrays
    if engine.settings.token_ids == "model":
        return model, await engine.detokenize(model, arrays)
    engine.card(model)  # an unknown model is a 404 before any decoding
    return model, await asyncio.to_thread(decode_cl100k, arrays)


def embeddings_response(model: str, result: EncodeReply, as_base64: bool) -> JSONObject:
    data: list[JSONValue] = []
    for i, item in enumerate(result["items"]):
        vec = np.asarray(item["dense"]["values"], dtype=np.float32)
        emb: JSONValue = base64.b64encode(vec.astype("<f4").tobytes()).decode() if as_base64 else vec.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    tokens = int(result.get("usage", {}).get("input_tokens", 0))
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@router.post("/v1/embeddings", openapi_extra=BODY)
@router.post(
    "/embeddings", openapi_extra=BODY
)  # the same route without /v1: Infinity's path (litellm's infinity/ posts here)
@router.post("/infinity/embeddings", openapi_extra=BODY)
async def embeddings(request: Request) -> Response:
    engine = engine_of(request)
    body = embeddings_body(await read_json_body(request), infinity=request.url.path != "/v1/embeddings")
    model, texts = await input_texts(engine, body)
    name_model(request, model)
    req, as_base64 = embeddings_request(body, texts)
    result = await engine.run(model, req)
    return JSONResponse(embeddings_response(model, result, as_base64))


FAMILY = RouteFamily(router, ("/v1/embeddings", "/embeddings", "/infinity/embeddings"), openai_error)

"""Cohere routes: POST /v2/embed, POST /v2/rerank and v1's POST /v1/embed in Cohere's request and response
shapes.

`embedding_types` (float, int8, uint8, binary, ubinary, base64) each come from the engine's own output
dtype: binary is Cohere's signed packing (the packed sign bits minus 128, as int8), ubinary the unsigned
one, base64 the float32 vector's little-endian bytes. `truncate` NONE refuses an over-long text
(INPUT_TOO_LONG), END truncates it; START is not supported. Errors answer `{"message", "code"}`.
"""

from __future__ import annotations

import asyncio
import base64
import uuid

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import InvalidInput, ShoalError
from engine.http.bodies import CohereEmbedBody, CohereRerankBody, request_body
from engine.http.replies import RouteFamily, engine_of, name_model, read_json_body, timing_headers
from engine.http.rerank import RERANK_BODY, model_query, positive_int, rerank, text_list
from engine.tasks.requests import EncodeOptions, EncodeRequest, EncodeRequestParams, Item
from engine.tasks.results import EncodeReply, JSONObject, JSONValue, Values
from engine.tasks.task import OutputDtype
from engine.wire import Decoded, DecodedMap, as_map

router = APIRouter()
# Cohere embedding type -> the engine dtype it is made from
ENGINE_DTYPE: dict[str, OutputDtype] = {"float": "float32", "base64": "float32", "int8": "int8", "uint8": "uint8"}
ENGINE_DTYPE |= {"binary": "ubinary", "ubinary": "ubinary"}
QUERY_TYPES = {"search_query": True, "search_document": False, "classification": False, "clustering": False}


def cohere_error(err: ShoalError) -> JSONObject:
    """Cohere's error body."""
    return {"message": err.message, "code": err.code}


def meta(**billed: int) -> JSONObject:
    return {"api_version": {"version": "2"}, "billed_units": dict(billed)}


def embed_texts(body: DecodedMap) -> list[str]:
    """`texts`, or the text parts of `inputs` ([{content: [{type: text, text}]}]), one text per input."""
    if "texts" in body:
        return text_list(body["texts"], "texts")
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidInput("give 'texts' (a list of strings) or 'inputs'; images are not supported")
    texts = []
    for i, entry in enumerate(inputs):
        content = entry.get("content") if isinstance(entry, dict) else None
        if not isinstance(content, list) or not content:
            raise InvalidInput(f"inputs.{i} must be an object with a non-empty 'content' list")
        parts = [c for c in content if isinstance(c, dict) and c.get("type") == "text"]
        strings = [p for p in (c.get("text") for c in parts) if isinstance(p, str)]
        if len(strings) != len(content):
            raise InvalidInput(f"inputs.{i}: only text content ({{type: text, text}}) is supported")
        texts.append("\n".join(strings))
    return texts


def embed_params(body: DecodedMap) -> tuple[list[str], EncodeOptions]:
    """(embedding types, encode options) of a v2 embed request."""
    given = body.get("embedding_types") or ["float"]
    types = [t for t in given if isinstance(t, str) and t in ENGINE_DTYPE] if isinstance(given, list) else []
    if not isinstance(given, list) or len(types) != len(given):
        raise InvalidInput(f"'embedding_types' must be a list of {sorted(ENGINE_DTYPE)}")
    input_type = body.get("input_type", "search_document")
    if not isinstance(input_type, str) or input_type not in QUERY_TYPES:
        raise InvalidInput(f"'input_type' must be one of {sorted(QUERY_TYPES)} (images are not supported)")
    truncate = body.get("truncate", "END")
    if truncate not in ("NONE", "END"):
        raise InvalidInput("'truncate' must be 'NONE' or 'END' (START is not supported)")
    dims = positive_int(body, "output_dimension")
    options = EncodeOptions(is_query=QUERY_TYPES[input_type], truncate=truncate == "END", dimensions=dims)
    return list(dict.fromkeys(types)), options


def as_type(values: Values, kind: str) -> JSONValue:
    """One vector in Cohere's form for an embedding type."""
    array = np.asarray(values)
    if kind == "base64":
        return base64.b64encode(array.astype("<f4").tobytes()).decode()
    numbers: list[JSONValue] = (
        (array.astype(np.int16) - 128).astype(np.int8).tolist() if kind == "binary" else array.tolist()
    )
    return numbers


@router.post("/v2/embed", openapi_extra=request_body(CohereEmbedBody, msgpack=False))
async def embed(request: Request) -> Response:
    return await embed_reply(request, await read_json_body(request), v1=False)


@router.post("/v1/embed", openapi_extra=request_body(CohereEmbedBody, msgpack=False))
async def embed_v1(request: Request) -> Response:
    """Cohere v1 (cohere.Client.embed, langchain-cohere): `model` may be left out (the server's default);
    without `embedding_types` the answer is v1's plain float list."""
    return await embed_reply(request, await read_json_body(request), v1=True)


async def embed_reply(request: Request, raw: Decoded, *, v1: bool) -> Response:
    """A Cohere embed answer: v2's (or v1's with `embedding_types`) embeddings by type, else v1's float list."""
    body = as_map(raw, "the body must be a JSON object with 'model', 'texts' and 'input_type'")
    engine = engine_of(request)
    model = body.get("model", engine.settings.default_model if v1 else None)
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required")
    name_model(request, model)
    texts = embed_texts(body)
    types, options = embed_params(body)
    dtypes = list(dict.fromkeys(ENGINE_DTYPE[t] for t in types))
    items = [Item(text=t) for t in texts]

    async def run(dtype: OutputDtype) -> EncodeReply:
        params = EncodeRequestParams(output_types=["dense"], output_dtype=dtype, options=options)
        return await engine.run(model, EncodeRequest(items=items, params=params))

    results = dict(zip(dtypes, await asyncio.gather(*map(run, dtypes)), strict=True))
    embeddings: JSONObject = {
        kind: [as_type(it["dense"]["values"], kind) for it in results[ENGINE_DTYPE[kind]]["items"]] for kind in types
    }
    first = results[dtypes[0]]
    tokens = int(first.get("usage", {}).get("input_tokens", 0))
    plain = v1 and not body.get("embedding_types")
    out: JSONObject = {
        "id": uuid.uuid4().hex,
        "embeddings": embeddings["float"] if plain else embeddings,
        "texts": [*texts],
        "meta": meta(input_tokens=tokens) | ({"api_version": {"version": "1"}} if v1 else {}),
        "response_type": "embeddings_floats" if plain else "embeddings_by_type",
    }
    return JSONResponse(out, headers=timing_headers(first.get("timing", {})))


@router.post("/v2/rerank", openapi_extra=request_body(CohereRerankBody, msgpack=False))
async def rerank_v2(request: Request) -> Response:
    """{model, query, documents, top_n?} -> {id, results: [{index, relevance_score}], meta}."""
    body = as_map(await read_json_body(request), RERANK_BODY)
    model, query = model_query(body)
    texts = text_list(body.get("documents"), "documents")
    top_n = positive_int(body, "top_n")
    positive_int(body, "max_tokens_per_doc")  # accepted; the model's own length limit applies
    ranking = await rerank(engine_of(request), request, model, query, texts)
    results: list[JSONValue] = []
    for index, score in ranking.order[:top_n]:
        entry: JSONObject = {"index": index, "relevance_score": score}
        if body.get("return_documents", False):
            entry["document"] = {"text": texts[index]}
        results.append(entry)
    out: JSONObject = {"id": uuid.uuid4().hex, "results": results, "meta": meta(search_units=1)}
    return JSONResponse(out, headers=timing_headers(ranking.timing))


FAMILY = RouteFamily(router, ("/v1/embed", "/v2/embed", "/v2/rerank"), cohere_error)

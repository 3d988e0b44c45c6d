"""Rerank in the Cohere/Jina shape: POST /v1/rerank and POST /rerank {model, query, documents, top_n?,
return_documents?}; the ranking itself (`rerank`) is shared with Cohere v2 and TEI's /rerank.

POST /rerank without /v1 is what litellm's hosted_vllm/ route calls (and infinity/ with a bare base URL).
A body with `texts` there is TEI's rerank (engine.http.tei); with `documents` it is this shape. Each
result's `document` is `{"text": ...}` (Cohere, Jina, vLLM). Infinity's client wants it as a plain string
and sends the same body as vLLM's, so the choice is made by route: POST /infinity/rerank (litellm's
infinity/ with `api_base=<server>/infinity`) answers plain strings, as does any request with
`"document_format": "string"`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import InvalidInput
from engine.http.bodies import RerankBody, request_body
from engine.http.openai import openai_error
from engine.http.replies import RouteFamily, engine_of, name_model, read_json_body, timing_headers
from engine.runtime import AsyncEngine
from engine.tasks.limits import count_before_parsing
from engine.tasks.requests import Item, ScoreOptions, ScoreRequest
from engine.tasks.results import JSONObject, JSONValue, Timing
from engine.wire import Decoded, DecodedMap, as_map

router = APIRouter()
BODY = request_body(RerankBody, msgpack=False)
RERANK_BODY = "the body must be a JSON object with 'query' and the documents"


@dataclass(frozen=True)
class Ranking:
    """Documents ranked against a query: (index, score) best first, and the native result's usage/timing."""

    order: list[tuple[int, float]]
    tokens: int
    timing: Timing


def positive_int(body: DecodedMap, key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"'{key}' must be a positive integer")
    return value


def text_list(value: Decoded, key: str) -> list[str]:
    """A non-empty list of strings or {text} objects, as strings."""
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"'{key}' must be a non-empty list of strings or {{text}} objects")
    texts = []
    for i, d in enumerate(value):
        text = d.get("text") if isinstance(d, dict) else d
        if not isinstance(text, str):
            raise InvalidInput(f"{key}.{i} must be a string or an object with 'text'")
        texts.append(text)
    return texts


def model_query(body: DecodedMap, default_model: str | None = None) -> tuple[str, str]:
    """(model, query) of a rerank body; the model may default (TEI names none)."""
    model, query = body.get("model", default_model), body.get("query")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required")
    if not isinstance(query, str):
        raise InvalidInput("'query' must be a string")
    return model, query


async def rerank(
    engine: AsyncEngine, request: Request, model: str, query: str, texts: list[str], truncate: bool | None = None
) -> Ranking:
    """Score every text against the query with the model's score task; best first."""
    name_model(request, model)
    items = [Item(id=str(i), text=t) for i, t in enumerate(texts)]
    req = ScoreRequest(query=Item(text=query), items=items, options=ScoreOptions(truncate=truncate))
    result = await engine.run(model, req)
    order = [(int(s["item_id"]), float(s["score"])) for s in result["scores"]]
    return Ranking(order, int(result.get("usage", {}).get("input_tokens", 0)), result.get("timing", {}))


def raw(score: float, engine: AsyncEngine, model: str) -> float:
    """The logit behind a sigmoid score (TEI's raw_scores); scores of cards without sigmoid are raw already."""
    spec = engine.card(model).score
    if spec is None or spec.activation != "sigmoid":
        return score
    p = min(max(score, 1e-12), 1 - 1e-7)
    return math.log(p) - math.log1p(-p)


async def documents_rerank(request: Request, body: DecodedMap) -> Response:
    """{model, query, documents, top_n?, return_documents?, raw_scores?} -> {model, results: [{index,
    relevance_score}]}; with raw_scores, the logits behind sigmoid scores (as Infinity and TEI give)."""
    model, query = model_query(body)
    count_before_parsing(body, "documents", engine_of(request).settings.max_items)
    texts = text_list(body.get("documents"), "documents")
    top_n = positive_int(body, "top_n")
    fmt = body.get("document_format", "string" if request.url.path.startswith("/infinity/") else "object")
    if fmt not in ("object", "string"):
        raise InvalidInput("'document_format' must be 'object' ({text}) or 'string'")
    plain = fmt == "string"
    raw_scores = body.get("raw_scores", False)
    if not isinstance(raw_scores, bool):
        raise InvalidInput("'raw_scores' must be true or false")
    engine = engine_of(request)
    ranking = await rerank(engine, request, model, query, texts)
    results: list[JSONValue] = []
    for index, score in ranking.order[:top_n]:
        entry: JSONObject = {"index": index, "relevance_score": raw(score, engine, model) if raw_scores else score}
        if body.get("return_documents", False):
            entry["document"] = texts[index] if plain else {"text": texts[index]}
        results.append(entry)
    usage: JSONObject = {"total_tokens": ranking.tokens, "prompt_tokens": ranking.tokens}
    out: JSONObject = {"model": model, "results": results, "usage": usage}
    return JSONResponse(out, headers=timing_headers(ranking.timing))


@router.post("/v1/rerank", openapi_extra=BODY)
@router.post("/infinity/rerank", openapi_extra=BODY)
async def rerank_v1(request: Request) -> Response:
    return await documents_rerank(request, as_map(await read_json_body(request), RERANK_BODY))


FAMILY = RouteFamily(router, ("/v1/rerank", "/infinity/rerank"), openai_error)

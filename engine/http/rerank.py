"""Cohere / Jina-style rerank: POST /v1/rerank {model, query, documents, top_n?, return_documents?}."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import InvalidInput
from engine.http.bodies import RerankBody, request_body
from engine.http.openai import openai_error
from engine.http.replies import RouteFamily, engine_of, name_model, read_body, timing_headers
from engine.tasks.requests import Item, ScoreRequest

router = APIRouter()


def rerank_request(body: Any) -> tuple[str, ScoreRequest, int | None, bool]:
    """(model, score request, top_n, return_documents) from a rerank request; items are ids '0', '1', ..."""
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object with 'model', 'query' and 'documents'")
    model, query, docs = body.get("model"), body.get("query"), body.get("documents")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required")
    if not isinstance(query, str):
        raise InvalidInput("'query' must be a string")
    if not isinstance(docs, list) or not docs:
        raise InvalidInput("'documents' must be a non-empty list of strings or {text} objects")
    texts = []
    for i, d in enumerate(docs):
        text = d.get("text") if isinstance(d, dict) else d
        if not isinstance(text, str):
            raise InvalidInput(f"documents.{i} must be a string or an object with 'text'")
        texts.append(text)
    top_n = body.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise InvalidInput("'top_n' must be a positive integer")
    req = ScoreRequest(query=Item(text=query), items=[Item(id=str(i), text=t) for i, t in enumerate(texts)])
    return model, req, top_n, bool(body.get("return_documents", False))


@router.post("/v1/rerank", openapi_extra=request_body(RerankBody, msgpack=False))
async def rerank(request: Request) -> Response:
    """{model, query, documents, top_n?, return_documents?} -> {model, results: [{index, relevance_score}]}."""
    model, req, top_n, return_documents = rerank_request(await read_body(request))
    name_model(request, model)
    result = await engine_of(request).score_request(model, req)
    results = []
    for s in result["scores"][:top_n]:
        index = int(s["item_id"])
        entry: dict[str, Any] = {"index": index, "relevance_score": s["score"]}
        if return_documents:
            entry["document"] = {"text": req.items[index].text}
        results.append(entry)
    usage = result.get("usage", {})
    out = {"model": model, "results": results, "usage": {"total_tokens": usage.get("input_tokens", 0)}}
    return JSONResponse(out, headers=timing_headers(result.get("timing", {})))


FAMILY = RouteFamily(router, ("/v1/rerank",), openai_error)

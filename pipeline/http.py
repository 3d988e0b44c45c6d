"""HTTP search over an ingested store: GET /v1/search (what can be searched), POST /v1/search (the hits).

`shoal serve --db URL` mounts this router on the engine's app (the engine itself never imports the pipeline);
the web console shows its Search page when GET /v1/search answers. Reads only: a missing store is listed as
empty, never created.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from connectors.base import StoreError
from connectors.filters import FilterError
from engine.client.protocol import ShoalClient
from pipeline.config import ConfigError, validation_summary
from pipeline.remote import store_location


class SearchBody(BaseModel):
    """A search request: the query, and optionally the collection, mode, number of hits and a portable filter."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=10_000, description="what to look for")
    collection: str | None = Field(None, description="collection to search; default: the server's")
    top_k: int = Field(5, ge=1, le=100, description="how many hits")
    mode: Literal["hybrid", "dense", "text", "sparse", "multivector"] = "hybrid"
    where: list[str] | None = Field(None, description="portable filters FIELD=VALUE, all must hold")
    location: str | None = Field(
        None, max_length=4096, description="the store the caller means (`store_location`); another: 409 STORE_MISMATCH"
    )


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"detail": {"code": code, "message": message}}, status_code=status)


def _plain(value: Any) -> Any:
    value = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        return [v for v in value if isinstance(v, (str, int, float, bool))]
    return None


def search_router(client: ShoalClient, db: str, collection: str | None = None) -> APIRouter:
    """The search routes over one store URL, running queries through `client` (the serving engine)."""
    from connectors.registry import url_collection
    from pipeline.search import SearcherCache

    default = collection or url_collection(db) or "chunks"
    searchers = SearcherCache()  # the store and its config opened once, not per request
    router = APIRouter(on_shutdown=[searchers.aclose])

    @router.get("/v1/search")
    async def describe() -> dict[str, Any]:
        """{db, collection, collections, location}: the store, the collections it holds (none when it does not
        exist) and where it is (an embedded store's absolute folder), so `shoal search --url` knows it."""
        import asyncio

        from pipeline.manage import collections

        try:
            names = [c.name for c in await asyncio.to_thread(collections, db)]
        except (ConfigError, StoreError):
            names = []
        return {"db": db, "collection": default, "collections": names, "location": store_location(db)}

    @router.post(
        "/v1/search",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": SearchBody.model_json_schema()}},
            }
        },
    )
    async def search(request: Request) -> JSONResponse:
        """{query, collection?, top_k?, mode?, where?} -> {db, collection, hits: [{id, score, text, source, ...}]}."""
        try:
            body = SearchBody.model_validate_json(await request.body())
        except ValidationError as e:
            return _error(400, "INVALID_INPUT", validation_summary(e, SearchBody))
        coll = body.collection or default
        if body.location is not None and body.location != store_location(db):
            message = "this server searches another store than the request's 'location'; search that one where it is"
            return _error(409, "STORE_MISMATCH", message)
        try:
            hits = await searchers.search(
                body.query, db=db, collection=coll, top_k=body.top_k, where=body.where, mode=body.mode, client=client
            )
        except (ConfigError, FilterError) as e:
            code = getattr(e, "code", "INVALID_INPUT")
            if code == "NO_STORE":  # the server's own folder: not named (GET /v1/search says where it is)
                return _error(404, code, "nothing has been ingested into this server's store yet (its --db)")
            return _error(404 if code == "NO_COLLECTION" else 400, code, str(e))
        except StoreError as e:
            return _error(503 if e.code == "STORE_UNREACHABLE" else 400, e.code, e.message)
        out = []
        for h in hits:
            meta = {k: _plain(v) for k, v in h.metadata.items()}
            out.append(
                {
                    "id": h.id,
                    "score": float(h.score),
                    "text": h.text,
                    **{k: v for k, v in meta.items() if v is not None},
                }
            )
        return JSONResponse({"db": db, "collection": coll, "hits": out})

    return router

"""Search a collection in any store: embed the query as it was ingested, retrieve (hybrid where the store
can), filter by the portable `where` and/or the store's native filter, optionally rerank with a cross-encoder."""

from __future__ import annotations

import asyncio
from typing import Literal, TypedDict, Unpack

import numpy as np

from connectors.base import Hit, SearchMode, SearchRequest, StoreError, VectorStore
from connectors.chunks import F32
from connectors.filters import Filter, FilterError, check_fields, parse
from connectors.registry import url_collection
from engine.client.calls import Item
from engine.client.protocol import ShoalClient
from engine.tasks.results import JSONValue
from pipeline.config import DEFAULT_DB, ConfigError, PipelineConfig
from pipeline.enrich import Enricher
from pipeline.run import open_client
from pipeline.stores import open_existing, read_manifest

MODES = ("hybrid", "dense", "text", "sparse", "multivector")


def collection_config(store: VectorStore, collection: str, state: str | None = None) -> PipelineConfig:
    """The config a collection was last ingested with (its models, steps and entity labels); reads only."""
    manifest = read_manifest(store, state)
    try:
        saved = manifest.collection_config(collection) if manifest is not None else None
    finally:
        if manifest is not None:
            manifest.close()
    if saved is None:
        raise ConfigError(
            f"no collection {collection!r} has been ingested into {store.uri}; run `shoal ingest PATH` first",
            code="NO_COLLECTION",
        )
    return PipelineConfig.model_validate({**saved, "db": store.uri, "collection": collection})


def check_where(cfg: PipelineConfig, where: object) -> Filter | None:
    """The portable filter, its fields checked against what the collection holds (fails fast when unknown)."""
    flt = parse(where)
    entities = cfg.step("entities")
    check_fields(flt, entities.labels if entities else None, classes=cfg.step("classify") is not None)
    return flt


async def search_async(
    query: str,
    *,
    db: str = DEFAULT_DB,
    collection: str | None = None,
    top_k: int = 10,
    where: object = None,
    filter: object = None,
    mode: SearchMode = "hybrid",
    rerank: str | None = None,
    client: ShoalClient | None = None,
    state: str | None = None,
) -> list[Hit]:
    """Top hits for a query.

    `where` is the portable filter ("source=a.pdf", a list of such strings, a JSON-style dict or a Filter);
    `filter` is the store's native one (SQL for LanceDB, a Qdrant Filter or dict, a Chroma `where` dict).
    `rerank` names a cross-encoder that reorders a wider candidate set through the engine.
    """
    if mode not in MODES:
        raise ConfigError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"top_k must be a whole number of at least 1, not {top_k!r}", code="INVALID_TOP_K")
    coll = collection or url_collection(db) or "chunks"
    store = open_existing(db)  # searching never creates a store or a manifest
    try:
        cfg = collection_config(store, coll, state)
        flt = check_where(cfg, where)
        if client is not None:
            return await _search(store, cfg, coll, client, query, flt, filter, mode, top_k, rerank)
        owned = open_client(cfg)
        try:
            return await _search(store, cfg, coll, owned, query, flt, filter, mode, top_k, rerank)
        finally:
            await owned.close()
    finally:
        store.close()


async def _search(
    store: VectorStore, cfg: PipelineConfig, coll: str, client: ShoalClient, query: str, flt: Filter | None, native: object,
    mode: SearchMode, top_k: int, rerank: str | None,
) -> list[Hit]:  # fmt: skip
    caps = store.capabilities
    enricher = Enricher(client, cfg)
    if rerank:
        await check_reranker(enricher, rerank)
    if mode == "text" and not caps.text:
        raise StoreError(f"{store.uri} has no keyword search; use --mode dense", code="UNSUPPORTED")
    if mode == "hybrid" and not caps.hybrid:
        mode = "dense"
    req = SearchRequest(text=query, where=flt, native=native, mode=mode, top_k=max(top_k * 3, 30) if rerank else top_k)
    if mode in ("hybrid", "dense"):
        req.vector = await _encode(enricher, cfg.dense.model, query, "dense", cfg.dense.options)
    sparse, colbert = cfg.step("sparse"), cfg.step("multivector")
    if mode == "sparse" and not (sparse and caps.sparse_search):
        raise ConfigError(
            f"sparse search needs a collection with a sparse step in a store that searches it ({store.uri})"
        )
    if sparse and caps.sparse_search and mode in ("hybrid", "sparse"):
        r = await enricher.client.encode(sparse.model, query, output_types=["sparse"], is_query=True, options=sparse.options or None)  # fmt: skip
        req.sparse = {"indices": r["sparse"]["indices"], "values": r["sparse"]["values"]}  # the SDK's arrays
    if mode == "multivector" and not (colbert and caps.multivector):
        raise ConfigError(f"multivector search needs a collection with a multivector step ({store.uri})")
    if colbert and caps.multivector and mode in ("hybrid", "multivector"):
        req.multivector = await _encode(enricher, colbert.model, query, "multivector", colbert.options)
    try:
        hits = await asyncio.to_thread(store.search, coll, req)
    except FilterError as e:
        raise StoreError(e.message, code=e.code) from None
    if rerank and hits:
        hits = await rerank_hits(enricher, rerank, query, hits)
    return hits[:top_k]


async def _encode(
    enricher: Enricher, model: str, query: str, output: Literal["dense", "multivector"], options: dict[str, JSONValue]
) -> F32:
    r = await enricher.client.encode(model, query, output_types=[output], is_query=True, options=options or None)
    return np.asarray(r["dense"] if output == "dense" else r["multivector"], dtype=np.float32)


async def check_reranker(enricher: Enricher, model: str) -> None:
    listed = {m["name"]: m for m in await enricher.client.models()}
    info = listed.get(model)  # a local checkpoint folder is not listed: the score call itself checks it
    if info is not None and "score" not in info.get("tasks", []):
        raise ConfigError(f"model {model!r} cannot rerank: it supports {info.get('tasks')}, not 'score'")


async def rerank_hits(enricher: Enricher, model: str, query: str, hits: list[Hit]) -> list[Hit]:
    """Reorder hits by a cross-encoder's scores (the SIE `score` task)."""
    items: list[Item] = [{"id": h.id, "text": h.text} for h in hits]
    result = await enricher.client.score(model, query, items)
    by_id = {str(s["item_id"]): float(s["score"]) for s in result["scores"]}  # each item keeps its hit's id
    for h in hits:
        h.metadata["retrieval_score"] = h.score
        h.score = by_id.get(h.id, float("-inf"))
    return sorted(hits, key=lambda h: -h.score)


class SearchOptions(TypedDict, total=False):
    """The keyword arguments of `search_async` (and `search`)."""

    db: str
    collection: str | None
    top_k: int
    where: object
    filter: object
    mode: SearchMode
    rerank: str | None
    client: ShoalClient | None
    state: str | None


def search(query: str, **kwargs: Unpack[SearchOptions]) -> list[Hit]:
    """Blocking `search_async`."""
    return asyncio.run(search_async(query, **kwargs))

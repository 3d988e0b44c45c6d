"""Search a collection: embed the query with the model it was ingested with, hybrid (RRF) by default."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from connectors.base import Hit, SearchMode, SearchRequest, open_store
from pipeline.config import DEFAULT_DB, ConfigError, PipelineConfig
from pipeline.enrich import Enricher
from pipeline.run import manifest_for, open_client


def collection_config(db: str, collection: str) -> PipelineConfig:
    """The config a collection was last ingested with (its dense model and options)."""
    store = open_store(db)
    manifest = manifest_for(store, PipelineConfig(db=db))
    try:
        saved = manifest.collection_config(collection)
    finally:
        manifest.close()
    if saved is None:
        raise ConfigError(f"no collection {collection!r} has been ingested into {db}; run `shoal ingest PATH` first")
    return PipelineConfig.model_validate({**saved, "db": db})


async def search_async(
    query: str,
    *,
    db: str = DEFAULT_DB,
    collection: str = "chunks",
    top_k: int = 10,
    where: str | None = None,
    mode: SearchMode = "hybrid",
    rerank: str | None = None,
    client: Any = None,
) -> list[Hit]:
    """Top hits for a query; `rerank` names a cross-encoder that reorders a wider candidate set."""
    cfg = collection_config(db, collection)
    store = open_store(db)
    owned = client is None
    client = client if client is not None else open_client(cfg)
    enricher = Enricher(client, cfg)
    try:
        if rerank:
            await check_reranker(enricher, rerank)
        want = max(top_k * 3, 30) if rerank else top_k
        vector = None
        if mode != "text":
            step = cfg.dense
            r = await enricher.call("encode", step.model, query, is_query=True, options=step.options or None)
            vector = np.asarray(r["dense"], dtype=np.float32)
        if mode == "hybrid" and not store.supports_hybrid:
            mode = "dense"
        req = SearchRequest(vector=vector, text=query, where=where, mode=mode, top_k=want)
        hits = await asyncio.to_thread(store.search, collection, req)
        if rerank and hits:
            hits = await rerank_hits(enricher, rerank, query, hits)
        return hits[:top_k]
    finally:
        if owned:
            await client.close()


async def check_reranker(enricher: Enricher, model: str) -> None:
    listed = {m["name"]: m for m in await enricher.call("models")}
    info = listed.get(model)  # a local checkpoint folder is not listed: the score call itself checks it
    if info is not None and "score" not in info.get("tasks", []):
        raise ConfigError(f"model {model!r} cannot rerank: it supports {info.get('tasks')}, not 'score'")
    if getattr(enricher.client, "score", None) is None:
        raise ConfigError("this shoal client has no 'score' API yet, so --rerank is not available")


async def rerank_hits(enricher: Enricher, model: str, query: str, hits: list[Hit]) -> list[Hit]:
    """Reorder hits by a cross-encoder's scores (the SIE `score` task)."""
    items = [{"id": h.id, "text": h.text} for h in hits]
    result = await enricher.call("score", model, query, items)
    scores = result.get("scores", result) if isinstance(result, dict) else result
    by_id: dict[str, float] = {}
    for i, s in enumerate(scores):
        if isinstance(s, dict):
            key = s.get("item_id") or s.get("id") or hits[int(s.get("index", i))].id
            by_id[str(key)] = float(s["score"])
        else:
            by_id[hits[i].id] = float(s)
    for h in hits:
        h.metadata["retrieval_score"] = h.score
        h.score = by_id.get(h.id, float("-inf"))
    return sorted(hits, key=lambda h: -h.score)


def search(query: str, **kwargs: Any) -> list[Hit]:
    """Blocking `search_async`."""
    return asyncio.run(search_async(query, **kwargs))

"""Search a collection in any store: embed the query as it was ingested, retrieve (hybrid where the store
can), filter by the portable `where` and/or the store's native filter, optionally rerank with a cross-encoder."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack

import numpy as np

from connectors.base import Hit, SearchMode, SearchRequest, StoreError, VectorStore
from connectors.chunks import F32
from connectors.filters import Filter, FilterError, check_fields, parse
from connectors.registry import parse_url, url_collection
from engine.client.calls import Item, ModelCalls
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


def check_request(mode: str, top_k: object) -> None:
    """A search's mode and top_k, checked before anything is opened."""
    if mode not in MODES:
        raise ConfigError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"top_k must be a whole number of at least 1, not {top_k!r}", code="INVALID_TOP_K")


class Searcher:
    """One collection opened for many searches: the store, the config it was ingested with and the client are
    opened once, so a search costs the query's encode and the store's own queries.

    `client` is any shoal client (kept open by its owner); without one, an in-process engine is started on the
    first search and closed by `aclose()`. Use `async with Searcher(db) as s: await s.search(q)`.
    """

    def __init__(
        self, db: str = DEFAULT_DB, collection: str | None = None, *, client: ShoalClient | None = None,
        state: str | None = None,
    ) -> None:  # fmt: skip
        self.db = db
        self.collection = collection or url_collection(db) or "chunks"
        self.store = open_existing(db)  # searching never creates a store or a manifest
        try:
            self.config = collection_config(self.store, self.collection, state)
        except BaseException:
            self.store.close()
            raise
        self._client = client
        self._owned: ModelCalls | None = None

    async def search(
        self, query: str, *, top_k: int = 10, where: object = None, filter: object = None,
        mode: SearchMode = "hybrid", rerank: str | None = None,
    ) -> list[Hit]:  # fmt: skip
        """Top hits for a query (the arguments of `search_async`)."""
        check_request(mode, top_k)
        flt = check_where(self.config, where)
        client: ShoalClient | None = self._client
        if client is None:
            client = self._owned = self._owned or open_client(self.config)
        return await _search(self.store, self.config, self.collection, client, query, flt, filter, mode, top_k, rerank)

    async def aclose(self) -> None:
        """Close the store (and the engine started here, if any)."""
        owned, self._owned = self._owned, None
        try:
            if owned is not None:
                await owned.close()
        finally:
            self.store.close()

    async def __aenter__(self) -> Searcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class SearcherCache:
    """Open Searchers shared by a long-lived process (the HTTP search route, the agent search tool), one per
    (store, collection, client), each reopened once it is `max_age_s` old so another process's ingest shows up.
    Qdrant Edge folders are never kept: a folder is locked by the process holding it, and `shoal ingest` must
    be able to open it between searches."""

    def __init__(self, max_age_s: float = 5.0) -> None:
        self.max_age_s = max_age_s
        self._open: dict[tuple[str, str | None, int], _Kept] = {}
        self._mu = threading.Lock()

    async def search(
        self, query: str, *, db: str, collection: str | None, client: ShoalClient, top_k: int = 10,
        where: object = None, filter: object = None, mode: SearchMode = "hybrid", rerank: str | None = None,
    ) -> list[Hit]:  # fmt: skip
        """`search_async` through a kept Searcher (a fresh one per call for a Qdrant Edge folder)."""
        check_request(mode, top_k)
        if parse_url(db).scheme == "qdrant+edge":
            return await search_async(query, db=db, collection=collection, top_k=top_k, where=where, filter=filter, mode=mode, rerank=rerank, client=client)  # fmt: skip
        key = (db, collection, id(client))
        now = time.monotonic()
        with self._mu:  # a thread lock, held for dict operations only: callers may run on different loops
            expired = [k for k, v in self._open.items() if now - v.born > self.max_age_s]
            stale = [self._open.pop(k) for k in expired]  # all of them: a client gone away leaves nothing open
            for old in stale:
                old.retired = True
            kept = self._open.get(key)
            if kept is not None:
                kept.busy += 1
        for old in stale:
            await self._close_idle(old)
        if kept is None:
            fresh = await asyncio.to_thread(Searcher, db, collection, client=client)
            with self._mu:
                kept = self._open.setdefault(key, _Kept(now, fresh))
                kept.busy += 1
            if kept.searcher is not fresh:  # another call opened it meanwhile
                await fresh.aclose()
        try:
            return await kept.searcher.search(query, top_k=top_k, where=where, filter=filter, mode=mode, rerank=rerank)  # fmt: skip
        finally:
            with self._mu:
                kept.busy -= 1
            await self._close_idle(kept)  # retired while this search ran: closed by its last user

    async def _close_idle(self, kept: _Kept) -> None:
        with self._mu:
            close = kept.retired and not kept.busy and not kept.closed
            kept.closed = kept.closed or close
        if close:
            await kept.searcher.aclose()

    async def aclose(self) -> None:
        with self._mu:
            held, self._open = self._open, {}
            for kept in held.values():
                kept.retired = True
        for kept in held.values():
            await self._close_idle(kept)


@dataclass
class _Kept:
    born: float
    searcher: Searcher
    busy: int = 0
    retired: bool = False
    closed: bool = False


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
    """Top hits for a query, the collection opened for this one search (`Searcher` keeps it open for many).

    `where` is the portable filter ("source=a.pdf", a list of such strings, a JSON-style dict or a Filter);
    `filter` is the store's native one (SQL for LanceDB, a Qdrant Filter or dict, a Chroma `where` dict).
    `rerank` names a cross-encoder that reorders a wider candidate set through the engine.
    """
    check_request(mode, top_k)
    async with Searcher(db, collection, client=client, state=state) as searcher:
        return await searcher.search(query, top_k=top_k, where=where, filter=filter, mode=mode, rerank=rerank)


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

"""Tool: search an ingested collection through the pipeline (any connector behind a `db=` URL)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field

from agent_tools.config import ToolSettings
from agent_tools.errors import CollectionNotFound, Forbidden, InvalidInput, ShoalError, check_text
from agent_tools.registry import ToolContext, tool

if TYPE_CHECKING:
    from agent_tools.results import SearchResult
    from engine.tasks.results import JSONObject, JSONScalar, JSONValue
    from pipeline.search import SearcherCache


class SearchInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="what to look for")
    collection: str | None = Field(None, min_length=1, description="collection to search; default: the server's")
    db: str | None = Field(
        None, min_length=1, description="store URL, e.g. lancedb://./shoal-data; default: the server's"
    )
    top_k: int = Field(5, ge=1, le=100, description="how many hits to return")
    mode: Literal["hybrid", "dense", "text"] = Field(
        "hybrid", description="hybrid (full text + vectors), dense or text"
    )
    filter: str | None = Field(None, description="a filter in the store's own syntax, e.g. source = 'a.pdf'")
    rerank_model: str | None = Field(None, description="cross-encoder that reorders a wider candidate set")


class StoreFailure(ShoalError):
    code, status = "STORE_ERROR", 400


_KEPT: list[SearcherCache] = []


def _searchers() -> SearcherCache:
    """The searchers this process keeps open between tool calls (pipeline.search.SearcherCache)."""
    if not _KEPT:
        from pipeline.search import SearcherCache

        _KEPT.append(SearcherCache())
    return _KEPT[0]


@tool("search", SearchInput)
async def search(ctx: ToolContext, args: SearchInput) -> SearchResult:
    """Search a collection of ingested documents (ingested with `shoal ingest`) and return the best chunks with
    their source, pages, heading path and score."""
    from connectors.base import StoreError
    from pipeline.config import ConfigError

    s = ctx.settings
    check_text("query", args.query, s.max_text_chars)
    db, collection = args.db or s.db, args.collection or s.collection
    check_store(s, db, collection)
    try:
        hits = await _searchers().search(
            args.query,
            db=db,
            collection=collection,
            top_k=args.top_k,
            where=args.filter,
            mode=args.mode,
            rerank=args.rerank_model,
            client=ctx.client,
        )
    except ConfigError as e:
        if getattr(e, "code", "") == "NO_STORE" and not s.open_stores:  # a server names no folder of its own
            where = repr(args.db) if args.db else "this server's store"
            raise CollectionNotFound(f"nothing has been ingested into {where} yet") from None
        if str(e).startswith("no collection") or getattr(e, "code", "") in ("NO_STORE", "NO_COLLECTION"):
            raise CollectionNotFound(str(e)) from None
        raise InvalidInput(str(e)) from None
    except StoreError as e:
        if e.code in ("NO_COLLECTION", "COLLECTION_NOT_FOUND"):
            raise CollectionNotFound(e.message) from None
        err = StoreFailure(f"{e.code}: {e.message}")
        raise err from None
    results: list[JSONObject] = [
        {"id": h.id, "score": round(float(h.score), 6), "text": h.text, **jsonable(h.metadata)} for h in hits
    ]
    shown = db if s.open_stores or args.db else "default"  # a server does not show its own store URL
    return {"db": shown, "collection": collection, "results": results}


def check_store(s: ToolSettings, db: str, collection: str) -> None:
    """On a server (open_stores off), only the configured stores and collections may be searched: a caller
    may not make the server open any store it can reach (403 FORBIDDEN, naming nothing of the server's)."""
    if s.open_stores:
        return
    if db not in (s.db, *s.search_dbs):
        raise Forbidden(f"this server's search tool does not open the store {db!r}; omit 'db' to use its own")
    if collection not in (s.collection, *s.search_collections):
        raise Forbidden(f"this server's search tool does not search the collection {collection!r}")


def jsonable(metadata: Mapping[str, object]) -> JSONObject:
    """Metadata a tool result can carry: plain values and small lists; vectors and other blobs are left out."""
    out: JSONObject = {}
    for key, stored in metadata.items():
        value = stored.tolist() if hasattr(stored, "tolist") else stored  # numpy scalars and arrays
        if _scalar(value):
            out[key] = value
        elif isinstance(value, (list, tuple)) and len(value) <= 64 and all(_plain(v) for v in value):
            out[key] = [_listed(v) for v in value if _plain(v)]
        elif isinstance(value, dict) and len(value) <= 64 and all(_plain(v) for v in value.values()):
            out[key] = {str(k): _listed(v) for k, v in value.items() if _plain(v)}
    return out


def _scalar(value: object) -> TypeGuard[JSONScalar]:
    return isinstance(value, (str, int, float, bool)) or value is None


def _plain(value: object) -> TypeGuard[JSONScalar | list[JSONScalar] | tuple[JSONScalar, ...]]:
    if isinstance(value, (list, tuple)):
        return len(value) <= 64 and all(_scalar(v) for v in value)
    return _scalar(value)


def _listed(value: JSONScalar | list[JSONScalar] | tuple[JSONScalar, ...]) -> JSONValue:
    """A plain value as JSON: a tuple becomes the list it is serialised as."""
    if isinstance(value, (list, tuple)):
        items: list[JSONValue] = list(value)
        return items
    return value

"""Agent-tool settings, typed and read in one place (arguments, then SHOAL_TOOLS_* environment variables)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_EMBED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class ToolSettings(BaseSettings):
    """Every knob of the agent tools; `SHOAL_TOOLS_<NAME>` overrides a default."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_TOOLS_", extra="ignore")

    embed_model: str = Field(default=DEFAULT_EMBED_MODEL, description="embedding model of taxonomy, filter, embed")
    rerank_model: str | None = Field(
        default=None, description="cross-encoder for filter_context and rerank; None: embedding similarity"
    )
    extract_model: str = Field(
        default="urchade/gliner_small-v2.1", description="GLiNER model of extract_entities when the call names none"
    )
    db: str = Field(default="lancedb://./shoal-data", description="store URI the search tool uses by default")
    collection: str = Field(default="chunks", description="collection the search tool uses by default")
    open_stores: bool = Field(
        default=True,
        description="the search tool opens any store URL and collection a caller names (off on `shoal serve`: "
        "only `db`, `collection` and the two lists below)",
    )
    search_dbs: list[str] = Field(default_factory=list, description="more store URLs the search tool may open")
    search_collections: list[str] = Field(default_factory=list, description="more collections the search tool may open")
    taxonomies: dict[str, Path] = Field(
        default_factory=dict, description="named taxonomy files classify_taxonomy can use (name -> YAML/JSON file)"
    )
    taxonomy_cache_size: int = Field(default=8, ge=1, description="taxonomy node-embedding indexes kept (LRU)")
    taxonomy_cache_bytes: int = Field(
        default=1 << 30, ge=1 << 20, description="most bytes of cached taxonomy embeddings (LRU beyond it)"
    )
    max_labelled_texts: int = Field(default=20_000, ge=1, description="most labelled texts `shoal taxonomy fit` reads")
    max_taxonomy_nodes: int = Field(default=200_000, ge=2, description="largest taxonomy accepted")
    max_text_chars: int = Field(default=200_000, ge=1, description="longest text one tool argument may carry")
    max_texts: int = Field(default=2_048, ge=1, description="most texts or passages in one call")
    max_body_bytes: int = Field(default=32 * 1024 * 1024, description="largest POST /v1/tools/{name} body")
    batch_size: int = Field(default=256, ge=1, description="items per encode or score request sent to the engine")
    engine_url: str | None = Field(default=None, description="a shoal server for `shoal mcp`; None runs in-process")
    api_key: str | None = Field(default=None, description="API key for engine_url")


class ToolOverrides(TypedDict, total=False):
    """The settings a command line gives (`shoal mcp`, `shoal serve`); one left out keeps its SHOAL_TOOLS_*
    value or its default."""

    engine_url: str
    embed_model: str
    rerank_model: str
    db: str
    collection: str
    taxonomies: dict[str, Path]
    open_stores: bool
    search_dbs: list[str]
    search_collections: list[str]

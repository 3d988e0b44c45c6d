"""The vector-store protocol every connector implements: ensure_collection, upsert, delete, search."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

SearchMode = Literal["hybrid", "dense", "text", "multivector"]


class StoreError(Exception):
    """A store-side failure a user can cause (bad URI, schema clash, unsupported search); carries a code."""

    code = "STORE_ERROR"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


@dataclass
class CollectionSpec:
    """What a collection holds: the dense dimension and which optional columns exist."""

    name: str
    dense_dim: int
    multivector_dim: int | None = None
    sparse: bool = False
    entities: bool = False
    classes: bool = False


@dataclass
class SearchRequest:
    """One search: vectors and/or text, a filter (the store's own `where` syntax), a mode and a limit."""

    vector: np.ndarray | None = None
    text: str | None = None
    multivector: np.ndarray | None = None
    sparse: dict[str, Any] | None = None
    where: str | None = None
    mode: SearchMode = "hybrid"
    top_k: int = 10


@dataclass
class Hit:
    """One retrieved chunk: its id, score, text and every stored metadata field."""

    id: str
    score: float
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class VectorStore(Protocol):
    """The small protocol the pipeline writes through; one implementation per database."""

    uri: str
    supports_hybrid: bool

    def state_dir(self) -> Path | None:
        """A local folder for the pipeline's own state (the manifest), or None for remote stores."""

    def ensure_collection(self, spec: CollectionSpec) -> None:
        """Create the collection if missing; raise StoreError when it exists with another shape."""

    def upsert(self, collection: str, rows: list[dict[str, Any]]) -> int:
        """Insert or replace rows by `id`; returns how many rows were written."""

    def delete(self, collection: str, ids: list[str]) -> int:
        """Remove rows by id; returns how many were removed."""

    def ids_where(self, collection: str, where: str) -> set[str]:
        """Every id matching a filter (used to sweep orphans after a crash)."""

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        """Dense, text, multivector or hybrid (reciprocal-rank fused) search with an optional filter."""

    def count(self, collection: str, where: str | None = None) -> int:
        """How many rows (matching an optional filter) the collection holds."""

    def finalize(self, collection: str, changed: bool = True) -> None:
        """After a run: build or refresh indexes once the table is large enough, compact small writes.

        With `changed` False it only creates indexes that are missing (an unchanged store is not rewritten).
        """


def quote(value: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def open_store(uri: str) -> VectorStore:
    """A connector for a store URI: `lancedb://PATH` (or a bare path) is the embedded LanceDB."""
    if uri.startswith("lancedb://") or "://" not in uri:
        from connectors.lancedb import LanceDBStore

        return LanceDBStore(uri)
    scheme = uri.split("://", 1)[0]
    raise StoreError(f"no connector for {scheme!r} stores yet (known: lancedb://PATH)", code="UNKNOWN_STORE")

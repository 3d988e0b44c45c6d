"""The vector-store protocol every connector implements, and the plain data it speaks; imports no store."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, TypedDict, runtime_checkable

from connectors.chunks import F32, ChunkBatch, ChunkRow, SparseInput
from connectors.filters import And, Cond, Filter

SearchMode = Literal["hybrid", "dense", "text", "sparse", "multivector"]
STATE_PREFIX = "shoal_state"  # side collection/table holding the ingest manifest in server stores
# the payload fields a store with payload indexes (Qdrant, a server or Edge) indexes: by keyword, and as integers
KEYWORD_INDEXES = ("id", "source", "root", "kind", "entity_tags", "classes", "heading_path")
INTEGER_INDEXES = ("chunk_index", "pages")
ID_NAMESPACE = uuid.UUID("0b6c2a57-3f7e-4d4f-9a0e-6d1f0c9b7e21")
_NAMESPACE = ID_NAMESPACE.bytes
JSONScalar = str | int | float | bool | None
JSONValue = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONLike = JSONScalar | Sequence["JSONLike"] | Mapping[str, "JSONLike"]  # what may be written as JSON
Record = dict[str, JSONValue]  # a stored row's fields as a store gives them back, or a state record


class StoreError(Exception):
    """A store-side failure a user can cause (bad URI, schema clash, unsupported search); carries a code."""

    code = "STORE_ERROR"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


@dataclass(frozen=True)
class Capabilities:
    """What a store can hold and search besides dense vectors."""

    sparse: bool = False  # holds a sparse vector per chunk
    sparse_search: bool = False  # searches it natively
    multivector: bool = False  # token vectors per chunk, searched by MaxSim
    text: bool = False  # lexical (keyword) search over the chunk text
    hybrid: bool = True  # lexical + vector fused in one search


@dataclass
class CollectionSpec:
    """What a collection holds: the dense dimension and which optional columns exist."""

    name: str
    dense_dim: int
    multivector_dim: int | None = None
    sparse: bool = False
    entities: bool = False
    classes: bool = False


class Layout(TypedDict):
    """The named vectors of a Qdrant collection (server or Edge): dense and ColBERT sizes, sparse ones held."""

    dense: int | None
    colbert: int | None
    sparse: bool
    lexical: bool


def layout_of(spec: CollectionSpec) -> Layout:
    """The layout a collection spec needs in a Qdrant store (lexical BM25 terms always)."""
    return {"dense": spec.dense_dim, "colbert": spec.multivector_dim, "sparse": spec.sparse, "lexical": True}


def describe(layout: Layout) -> str:
    return ", ".join(f"{k}: {v}" for k, v in layout.items())


@dataclass
class SearchRequest:
    """One search: query vectors and/or text, a portable filter or the store's native one, a mode, a limit."""

    vector: F32 | None = None  # dense query vector [dims]
    text: str | None = None
    multivector: F32 | None = None  # query token vectors [tokens, dim]
    sparse: SparseInput | None = None  # {"indices": ids, "values": weights}
    where: Filter | None = None
    native: object = None  # the store's own filter (SQL for LanceDB, a dict for Qdrant/Chroma, ...), checked there
    mode: SearchMode = "hybrid"
    top_k: int = 10


@dataclass
class Hit:
    """One retrieved chunk: its id, score, text and every stored metadata field."""

    id: str
    score: float
    text: str
    metadata: Record = field(default_factory=dict)


@dataclass(frozen=True, order=True)
class SourceCount:
    """One ingested source of a collection and how many chunks it has."""

    root: str
    source: str
    chunks: int


@dataclass(frozen=True)
class IndexState:
    """One index of a collection after maintenance: the rows it covers and the rows searched past it."""

    name: str  # the column or vector it indexes: "vector", "text", "id", "dense", ...
    kind: str  # IVF_SQ, HNSW, FTS, BTREE, ..., or "exact scan" where no index answers
    indexed: int
    unindexed: int = 0  # rows written since its last refresh: an exact scan answers for them meanwhile


@dataclass(frozen=True)
class Maintenance:
    """What `finalize` did and which indexes answer now.

    action: "none" (nothing changed), "incremental" (new rows added to the indexes, or left to an exact scan
    under the store's threshold), "compacted" (small files merged and the indexes remapped, past the
    fragmentation threshold), "rebuilt" (every index trained again over the whole collection), or "store" (a
    server indexes as it goes)."""

    action: str
    seconds: float = 0.0
    indexes: tuple[IndexState, ...] = ()

    def describe(self) -> str:
        """One line for logs: the action and each index's coverage."""
        parts = [
            f"{i.name} {i.kind} over {i.indexed:,}" + (f" (+{i.unindexed:,} by exact scan)" if i.unindexed else "")
            for i in self.indexes
        ]
        return f"{self.action} in {self.seconds:.2f} s" + (": " + "; ".join(parts) if parts else "")


@runtime_checkable
class StateTable(Protocol):
    """A small keyed document table kept inside the store (the manifest of stateless jobs lives here).

    A record is a JSON-able dict with string fields `kind` and `collection` (and optionally `root`)
    that `scan` filters on; keys are unique strings.
    """

    def get(self, keys: list[str]) -> dict[str, Record]: ...
    def put(self, records: Mapping[str, Mapping[str, JSONLike]]) -> None: ...
    def delete(self, keys: list[str]) -> None: ...
    def scan(self, kind: str, collection: str | None = None, root: str | None = None) -> dict[str, Record]: ...


@runtime_checkable
class VectorStore(Protocol):
    """The small protocol the pipeline writes and searches through; one implementation per database."""

    uri: str
    capabilities: Capabilities

    def state_dir(self) -> Path | None:
        """A local folder for the pipeline's state (embedded stores), or None for server stores."""

    def state_table(self) -> StateTable:
        """The side table holding the pipeline's state inside the store itself."""

    def ensure_collection(self, spec: CollectionSpec) -> None:
        """Create the collection if missing; raise StoreError (SCHEMA_MISMATCH) when it exists with another shape."""

    def upsert(self, collection: str, chunks: ChunkBatch | Sequence[ChunkRow]) -> int:
        """Insert or replace chunks by `id` (a batch, or row dicts gathered into one); returns how many were written."""

    def delete(self, collection: str, ids: list[str]) -> int:
        """Remove rows by id; returns how many were removed."""

    def delete_where(self, collection: str, where: Filter) -> int:
        """Remove every row matching a filter (e.g. one source); returns how many were removed."""

    def ids_where(self, collection: str, where: Filter) -> set[str]:
        """Every id matching a filter (used to sweep orphans after a crash)."""

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        """Dense, text, sparse, multivector or hybrid search with an optional filter."""

    def count(self, collection: str, where: Filter | None = None) -> int:
        """How many rows (matching an optional filter) the collection holds."""

    def sources(self, collection: str) -> list[SourceCount]:
        """Every (root, source) of the collection with its chunk count, sorted."""

    def list_collections(self) -> list[str]:
        """The chunk collections in the store (the pipeline's own state collection is not listed)."""

    def drop_collection(self, name: str) -> bool:
        """Remove a whole collection; False when there was none."""

    def rows(self, collection: str, fields: list[str] | None = None) -> list[Record]:
        """Every row with its id and the named fields (all metadata when None); for tests and exports."""

    def finalize(self, collection: str, changed: bool = True, rebuild: bool = False) -> Maintenance:
        """After a run: bring the indexes up to date at a cost that grows with what changed (new rows added to
        them, small writes compacted past a threshold); `rebuild` trains every index again over the whole
        collection. Returns what it did and which indexes answer (a no-op where the store indexes as it goes)."""

    def close(self) -> None:
        """Release connections and file locks."""


def check_spec(uri: str, caps: Capabilities, spec: CollectionSpec) -> None:
    """Refuse, before anything is written, a collection whose output this store cannot hold."""
    if spec.sparse and not caps.sparse:
        raise StoreError(
            f"{uri} cannot store or search sparse vectors; remove the sparse step or use lancedb://, qdrant://",
            code="UNSUPPORTED",
        )
    if spec.multivector_dim and not caps.multivector:
        raise StoreError(
            f"{uri} cannot store multivectors (ColBERT); remove the multivector step or use lancedb://, qdrant://, "
            "weaviate://",
            code="UNSUPPORTED",
        )


def source_counts(pairs: list[tuple[str, str]]) -> list[SourceCount]:
    """Count (root, source) pairs into sorted SourceCounts."""
    counts: dict[tuple[str, str], int] = {}
    for key in pairs:
        counts[key] = counts.get(key, 0) + 1
    return [SourceCount(r, s, n) for (r, s), n in sorted(counts.items())]


def point_id(chunk_id: str) -> str:
    """A UUID for stores that want one (Qdrant, Weaviate): a UUID id is kept, any other maps to a stable uuid5.

    The uuid5 is computed as `uuid.uuid5(ID_NAMESPACE, chunk_id)` computes it (SHA-1 of the namespace and the
    UTF-8 name, version and variant bits set), without its objects; text under 32 characters cannot hold a
    UUID's 32 hex digits, so it is not parsed as one."""
    if len(chunk_id) >= 32:
        try:
            return str(uuid.UUID(chunk_id))
        except ValueError:
            pass
    d = hashlib.sha1(_NAMESPACE + chunk_id.encode()).digest()
    h = (d[:6] + bytes((d[6] & 0x0F | 0x50, d[7], d[8] & 0x3F | 0x80)) + d[9:16]).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def delete_source(store: VectorStore, collection: str, source: str, root: str | None = None) -> int:
    """Remove every chunk of one source (of one root, when given); returns how many were removed."""
    where: Filter = Cond("source", "eq", source)
    if root is not None:
        where = And((Cond("root", "eq", root), where))
    return store.delete_where(collection, where)

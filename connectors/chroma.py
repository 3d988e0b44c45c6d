"""Chroma connector (PersistentClient or a `chroma run` server): dense vectors, flat metadata, hybrid by RRF.

Chroma stores one dense vector per record and flat metadata, so the nested entity map is flattened to
one string-array field per label (`entity:<label>`) plus `entity_tags`; sparse and multivector output is
refused when the collection is configured. Vectors are always passed in: no embedding function is set,
so Chroma never loads or downloads one. Local Chroma has no ranked keyword search (its Search API is
for the hosted service), so the lexical side of hybrid uses its document filter (`$regex`, case-insensitive)
to find the chunks holding each query term, ranks them by BM25 here, then fuses with the dense ranking by RRF.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import chromadb
import numpy as np
from chromadb.api.models.Collection import Collection
from chromadb.api.types import GetResult, Include, Metadata, PyEmbedding, Where
from chromadb.base_types import ArrayContainsOperator, LiteralValue, WhereOperator
from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT, Settings

from connectors import lexical
from connectors.base import (
    STATE_PREFIX,
    Capabilities,
    CollectionSpec,
    Hit,
    JSONLike,
    JSONValue,
    Maintenance,
    Record,
    SearchRequest,
    SourceCount,
    StoreError,
    check_spec,
    source_counts,
)
from connectors.chunks import F32, ChunkBatch, ChunkFields, ChunkRow, as_batch
from connectors.filters import ENTITY, And, Cond, Filter, Or, entity_tag, field_kind
from connectors.fusion import Ranking, depth, fuse
from connectors.registry import StoreURL, parse_url

LEX_TERMS = 8  # most query terms looked up
LEX_LIMIT = 200  # most chunks fetched per term; a term in more chunks than this carries little weight
PAGE = 1000
_OPS: dict[str, WhereOperator] = {"eq": "$eq", "ne": "$ne", "gt": "$gt", "gte": "$gte", "lt": "$lt", "lte": "$lte"}


class ChromaStore:
    """`chroma://HOST:PORT/COLLECTION[?ssl=1&token=T&tenant=..&database=..]` or `chroma+local://PATH`."""

    capabilities = Capabilities(sparse=False, sparse_search=False, multivector=False, text=True, hybrid=True)

    def __init__(self, url: StoreURL | str) -> None:
        url = parse_url(url) if isinstance(url, str) else url
        self.uri = url.uri
        settings = Settings(anonymized_telemetry=False)
        tenant = url.params.get("tenant", DEFAULT_TENANT)
        database = url.params.get("database", DEFAULT_DATABASE)
        self.path = Path(url.path).expanduser().resolve() if url.local and url.path else None
        try:
            if self.path is not None:
                self.path.mkdir(parents=True, exist_ok=True)
                self.client = chromadb.PersistentClient(str(self.path), settings, tenant, database)
            else:
                token = url.params.get("token")
                headers = {"Authorization": f"Bearer {token}"} if token else None
                port = url.port or 8000
                self.client = chromadb.HttpClient(url.host or "localhost", port, url.flag("ssl"), headers, settings, tenant, database)  # fmt: skip
                self.client.heartbeat()
        except Exception as e:  # noqa: BLE001 - the driver raises many types for "cannot connect"
            if self.path is not None:
                raise StoreError(f"cannot open {self.path}: {str(e)[:200]}", code="STORE_UNAVAILABLE") from None
            where = f"{url.host}:{url.port or 8000}"
            raise StoreError(f"cannot reach Chroma at {where}: {str(e)[:200]}", code="STORE_UNREACHABLE") from None
        self.max_batch = max(1, int(self.client.get_max_batch_size()))
        self._cols: dict[str, Collection] = {}

    def state_dir(self) -> Path | None:
        return self.path

    def state_table(self) -> ChromaState:
        return ChromaState(self)

    def close(self) -> None:
        self._cols.clear()

    # -- collections ---------------------------------------------------------------------------------

    def _col(self, name: str) -> Collection:
        if name not in self._cols:
            try:
                self._cols[name] = self.client.get_collection(name, embedding_function=None)
            except Exception as e:  # noqa: BLE001 - NotFoundError differs across client versions
                raise StoreError(f"no collection {name!r} in {self.uri}", code="NO_COLLECTION") from e
        return self._cols[name]

    def ensure_collection(self, spec: CollectionSpec) -> None:
        check_spec(self.uri, self.capabilities, spec)
        want = {"shoal_dense_dim": spec.dense_dim, "shoal_entities": spec.entities, "shoal_classes": spec.classes}
        if spec.name in self._names():
            meta = self._col(spec.name).metadata or {}
            have = {k: meta.get(k) for k in want}
            if have != want:
                raise StoreError(
                    f"collection {spec.name!r} in {self.uri} was built with another layout ({have}), this config "
                    f"needs ({want}); use another --collection or remove the old one",
                    code="SCHEMA_MISMATCH",
                )
            return
        try:
            self._cols[spec.name] = self.client.create_collection(
                spec.name, configuration={"hnsw": {"space": "cosine"}}, metadata=want, embedding_function=None
            )
        except ValueError as e:
            raise StoreError(f"Chroma refused collection {spec.name!r}: {e}", code="INVALID_COLLECTION") from None

    def _names(self) -> list[str]:
        return [c.name for c in self.client.list_collections()]

    def list_collections(self) -> list[str]:
        return sorted(n for n in self._names() if not n.startswith(STATE_PREFIX))

    def drop_collection(self, name: str) -> bool:
        self._cols.pop(name, None)
        if name not in self._names():
            return False
        self.client.delete_collection(name)
        return True

    # -- writes --------------------------------------------------------------------------------------

    def upsert(self, collection: str, chunks: ChunkBatch | Sequence[ChunkRow]) -> int:
        batch, col = as_batch(chunks), self._col(collection)
        for i in range(0, len(batch), self.max_batch):
            part = batch.fields[i : i + self.max_batch]
            col.upsert(
                ids=[f["id"] for f in part],
                embeddings=batch.vectors[i : i + self.max_batch],  # the float32 matrix, as Chroma takes it
                documents=[f.get("text") or "" for f in part],
                metadatas=[flat_metadata(f) for f in part],
            )
        return len(batch)

    def delete(self, collection: str, ids: list[str]) -> int:
        col, removed = self._col(collection), 0
        for i in range(0, len(ids), self.max_batch):
            part = list(dict.fromkeys(ids[i : i + self.max_batch]))
            present = col.get(ids=part, include=[])["ids"]
            if present:
                col.delete(ids=present)
            removed += len(present)
        return removed

    def delete_where(self, collection: str, where: Filter) -> int:
        return self.delete(collection, sorted(self.ids_where(collection, where)))

    # -- reads ---------------------------------------------------------------------------------------

    def _get_all(self, collection: str, where: Where | None, include: Include) -> _Columns:
        col, offset = self._col(collection), 0
        out = _Columns([], [], [])
        while True:
            got = col.get(where=where, include=include, limit=PAGE, offset=offset)
            out.ids += got["ids"]
            out.metadatas += got["metadatas"] or []
            out.documents += got["documents"] or []
            if len(got["ids"]) < PAGE:
                return out
            offset += PAGE

    def ids_where(self, collection: str, where: Filter) -> set[str]:
        return set(self._get_all(collection, to_chroma(where), []).ids)

    def count(self, collection: str, where: Filter | None = None) -> int:
        if where is None:
            return self._col(collection).count()
        return len(self.ids_where(collection, where))

    def sources(self, collection: str) -> list[SourceCount]:
        metas = self._get_all(collection, None, ["metadatas"]).metadatas
        return source_counts([(str(m.get("root") or ""), str(m.get("source") or "")) for m in metas])

    def rows(self, collection: str, fields: list[str] | None = None) -> list[Record]:
        got = self._get_all(collection, None, ["metadatas", "documents"])
        out: list[Record] = []
        for i, m, d in zip(got.ids, got.metadatas, got.documents, strict=True):
            row: Record = {"id": i, "text": d, **unflatten(m or {})}
            out.append({k: row.get(k) for k in ["id", *fields]} if fields else row)
        return out

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        col, k, where = self._col(collection), request.top_k, _combined_where(request)
        if request.mode in ("sparse", "multivector"):
            raise StoreError(f"Chroma has no {request.mode} search; use dense, text or hybrid", code="UNSUPPORTED")
        try:
            if request.mode == "text":
                return self._lexical(col, request.text or "", where, k)
            if request.vector is None:
                raise StoreError(f"{request.mode} search needs a query vector", code="INVALID_QUERY")
            if request.mode == "dense" or not request.text:
                return self._dense(col, request.vector, where, k)
            wide = depth(k)  # fused here (connectors/fusion.py): one meaning for a score on every store
            dense = self._dense(col, request.vector, where, wide)
            text = self._lexical(col, request.text, where, wide)
            return fuse(request.text, [Ranking("dense", dense, wide), Ranking("text", text, wide)], k)
        except (ValueError, TypeError) as e:  # chromadb raises ValueError for a malformed where
            raise StoreError(f"Chroma search failed: {str(e).splitlines()[0][:300]}", code="INVALID_FILTER") from None

    def _dense(self, col: Collection, vector: F32, where: Where | None, k: int) -> list[Hit]:
        got = col.query(
            query_embeddings=np.asarray(vector, dtype=np.float32).reshape(1, -1), n_results=k, where=where,
            include=["documents", "metadatas", "distances"],
        )  # fmt: skip
        docs, metas, dists = got["documents"] or [[]], got["metadatas"] or [[]], got["distances"] or [[]]
        rows = zip(got["ids"][0], docs[0], metas[0], dists[0], strict=True)
        return [Hit(i, 1.0 - float(dist), doc or "", unflatten(m or {})) for i, doc, m, dist in rows]

    def _lexical(self, col: Collection, text: str, where: Where | None, k: int) -> list[Hit]:
        """BM25 over the chunks Chroma's document filter finds for each query term (case-insensitive)."""
        q_terms = list(dict.fromkeys(lexical.terms(text)))[:LEX_TERMS]
        docs: dict[str, str] = {}
        df: dict[str, int] = {}
        for term in q_terms:
            pattern = "(?i)" + term.replace(".", "\\.")  # terms hold only word characters and -./'
            got = col.get(where=where, where_document={"$regex": pattern}, include=["documents"], limit=LEX_LIMIT)
            df[term] = len(got["ids"])
            docs.update(zip(got["ids"], got["documents"] or [], strict=True))
        if not docs:
            return []
        scores = lexical.bm25_scores(text, docs, df, max(1, col.count()))
        order = sorted(scores, key=lambda i: -scores[i])[:k]
        if not order:  # the pattern matched inside longer words only: no chunk holds a query term
            return []
        found = col.get(ids=order, include=["metadatas"])
        metas = dict(zip(found["ids"], found["metadatas"] or [], strict=True))
        return [Hit(i, scores[i], docs[i], unflatten(metas.get(i) or {})) for i in order]

    def finalize(self, collection: str, changed: bool = True, rebuild: bool = False) -> Maintenance:
        """Chroma indexes as it goes (HNSW built on write); nothing to do after a run."""
        return Maintenance("store")


@dataclass
class _Columns:
    """Ids, metadata and documents of the records a paged get() returned."""

    ids: list[str]
    metadatas: list[Metadata]
    documents: list[str]


def flat_metadata(fields: ChunkFields) -> Metadata:
    """Chroma metadata: scalars and non-empty scalar arrays; entities become one array per label.

    The id is repeated in the metadata, as Chroma's `where` cannot filter on record ids.
    """
    meta: dict[str, str | int | float | bool | list[str | int | float | bool]] = {}
    for key, value in fields.items():
        if key in ("text", "entities") or value is None:
            continue
        if isinstance(value, list | tuple):
            if value:
                meta[key] = [v for v in value if isinstance(v, str | int | float | bool)]
        elif isinstance(value, str | int | float | bool):
            meta[key] = value
    for label, texts in fields.get("entities", {}).items():
        if texts:
            meta[ENTITY + label] = list(texts)
    return meta


def unflatten(meta: Metadata) -> Record:
    """Metadata as the other stores return it: `entity:<label>` arrays folded back into `entities`."""
    out: Record = {k: _json(v) for k, v in meta.items() if not k.startswith(ENTITY) and k != "id"}
    entities: dict[str, JSONValue] = {k[len(ENTITY) :]: _json(v) for k, v in meta.items() if k.startswith(ENTITY)}
    if entities or "entity_tags" in meta:
        out["entities"] = entities
    return out


def _json(value: object) -> JSONValue:
    """A Chroma metadata value as JSON: scalars as they are, arrays as lists."""
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str | int | float | bool)]
    return value if isinstance(value, str | int | float | bool) else None


def to_chroma(f: Filter) -> Where:
    """A portable filter as a Chroma `where` ($and / $or need two or more parts)."""
    if isinstance(f, And | Or):
        parts = [to_chroma(x) for x in f.items]
        return parts[0] if len(parts) == 1 else {"$and" if isinstance(f, And) else "$or": parts}
    return _cond(f)


def _cond(c: Cond) -> Where:
    key, values = c.field, c.values
    if c.field.startswith(ENTITY):
        key, values = "entity_tags", tuple(entity_tag(c.field, v) for v in values)
    if (field_kind(c.field) or "").endswith("_list"):
        if c.op == "in":
            parts: list[Where] = [_contains(key, "$contains", v) for v in values]
            return parts[0] if len(parts) == 1 else {"$or": parts}
        return _contains(key, "$contains" if c.op == "eq" else "$not_contains", values[0])
    if c.op == "in":
        among: dict[Literal["$in", "$nin"], list[LiteralValue]] = {"$in": list(values)}
        return {key: among}
    compare: dict[WhereOperator | Literal["$and", "$or"], LiteralValue] = {_OPS[c.op]: values[0]}
    return {key: compare}


def _contains(key: str, op: ArrayContainsOperator, value: LiteralValue) -> Where:
    test: dict[ArrayContainsOperator, LiteralValue] = {op: value}
    return {key: test}


def _combined_where(request: SearchRequest) -> Where | None:
    parts = [to_chroma(request.where)] if request.where is not None else []
    if request.native is not None:
        try:
            native = json.loads(request.native) if isinstance(request.native, str) else request.native
        except json.JSONDecodeError as e:
            raise StoreError(f"Chroma's native filter is a JSON `where`: {e.msg}", code="INVALID_FILTER") from None
        if not isinstance(native, dict):
            raise StoreError("Chroma's native filter is a JSON object (a `where`)", code="INVALID_FILTER")
        parts.append(native)  # Chroma checks its shape when it runs it
    return None if not parts else parts[0] if len(parts) == 1 else {"$and": parts}


class ChromaState:
    """The pipeline's state as records of the `shoal_state` collection (a 1-d placeholder vector each)."""

    def __init__(self, store: ChromaStore) -> None:
        self.batch = store.max_batch
        self.col = store.client.get_or_create_collection(STATE_PREFIX, embedding_function=None)

    def get(self, keys: list[str]) -> dict[str, Record]:
        out: dict[str, Record] = {}
        for i in range(0, len(keys), self.batch):
            out.update(_state_records(self.col.get(ids=keys[i : i + self.batch], include=["documents"])))
        return out

    def put(self, records: Mapping[str, Mapping[str, JSONLike]]) -> None:
        items = list(records.items())
        for i in range(0, len(items), self.batch):
            part = items[i : i + self.batch]
            placeholders: list[PyEmbedding] = [[1.0] for _ in part]
            self.col.upsert(
                ids=[k for k, _ in part], embeddings=placeholders, documents=[json.dumps(d, default=str) for _, d in part],
                metadatas=[{f: v for f in ("kind", "collection", "root") if isinstance(v := d.get(f), str)} for _, d in part],
            )  # fmt: skip

    def delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), self.batch):
            self.col.delete(ids=keys[i : i + self.batch])

    def scan(self, kind: str, collection: str | None = None, root: str | None = None) -> dict[str, Record]:
        conds: list[Where] = [
            {f: v} for f, v in (("kind", kind), ("collection", collection), ("root", root)) if v is not None
        ]
        where: Where = conds[0] if len(conds) == 1 else {"$and": conds}
        out: dict[str, Record] = {}
        offset = 0
        while True:
            got = self.col.get(where=where, include=["documents"], limit=PAGE, offset=offset)
            out.update(_state_records(got))
            if len(got["ids"]) < PAGE:
                return out
            offset += PAGE


def _state_records(got: GetResult) -> dict[str, Record]:
    """State records by key from a get() that included the documents (each a record as JSON)."""
    docs = got["documents"]
    if docs is None:
        raise StoreError(f"Chroma returned no documents for {STATE_PREFIX!r}")
    return {k: json.loads(d) for k, d in zip(got["ids"], docs, strict=True)}

"""Embedded LanceDB connector: chunk table with dense/multivector/sparse/entity columns, FTS, RRF hybrid."""

from __future__ import annotations

import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from connectors.base import CollectionSpec, Hit, SearchRequest, StoreError, quote

RRF_K = 60
SCALAR_INDEX_MIN_ROWS = 1_000  # below this a scan is as fast as an index
VECTOR_INDEX_MIN_ROWS = 50_000  # below this exact (flat) search is fast and exact
SCALAR_INDEXED = {"id": "btree", "source": "btree", "root": "bitmap", "entity_tags": "label_list"}

BASE_FIELDS: list[pa.Field] = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("text", pa.string()),
    pa.field("root", pa.string()),
    pa.field("source", pa.string()),
    pa.field("title", pa.string()),
    pa.field("kind", pa.string()),
    pa.field("chunk_index", pa.int32()),
    pa.field("chunk_hash", pa.string()),
    pa.field("doc_hash", pa.string()),
    pa.field("pages", pa.list_(pa.int32())),
    pa.field("heading_path", pa.list_(pa.string())),
    pa.field("char_start", pa.int64()),
    pa.field("char_end", pa.int64()),
    pa.field("n_tokens", pa.int32()),
    pa.field("ingested_at", pa.float64()),
]


def chunk_schema(spec: CollectionSpec) -> pa.Schema:
    """The Arrow schema of a chunk table for a collection spec (optional columns only when configured)."""
    fields = list(BASE_FIELDS)
    fields.append(pa.field("vector", pa.list_(pa.float32(), spec.dense_dim)))
    if spec.multivector_dim:
        fields.append(pa.field("multivector", pa.list_(pa.list_(pa.float32(), spec.multivector_dim))))
    if spec.sparse:
        fields.append(
            pa.field("sparse", pa.struct([("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float32()))]))
        )
    if spec.entities:
        fields.append(pa.field("entities", pa.map_(pa.string(), pa.list_(pa.string()))))
        fields.append(pa.field("entity_tags", pa.list_(pa.string())))
    if spec.classes:
        fields.append(pa.field("classes", pa.list_(pa.string())))
    return pa.schema(fields)


def _row_for_arrow(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for key in ("vector", "multivector"):
        if isinstance(out.get(key), np.ndarray):
            out[key] = out[key].astype(np.float32).tolist()
    if isinstance(out.get("entities"), dict):
        out["entities"] = list(out["entities"].items())
    return out


class LanceDBStore:
    """`lancedb://PATH` (or a bare path): one folder holding the tables and the pipeline's manifest."""

    supports_hybrid = True

    def __init__(self, uri: str) -> None:
        import lancedb

        self.uri = uri
        path = uri.removeprefix("lancedb://") or "./shoal-data"
        self.path = Path(path).expanduser().resolve()
        self.path.mkdir(parents=True, exist_ok=True)
        self.db = lancedb.connect(str(self.path))
        self._tables: dict[str, Any] = {}

    def state_dir(self) -> Path | None:
        return self.path

    def _table(self, name: str) -> Any:
        if name not in self._tables:
            try:
                self._tables[name] = self.db.open_table(name)
            except (FileNotFoundError, ValueError) as e:
                raise StoreError(f"no collection {name!r} in {self.uri}", code="NO_COLLECTION") from e
        return self._tables[name]

    def has_collection(self, name: str) -> bool:
        try:
            self._table(name)
            return True
        except StoreError:
            return False

    def ensure_collection(self, spec: CollectionSpec) -> None:
        schema = chunk_schema(spec)
        if self.has_collection(spec.name):
            have = self._table(spec.name).schema
            if have.remove_metadata() != schema:
                raise StoreError(
                    f"collection {spec.name!r} in {self.uri} was built with another layout "
                    f"({_describe(have)}), this config needs ({_describe(schema)}); "
                    "use another --collection or remove the old one",
                    code="SCHEMA_MISMATCH",
                )
            return
        self._tables[spec.name] = self.db.create_table(spec.name, schema=schema)

    def upsert(self, collection: str, rows: list[dict[str, Any]]) -> int:
        if not rows:
            return 0
        table = self._table(collection)
        data = pa.Table.from_pylist([_row_for_arrow(r) for r in rows], schema=table.schema)
        (table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data))
        return len(rows)

    def delete(self, collection: str, ids: list[str]) -> int:
        if not ids:
            return 0
        table = self._table(collection)
        before = table.count_rows()
        for i in range(0, len(ids), 500):
            table.delete("id IN (" + ", ".join(quote(x) for x in ids[i : i + 500]) + ")")
        return before - table.count_rows()

    def ids_where(self, collection: str, where: str) -> set[str]:
        table = self._table(collection)
        got = table.search().where(where).select(["id"]).limit(None).to_arrow()
        return set(got.column("id").to_pylist())

    def count(self, collection: str, where: str | None = None) -> int:
        return self._table(collection).count_rows(where)

    def version(self, collection: str) -> int:
        return self._table(collection).version

    def rows(self, collection: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
        """Every row (for tests and exports)."""
        return (
            self._table(collection).to_arrow().select(columns or []).to_pylist()
            if columns
            else (self._table(collection).to_arrow().to_pylist())
        )

    # -- search --------------------------------------------------------------------------------------

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        table = self._table(collection)
        k = request.top_k
        if request.sparse is not None:
            raise StoreError("LanceDB has no sparse-vector search; use dense, text or hybrid", code="UNSUPPORTED")
        if request.mode == "text":
            return self._text(table, request, k)
        if request.mode == "multivector":
            if request.multivector is None:
                raise StoreError("multivector search needs a multivector query", code="INVALID_QUERY")
            return self._vector(table, request.multivector, "multivector", request.where, k)
        if request.vector is None:
            raise StoreError(f"{request.mode} search needs a query vector", code="INVALID_QUERY")
        dense = self._vector(table, request.vector, "vector", request.where, k if request.mode == "dense" else 4 * k)
        if request.mode == "dense" or not request.text:
            return dense[:k]
        return rrf_fuse([dense, self._text(table, request, 4 * k)], k)

    def _vector(self, table: Any, vec: np.ndarray, column: str, where: str | None, k: int) -> list[Hit]:
        q = table.search(np.asarray(vec, dtype=np.float32), vector_column_name=column).distance_type("cosine")
        if where:
            q = q.where(where, prefilter=True)
        rows = q.limit(k).to_list()
        return [_hit(r, 1.0 - float(r.pop("_distance"))) for r in rows]

    def _text(self, table: Any, request: SearchRequest, k: int) -> list[Hit]:
        if not request.text:
            raise StoreError("text search needs query text", code="INVALID_QUERY")
        q = table.search(request.text, query_type="fts", fts_columns="text")
        if request.where:
            q = q.where(request.where, prefilter=True)
        try:
            rows = q.limit(k).to_list()
        except (RuntimeError, ValueError) as e:
            if "index" in str(e).lower() and "fts" in str(e).lower():
                return []  # no full-text index yet: hybrid degrades to dense
            raise StoreError(f"full-text search failed: {e}", code="SEARCH_FAILED") from e
        return [_hit(r, float(r.pop("_score"))) for r in rows]

    # -- maintenance ---------------------------------------------------------------------------------

    def finalize(self, collection: str, changed: bool = True) -> None:
        from lancedb.index import FTS, BTree, IvfPq, LabelList
        from lancedb.index import Bitmap as BitmapIdx

        table = self._table(collection)
        rows = table.count_rows()
        have = {tuple(ix.columns) for ix in table.list_indices()}
        version = table.version
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if rows and ("text",) not in have:
                table.create_index("text", config=FTS(), replace=True)
            if rows >= SCALAR_INDEX_MIN_ROWS:
                kinds = {"btree": BTree, "bitmap": BitmapIdx, "label_list": LabelList}
                for col, kind in SCALAR_INDEXED.items():
                    if (col,) not in have and col in table.schema.names:
                        table.create_index(col, config=kinds[kind](), replace=True)
            if rows >= VECTOR_INDEX_MIN_ROWS and ("vector",) not in have:
                dim = table.schema.field("vector").type.list_size
                sub = next(s for s in (dim // 16, dim // 8, dim // 4, 1) if s and dim % s == 0)
                cfg = IvfPq(distance_type="cosine", num_partitions=max(1, rows // 4096), num_sub_vectors=sub)
                table.create_index("vector", config=cfg, replace=True)
            if changed or table.version != version:
                table.optimize(cleanup_older_than=timedelta(hours=1))


def rrf_fuse(rankings: list[list[Hit]], k: int, rrf_k: int = RRF_K) -> list[Hit]:
    """Reciprocal-rank fusion: score = sum over rankings of 1 / (rrf_k + rank)."""
    fused: dict[str, Hit] = {}
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused.setdefault(hit.id, hit)
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (rrf_k + rank)
    order = sorted(scores, key=lambda i: -scores[i])[:k]
    return [Hit(i, scores[i], fused[i].text, fused[i].metadata) for i in order]


def _hit(row: dict[str, Any], score: float) -> Hit:
    for key in ("vector", "multivector", "sparse", "_relevance_score"):
        row.pop(key, None)
    if isinstance(row.get("entities"), list):
        row["entities"] = dict(row["entities"])
    return Hit(id=row.pop("id"), score=score, text=row.pop("text"), metadata=row)


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema if f.name in {"vector", "multivector", "sparse", "entities"})

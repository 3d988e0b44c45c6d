"""Embedded LanceDB connector: chunk table with dense/multivector/sparse/entity columns, FTS, RRF hybrid."""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lancedb.db import DBConnection
from lancedb.query import LanceVectorQueryBuilder
from lancedb.table import CompactionOptions, Table

from connectors.base import (
    STATE_PREFIX,
    Capabilities,
    CollectionSpec,
    Hit,
    IndexState,
    JSONLike,
    JSONValue,
    Maintenance,
    Record,
    SearchRequest,
    SourceCount,
    StoreError,
    check_spec,
)
from connectors.chunks import F32, ChunkBatch, ChunkRow, as_batch
from connectors.filters import Filter
from connectors.fusion import RRF_K, Ranking, depth, fuse, rrf_fuse
from connectors.lance_arrow import arrow_batch, chunk_schema
from connectors.registry import StoreURL, parse_url
from connectors.sql import check_sql, quote, to_sql

__all__ = ["RRF_K", "LanceDBStore", "chunk_schema", "rrf_fuse"]
SCALAR_INDEX_MIN_ROWS = 1_000  # below this a scan is as fast as an index
VECTOR_INDEX_MIN_ROWS = 50_000  # below this exact (flat) search is fast and exact
SCALAR_INDEXED = {"id": "btree", "source": "btree", "root": "bitmap", "entity_tags": "label_list"}
ID_INDEX = "id_idx"  # the name LanceDB gives the id column's index
ID_REINDEX_MIN_ROWS = 4096  # rows written past the id index before a rebuild, at the least
# incremental maintenance (finalize): rows an exact scan answers for before they are added to the indexes
UNINDEXED_MAX_FRACTION = 0.10
UNINDEXED_MAX_ROWS = 50_000  # an exact scan of 50,000 384-d rows takes a few ms
SMALL_FRAGMENTS_MAX = 64  # fragments under FRAGMENT_ROWS before a compaction (a write batch makes one)
FIRST_BUILD_FRAGMENTS = 8  # before a first index build, compaction has no index to remap: compact sooner
DELETED_MAX_FRACTION = 0.10  # deleted rows (of the table, or of a fragment) before they are dropped
FRAGMENT_ROWS = 131_072  # compaction's target: bigger fragments are left alone
NO_COMPACTION: CompactionOptions = {"target_rows_per_fragment": 1, "materialize_deletions": False}


class LanceDBStore:
    """`lancedb://PATH` (or a bare path): one folder holding the tables and the pipeline's manifest."""

    capabilities = Capabilities(sparse=True, sparse_search=False, multivector=True, text=True, hybrid=True)

    def __init__(self, url: StoreURL | str) -> None:
        url = parse_url(url) if isinstance(url, str) else url
        self.uri = url.uri
        self.path = Path(url.path or "./shoal-data").expanduser().resolve()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            # every read sees the latest commit: other processes (shards of one ingest) write the same tables
            self.db = lancedb.connect(str(self.path), read_consistency_interval=timedelta(0))
        except OSError as e:
            raise StoreError(f"cannot open {self.uri}: {e.strerror or e}", code="STORE_UNAVAILABLE") from None
        self._tables: dict[str, Table] = {}

    def state_dir(self) -> Path | None:
        return self.path

    def state_table(self) -> LanceState:
        return LanceState(self)

    def close(self) -> None:
        self._tables.clear()

    def _table(self, name: str) -> Table:
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
        check_spec(self.uri, self.capabilities, spec)
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
        try:
            self._tables[spec.name] = self.db.create_table(spec.name, schema=schema)
        except (ValueError, OSError, RuntimeError):
            if not self.has_collection(spec.name):  # not another writer (a shard) creating it at the same moment
                raise
            self.ensure_collection(spec)

    def upsert(self, collection: str, chunks: ChunkBatch | Sequence[ChunkRow]) -> int:
        """Write chunks by id: new ids are appended, ids already stored deleted and appended again.

        The id index (a BTREE, rebuilt as the table grows) says which of the batch's ids are stored. A
        `merge_insert` on id joins the batch with every stored id (the last quarter of a 1M-chunk write cost 9x
        the first; a re-write of 5% of 100,000 chunks cost 3x a fresh write per chunk); a delete of the stored
        ids through the index and an append cost what a fresh write costs. A retry, or a re-ingest, finds its
        ids stored and replaces them: no chunk is ever written twice. A crash between the delete and the
        append leaves the batch's ids pending in the manifest, so the next run writes those files again. The
        check and the write are steps apart, so one writer per id at a time (the ingest's lease sees to it)."""
        batch = as_batch(chunks)
        if not len(batch):
            return 0
        table = self._table(collection)
        data = _last_per_id(arrow_batch(batch, table.schema))
        stored = self._stored_ids(table, data.column("id").to_pylist())
        for i in range(0, len(stored), 1000):
            part = sorted(stored)[i : i + 1000]
            table.delete("id IN (" + ", ".join(quote(x) for x in part) + ")")
        table.add(data)
        return len(batch)

    def _stored_ids(self, table: Table, ids: list[str]) -> set[str]:
        """Which of these ids the table holds, looked up in the id index (built, and rebuilt, here as needed)."""
        rows = table.count_rows()
        if not rows:
            return set()
        stats = table.index_stats(ID_INDEX)
        if rows >= SCALAR_INDEX_MIN_ROWS and (stats is None or stats.num_unindexed_rows >= _reindex_after(rows)):
            from lancedb.index import BTree

            table.create_index("id", config=BTree(), replace=True)
        found: set[str] = set()
        for i in range(0, len(ids), 1000):
            sql = "id IN (" + ", ".join(quote(x) for x in ids[i : i + 1000]) + ")"
            found.update(table.search().where(sql).select(["id"]).limit(None).to_arrow().column("id").to_pylist())
        return found

    def delete(self, collection: str, ids: list[str]) -> int:
        if not ids:
            return 0
        table = self._table(collection)
        before = table.count_rows()
        for i in range(0, len(ids), 500):
            table.delete("id IN (" + ", ".join(quote(x) for x in ids[i : i + 500]) + ")")
        return before - table.count_rows()

    def delete_where(self, collection: str, where: Filter) -> int:
        table = self._table(collection)
        before = table.count_rows()
        table.delete(to_sql(where))
        return before - table.count_rows()

    def ids_where(self, collection: str, where: Filter) -> set[str]:
        table = self._table(collection)
        got = table.search().where(to_sql(where)).select(["id"]).limit(None).to_arrow()
        return set(got.column("id").to_pylist())

    def count(self, collection: str, where: Filter | None = None) -> int:
        return self._table(collection).count_rows(to_sql(where) if where is not None else None)

    def sources(self, collection: str) -> list[SourceCount]:
        data = self._table(collection).to_arrow().select(["root", "source"])
        grouped = data.group_by(["root", "source"]).aggregate([("source", "count")]).to_pylist()
        return sorted(SourceCount(g["root"] or "", g["source"] or "", g["source_count"]) for g in grouped)

    def list_collections(self) -> list[str]:
        return sorted(n for n in _table_names(self.db) if not n.startswith(STATE_PREFIX))

    def drop_collection(self, name: str) -> bool:
        if name not in _table_names(self.db):
            return False
        self.db.drop_table(name)
        self._tables.pop(name, None)
        return True

    def version(self, collection: str) -> int:
        return self._table(collection).version

    def rows(self, collection: str, fields: list[str] | None = None) -> list[Record]:
        """Every row (for tests and exports)."""
        data = self._table(collection).to_arrow()
        if fields:
            data = data.select(list(dict.fromkeys(["id", *fields])))
        out: list[Record] = data.to_pylist()
        for r in out:
            if "entities" in r:
                r["entities"] = _entity_map(r["entities"])
        return out

    # -- search --------------------------------------------------------------------------------------

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        table = self._table(collection)
        where = _where(request)
        try:
            return self._search(table, request, where)
        except (RuntimeError, ValueError, OSError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            code = (
                "INVALID_FILTER" if where and any(w in first for w in ("parse", "field", "Schema")) else "SEARCH_FAILED"
            )
            raise StoreError(f"search failed: {first[:300]}", code=code) from None

    def _search(self, table: Table, request: SearchRequest, where: str | None) -> list[Hit]:
        k = request.top_k
        if request.mode == "sparse" or (request.sparse is not None and request.mode != "hybrid"):
            raise StoreError("LanceDB has no sparse-vector search; use dense, text or hybrid", code="UNSUPPORTED")
        if request.mode == "text":
            return self._text(table, request.text, where, k)
        if request.mode == "multivector":
            if request.multivector is None:
                raise StoreError("multivector search needs a multivector query", code="INVALID_QUERY")
            return self._vector(table, request.multivector, "multivector", where, k)
        if request.vector is None:
            raise StoreError(f"{request.mode} search needs a query vector", code="INVALID_QUERY")
        if request.mode == "dense" or not request.text:
            return self._vector(table, request.vector, "vector", where, k)
        wide = depth(k)  # fused here (connectors/fusion.py): one meaning for a score on every store
        dense = self._vector(table, request.vector, "vector", where, wide)
        text = self._text(table, request.text, where, wide)
        return fuse(request.text, [Ranking("dense", dense, wide), Ranking("text", text, wide)], k)

    def _vector(self, table: Table, vec: F32, column: str, where: str | None, k: int) -> list[Hit]:
        search = table.search(np.asarray(vec, dtype=np.float32), vector_column_name=column)
        if not isinstance(search, LanceVectorQueryBuilder):  # a vector query always builds one
            raise StoreError(f"LanceDB cannot search {column!r} by vector", code="SEARCH_FAILED")
        q = search.distance_type("cosine")
        if where:
            q = q.where(where, prefilter=True)
        rows = q.limit(k).to_list()
        return [_hit(r, 1.0 - float(r.pop("_distance"))) for r in rows]

    def _text(self, table: Table, text: str | None, where: str | None, k: int) -> list[Hit]:
        if not text:
            raise StoreError("text search needs query text", code="INVALID_QUERY")
        q = table.search(text, query_type="fts", fts_columns="text")
        if where:
            q = q.where(where, prefilter=True)
        try:
            rows = q.limit(k).to_list()
        except (RuntimeError, ValueError) as e:
            if "index" in str(e).lower() and "fts" in str(e).lower():
                return []  # no full-text index yet: hybrid degrades to dense
            raise
        return [_hit(r, float(r.pop("_score"))) for r in rows]

    # -- maintenance ---------------------------------------------------------------------------------

    def finalize(self, collection: str, changed: bool = True, rebuild: bool = False) -> Maintenance:
        """Build the indexes a table lacks; after that, keep them up to date at a cost that grows with the change.

        Rows written since an index was built are searched by an exact scan next to it (LanceDB merges both), so
        a small change needs no index work at all. Past `UNINDEXED_MAX_FRACTION` of the table (or
        `UNINDEXED_MAX_ROWS`) the new rows are added to the existing indexes (LanceDB's `optimize`: no
        retraining). Small fragments are compacted, and deleted rows dropped, only past `SMALL_FRAGMENTS_MAX`
        or `DELETED_MAX_FRACTION`, and then only the small fragments and those with many deletions are
        rewritten (fragments of `FRAGMENT_ROWS`). `rebuild` trains every index again over the whole table."""
        t0 = time.perf_counter()
        table = self._table(collection)
        rows = table.count_rows()
        action = "none"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            have = {tuple(ix.columns) for ix in table.list_indices()}
            building = ("text",) not in have or (rows >= VECTOR_INDEX_MIN_ROWS and ("vector",) not in have)
            limit = FIRST_BUILD_FRAGMENTS if building else SMALL_FRAGMENTS_MAX
            if rows and (rebuild or ((changed or building) and _fragmented(table, rows, limit))):
                compact_fragments(table)  # before an index is built: nothing to remap
                action = "compacted"
            if self._create_missing(table, rows, have, rebuild):
                action = "rebuilt" if rebuild else "built"
            elif changed and action == "none":
                action = self._refresh(table, rows)
        return Maintenance(action, time.perf_counter() - t0, tuple(self.index_states(collection)))

    def _create_missing(self, table: Table, rows: int, have: set[tuple[str, ...]], rebuild: bool) -> bool:
        """Create every index the table is big enough for and lacks (all of them when `rebuild`)."""
        from lancedb.index import FTS, BTree, IvfSq, LabelList
        from lancedb.index import Bitmap as BitmapIdx

        made = False
        if rows and (rebuild or ("text",) not in have):
            table.create_index("text", config=FTS(), replace=True)
            made = True
        if rows >= SCALAR_INDEX_MIN_ROWS:
            kinds: dict[str, type[BTree | BitmapIdx | LabelList]] = {"btree": BTree, "bitmap": BitmapIdx, "label_list": LabelList}  # fmt: skip
            for col, kind in SCALAR_INDEXED.items():
                if (rebuild or (col,) not in have) and col in table.schema.names:
                    table.create_index(col, config=kinds[kind](), replace=True)
                    made = True
        if rows >= VECTOR_INDEX_MIN_ROWS and (rebuild or ("vector",) not in have):
            # IVF with 8-bit scalar quantisation: at 100,000 rows of 384 dims it builds in seconds where IVF-PQ's
            # codebook training took minutes, and it keeps 0.90 recall@10 where IVF-PQ kept 0.18 on the same
            # (random, worst-case) vectors; its cost per row stays flat as the table grows
            cfg = IvfSq(distance_type="cosine", num_partitions=max(1, rows // 4096))
            table.create_index("vector", config=cfg, replace=True)
            made = True
        return made

    def _refresh(self, table: Table, rows: int) -> str:
        """After a change: add the new rows to the indexes past the unindexed threshold, else leave them to the
        exact scan."""
        unindexed = max((s.unindexed for s in self._states(table) if s.indexed), default=0)
        if unindexed > min(UNINDEXED_MAX_ROWS, UNINDEXED_MAX_FRACTION * rows):
            table.optimize(cleanup_older_than=timedelta(hours=1), compaction_options=NO_COMPACTION)
        return "incremental"

    def index_states(self, collection: str) -> list[IndexState]:
        """Each index of the table: its kind, the rows it covers and the rows an exact scan answers for."""
        return self._states(self._table(collection))

    def _states(self, table: Table) -> list[IndexState]:
        out = []
        for ix in table.list_indices():
            st = table.index_stats(ix.name)
            if st is not None:
                out.append(IndexState(ix.columns[0], str(st.index_type), st.num_indexed_rows, st.num_unindexed_rows))
        if not any(s.name == "vector" for s in out):
            out.append(IndexState("vector", "exact scan", 0, table.count_rows()))
        return sorted(out, key=lambda s: s.name)


def _fragmented(table: Table, rows: int, limit: int) -> bool:
    """Past the fragmentation threshold: many small fragments, or many deleted rows kept."""
    stats = table.stats()
    small = _stat(_stat(stats, "fragment_stats"), "num_small_fragments")
    deleted = _stat(stats, "num_deleted_rows")
    return (isinstance(small, int) and small > limit) or (
        isinstance(deleted, int) and deleted > DELETED_MAX_FRACTION * rows
    )


def _stat(stats: object, key: str) -> object:
    """A field of `Table.stats()`: typed as dataclasses, given back as dicts by this LanceDB."""
    return stats.get(key) if isinstance(stats, dict) else getattr(stats, key, None)


def compact_fragments(table: Table) -> None:
    """Merge small fragments and drop deleted rows, rewriting only the fragments that need it; the indexes are
    remapped and the new rows added to them (no retraining)."""
    opts: CompactionOptions = {"target_rows_per_fragment": FRAGMENT_ROWS, "materialize_deletions_threshold": DELETED_MAX_FRACTION}  # fmt: skip
    table.optimize(cleanup_older_than=timedelta(hours=1), compaction_options=opts)


def _reindex_after(rows: int) -> int:
    """Rows written past the id index before it is rebuilt. A lookup scans the rows the index does not cover,
    a rebuild costs about the whole table: rebuilding every sqrt(400 * rows) rows keeps both small (at 1M rows,
    every 20k rows)."""
    return max(ID_REINDEX_MIN_ROWS, math.isqrt(400 * rows))


def _last_per_id(data: pa.Table) -> pa.Table:
    """A batch with each id once, its last row kept (an upsert of the same id twice keeps the later one)."""
    ids = data.column("id")
    if pc.count_distinct(ids).as_py() == data.num_rows:
        return data
    last = {x: i for i, x in enumerate(ids.to_pylist())}
    return data.take(pa.array(sorted(last.values()), pa.int64()))


def _where(request: SearchRequest) -> str | None:
    """The SQL of a request's portable filter and/or its raw SQL filter (checked to be one whole expression)."""
    parts = [to_sql(request.where)] if request.where is not None else []
    if request.native is not None:
        if not isinstance(request.native, str):
            raise StoreError("LanceDB's native filter is a SQL string", code="INVALID_FILTER")
        parts.append(check_sql(request.native))
    return " AND ".join(parts) or None


def _table_names(db: DBConnection) -> list[str]:
    """Every table name, following list_tables' pages."""
    names: list[str] = []
    token = None
    while True:
        page = db.list_tables(page_token=token)
        names += list(page.tables)
        token = getattr(page, "page_token", None)
        if not token:
            return names


def _hit(row: Record, score: float) -> Hit:
    for key in ("vector", "multivector", "sparse", "_relevance_score"):
        row.pop(key, None)
    if "entities" in row:
        row["entities"] = _entity_map(row["entities"])
    text = row.pop("text")
    return Hit(id=str(row.pop("id")), score=score, text=text if isinstance(text, str) else "", metadata=row)


def _entity_map(value: JSONValue) -> JSONValue:
    """Arrow gives a map column back as (label, texts) pairs: the entity map as the other stores give it."""
    if not isinstance(value, list):
        return value
    return {str(pair[0]): pair[1] for pair in value if isinstance(pair, tuple | list)}


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema if f.name in {"vector", "multivector", "sparse", "entities"})


class LanceState:
    """The pipeline's state as a LanceDB table (`shoal_state`), for when it must live in the store."""

    SCHEMA = pa.schema([(k, pa.string()) for k in ("key", "kind", "collection", "root", "doc")])

    def __init__(self, store: LanceDBStore) -> None:
        self.db = store.db
        names = _table_names(self.db)
        self.table = (
            self.db.open_table(STATE_PREFIX)
            if STATE_PREFIX in names
            else self.db.create_table(STATE_PREFIX, schema=self.SCHEMA)
        )

    def get(self, keys: list[str]) -> dict[str, Record]:
        if not keys:
            return {}
        got = self.table.search().where(f"key IN ({', '.join(quote(k) for k in keys)})").limit(None).to_arrow()
        return {r["key"]: json.loads(r["doc"]) for r in got.to_pylist()}

    def put(self, records: Mapping[str, Mapping[str, JSONLike]]) -> None:
        if records:
            rows = [
                {
                    "key": k,
                    "kind": d["kind"],
                    "collection": d.get("collection"),
                    "root": d.get("root"),
                    "doc": json.dumps(d, default=str),
                }
                for k, d in records.items()
            ]
            data = pa.Table.from_pylist(rows, schema=self.SCHEMA)
            self.table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(data)

    def delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 500):
            self.table.delete(f"key IN ({', '.join(quote(k) for k in keys[i : i + 500])})")

    def scan(self, kind: str, collection: str | None = None, root: str | None = None) -> dict[str, Record]:
        sql = f"kind = {quote(kind)}"
        sql += f" AND collection = {quote(collection)}" if collection is not None else ""
        sql += f" AND root = {quote(root)}" if root is not None else ""
        got = self.table.search().where(sql).limit(None).to_arrow()
        return {r["key"]: json.loads(r["doc"]) for r in got.to_pylist()}

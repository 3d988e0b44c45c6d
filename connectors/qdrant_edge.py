"""Embedded Qdrant on Qdrant's own engine (Qdrant Edge): one Edge shard per collection in a local folder.

`qdrant+edge://PATH` holds a marker file, a lock file and one shard folder per collection (plus `shoal_state`,
the manifest). Vectors per point are those of the server connector: `dense` (cosine, HNSW), `lexical` (BM25
term weights computed locally, IDF applied by the shard), `sparse` (a SPLADE step) and `colbert` (multivector,
MaxSim, no graph). Hybrid queries each ranking and fuses them as every store does (connectors/fusion.py).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import qdrant_edge as qe

from connectors import lexical
from connectors.base import (
    INTEGER_INDEXES,
    KEYWORD_INDEXES,
    STATE_PREFIX,
    Capabilities,
    CollectionSpec,
    Hit,
    IndexState,
    JSONLike,
    Layout,
    Maintenance,
    Record,
    SearchRequest,
    SourceCount,
    StoreError,
    check_spec,
    describe,
    layout_of,
    point_id,
    source_counts,
)
from connectors.chunks import ChunkBatch, ChunkRow, SparseInput, as_batch, payload_items
from connectors.edge_config import memory_mode, retuned, shard_config
from connectors.edge_filters import Condition, combined, to_edge
from connectors.edge_root import LAYOUT, EdgeRoot, open_root, release_root
from connectors.filters import Filter
from connectors.fusion import Kind, Ranking, depth, fuse
from connectors.registry import StoreURL, parse_url

BATCH = 512
# fields whose values get their own HNSW links (filterable HNSW): the ones searches filter on by meaning.
# The rest (ids, paths, one-value fields like root and kind) would each add a graph as large as the main one
# to every index build (a fourfold build time at 100k chunks) for filters the payload index answers alone.
GRAPH_FIELDS = ("entity_tags", "classes")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class QdrantEdgeStore:
    """`qdrant+edge://PATH`: Qdrant's engine in this process, one Edge shard per collection under PATH."""

    capabilities = Capabilities(sparse=True, sparse_search=True, multivector=True, text=True, hybrid=True)

    def __init__(self, url: StoreURL | str) -> None:
        url = parse_url(url) if isinstance(url, str) else url
        self.uri, self.url = url.uri, url
        self.path = Path(url.path or "./shoal-data").expanduser().resolve()
        self.memory = memory_mode(url.params.get("memory"))
        self.root = open_root(self.path)
        self._closed = False
        self._layouts: dict[str, Layout] = {}

    def state_dir(self) -> Path | None:
        return self.path

    def state_table(self) -> EdgeState:
        return EdgeState(self.root)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            release_root(self.path)

    # -- collections ---------------------------------------------------------------------------------

    def _layout(self, name: str) -> Layout:
        if not _NAME.match(name) or name == STATE_PREFIX:
            raise StoreError(f"no collection {name!r} in {self.uri}", code="NO_COLLECTION")
        self.root.shard(name)
        if name not in self._layouts:
            try:
                self._layouts[name] = json.loads((self.path / name / LAYOUT).read_text())
            except (OSError, ValueError):
                raise StoreError(f"collection {name!r} in {self.uri} has no readable {LAYOUT}", "STORE_CORRUPT") from None  # fmt: skip
        return self._layouts[name]

    def ensure_collection(self, spec: CollectionSpec) -> None:
        check_spec(self.uri, self.capabilities, spec)
        if not _NAME.match(spec.name) or spec.name == STATE_PREFIX:
            raise StoreError(
                f"collection name {spec.name!r}: use letters, digits, _ . - (up to 128, not {STATE_PREFIX!r})",
                code="INVALID_COLLECTION",
            )
        want = layout_of(spec)
        if (self.path / spec.name / "edge_config.json").exists():
            have = self._layout(spec.name)
            if have != want:
                raise StoreError(
                    f"collection {spec.name!r} in {self.uri} was built with another layout ({describe(have)}), this "
                    f"config needs ({describe(want)}); use another --collection",
                    code="SCHEMA_MISMATCH",
                )
            return
        shard = self.root.create(spec.name, shard_config(spec, self.memory), want)
        for key in KEYWORD_INDEXES:
            keyword = qe.KeywordIndexParams(enable_hnsw=key in GRAPH_FIELDS)
            shard.update(qe.UpdateOperation.create_field_index(key, keyword))
        for key in INTEGER_INDEXES:
            integer = qe.IntegerIndexParams(lookup=True, range=True, enable_hnsw=False)
            shard.update(qe.UpdateOperation.create_field_index(key, integer))

    def list_collections(self) -> list[str]:
        return sorted(
            p.name for p in self.path.iterdir() if (p / "edge_config.json").exists() and p.name != STATE_PREFIX
        )

    def drop_collection(self, name: str) -> bool:
        self._layouts.pop(name, None)
        if not _NAME.match(name) or name == STATE_PREFIX:
            return False
        return self.root.drop(name)

    # -- writes --------------------------------------------------------------------------------------

    def upsert(self, collection: str, chunks: ChunkBatch | Sequence[ChunkRow]) -> int:
        batch, layout = as_batch(chunks), self._layout(collection)
        shard = self.root.shard(collection)
        for i in range(0, len(batch), BATCH):
            _write(shard, qe.UpdateOperation.upsert_points(_points(batch, i, min(i + BATCH, len(batch)), layout)))
        return len(batch)

    def delete(self, collection: str, ids: list[str]) -> int:
        shard = self.root.shard(collection)
        removed = 0
        for i in range(0, len(ids), 1000):
            pids: list[qe.PointId] = [point_id(x) for x in ids[i : i + 1000]]
            removed += len(shard.retrieve(pids, with_payload=False, with_vector=False))
            _write(shard, qe.UpdateOperation.delete_points(pids))
        return removed

    def delete_where(self, collection: str, where: Filter) -> int:
        shard = self.root.shard(collection)
        flt = to_edge(where)
        n = shard.count(qe.CountRequest(exact=True, filter=flt))
        _write(shard, qe.UpdateOperation.delete_points_by_filter(flt))
        return n

    # -- reads ---------------------------------------------------------------------------------------

    def ids_where(self, collection: str, where: Filter) -> set[str]:
        return {p.payload["id"] for p in _scroll(self.root.shard(collection), to_edge(where), ["id"]) if p.payload}

    def count(self, collection: str, where: Filter | None = None) -> int:
        self._layout(collection)
        flt = to_edge(where) if where is not None else None
        return self.root.shard(collection).count(qe.CountRequest(exact=True, filter=flt))

    def sources(self, collection: str) -> list[SourceCount]:
        points = _scroll(self.root.shard(collection), None, ["root", "source"])
        return source_counts([((p.payload or {}).get("root") or "", (p.payload or {}).get("source") or "") for p in points])  # fmt: skip

    def rows(self, collection: str, fields: list[str] | None = None) -> list[Record]:
        payload: bool | list[str] = ["id", *fields] if fields else True
        return [dict(p.payload or {}) for p in _scroll(self.root.shard(collection), None, payload)]

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        layout = self._layout(collection)
        shard = self.root.shard(collection)
        flt = combined(request.where, request.native)
        k, mode = request.top_k, request.mode
        if mode == "text" or (mode == "hybrid" and request.vector is None and request.text):
            return _query(
                shard, qe.QueryRequest(with_payload=True, limit=k, query=_lexical(request.text or ""), filter=flt)
            )
        if mode == "sparse":
            if request.sparse is None or not layout["sparse"]:
                raise StoreError("sparse search needs a sparse query and a collection with a sparse step", "INVALID_QUERY")  # fmt: skip
            q = qe.Query.Nearest(_terms(request.sparse), using="sparse")
            return _query(shard, qe.QueryRequest(with_payload=True, limit=k, query=q, filter=flt))
        if mode == "multivector":
            if request.multivector is None or not layout["colbert"]:
                raise StoreError("multivector search needs token vectors and a collection with them", "INVALID_QUERY")
            q = qe.Query.Nearest(_matrix(request.multivector), using="colbert")
            return _query(shard, qe.QueryRequest(with_payload=True, limit=k, query=q, filter=flt))
        if request.vector is None:
            raise StoreError(f"{mode} search needs a query vector", code="INVALID_QUERY")
        dense = qe.Query.Nearest(_dense(request.vector), using="dense")
        if mode == "dense" or not request.text:
            return _query(shard, qe.QueryRequest(with_payload=True, limit=k, query=dense, filter=flt))
        wide = depth(k)  # each ranking queried on its own and fused here (connectors/fusion.py): one meaning
        lists: list[tuple[Kind, qe.Query]] = [("dense", dense), ("text", _lexical(request.text))]
        if request.sparse is not None and layout["sparse"]:
            lists.append(("sparse", qe.Query.Nearest(_terms(request.sparse), using="sparse")))
        if request.multivector is not None and layout["colbert"]:
            lists.append(("multivector", qe.Query.Nearest(_matrix(request.multivector), using="colbert")))
        rankings = [
            Ranking(kind, _query(shard, qe.QueryRequest(with_payload=True, limit=wide, query=q, filter=flt)), wide)
            for kind, q in lists
        ]
        return fuse(request.text, rankings, k)

    def finalize(self, collection: str, changed: bool = True, rebuild: bool = False) -> Maintenance:
        """Run the optimiser as its thresholds plan (connectors/edge_config.py): index a new segment once it is
        large enough, merge small segments, drop deleted points past the threshold; each step is bounded by a
        segment's size, not the collection's. `rebuild` plans every segment with a deleted point, and merges
        the small ones, then goes back to the usual thresholds."""
        t0 = time.perf_counter()
        action = "none"
        if changed or rebuild:
            layout = self._layout(collection)
            with self.root.mu:
                if rebuild:
                    self.root.reconfigure(collection, retuned(layout, rebuild=True))
                did = self.root.shard(collection).optimize()
                if rebuild:
                    self.root.reconfigure(collection, retuned(layout, rebuild=False))
                if did:  # writes are in the WAL already; a flush of every segment costs ~1 s however little changed
                    self.root.shard(collection).flush()
            action = "rebuilt" if rebuild else ("incremental" if did else "none")
        return Maintenance(action, time.perf_counter() - t0, tuple(self.index_states(collection)))

    def index_states(self, collection: str) -> list[IndexState]:
        """The dense HNSW's coverage as the shard counts it (indexed vectors, less one sparse vector per point;
        deleted points still in a graph are counted until their segment is vacuumed), and the rest, which an
        exact scan answers for."""
        layout = self._layout(collection)
        info = self.root.shard(collection).info()
        per_point = 1 + (1 if layout["sparse"] else 0)  # sparse vectors (lexical, SPLADE) count as indexed
        dense = max(0, min(info.points_count, info.indexed_vectors_count - per_point * info.points_count))
        kind = f"HNSW ({info.segments_count} segments)"
        return [IndexState("dense", kind, dense, info.points_count - dense)]


def _write(shard: qe.EdgeShard, op: qe.UpdateOperation) -> None:
    try:
        shard.update(op)
    except Exception as e:  # noqa: BLE001 - the bindings raise a bare Exception (a wrong dimension, a full disk)
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise StoreError(f"Qdrant Edge refused the write: {first}", code="WRITE_FAILED") from None


def _query(shard: qe.EdgeShard, request: qe.QueryRequest) -> list[Hit]:
    try:
        points = shard.query(request)
    except Exception as e:  # noqa: BLE001 - e.g. a query vector of the wrong dimension
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise StoreError(f"Qdrant Edge search failed: {first}", code="SEARCH_FAILED") from None
    hits = []
    for p in points:
        meta = dict(p.payload or {})
        hits.append(Hit(id=meta.pop("id", str(p.id)), score=float(p.score), text=meta.pop("text", ""), metadata=meta))
    return hits


def _scroll(shard: qe.EdgeShard, flt: qe.Filter | None, payload: bool | list[str]) -> list[qe.Record]:
    out: list[qe.Record] = []
    offset = None
    while True:
        points, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=1000, filter=flt, with_payload=payload))
        out += points
        if offset is None:
            return out


def _points(batch: ChunkBatch, lo: int, hi: int, layout: Layout) -> list[qe.Point]:
    """Chunks lo..hi as Edge points, with as little Python per point as the binding allows.

    The BM25 term vectors of the whole slice are computed at once (`lexical.doc_vectors`); dense rows and term
    ids and weights are memoryview slices of one array each (see `_dense`), so a point costs a few slices, its
    id and its payload, which the binding converts value by value."""
    fields = batch.fields[lo:hi]
    dim = batch.dims
    dense = np.ascontiguousarray(batch.vectors[lo:hi], dtype=np.float32).reshape(-1).data
    terms = lexical.doc_vectors([f.get("text") or "" for f in fields])
    ids, weights = terms.indices.data, terms.values.astype(np.float32).data
    ends = terms.offsets.tolist()
    sparse = batch.sparse if layout["sparse"] else None
    multi = batch.multivectors if layout["colbert"] else None
    points = []
    for j, f in enumerate(fields):
        a, b = ends[j], ends[j + 1]
        vector: dict[str, qe.NamedVector] = {
            "dense": cast("list[float]", dense[j * dim : (j + 1) * dim]),
            "lexical": qe.SparseVector(cast("list[int]", ids[a:b]), cast("list[float]", weights[a:b])),
        }
        if sparse is not None:
            vector["sparse"] = _sparse(*sparse[lo + j])
        if multi is not None and len(tokens := multi[lo + j]):
            vector["colbert"] = _matrix(tokens)
        points.append(qe.Point(id=point_id(f["id"]), vector=vector, payload=payload_items(f)))
    return points


def _dense(row: npt.ArrayLike) -> list[float]:
    """A float32 vector as the binding reads it fastest: a memoryview over the array, no list built.

    The binding extracts any float sequence (a PyO3 `Vec<f32>`); a numpy array is read one numpy scalar at a
    time (twice the cost of a list), a memoryview yields plain floats straight from the buffer. Its stub names
    only `List[float]`, hence the cast.
    """
    return cast("list[float]", np.ascontiguousarray(row, dtype=np.float32).reshape(-1).data)


def _matrix(tokens: npt.ArrayLike) -> list[list[float]]:
    """Token vectors [tokens, dim] as the binding reads them: one memoryview per row (see `_dense`)."""
    return [_dense(row) for row in np.asarray(tokens, dtype=np.float32)]


def _sparse(indices: npt.ArrayLike, values: npt.ArrayLike) -> qe.SparseVector:
    """Term ids and weights as memoryviews over int32 / float32 arrays (see `_dense`)."""
    ids = np.ascontiguousarray(indices, dtype=np.int32).reshape(-1).data
    weights = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).data
    return qe.SparseVector(cast("list[int]", ids), cast("list[float]", weights))


def _terms(sp: lexical.SparseVector | SparseInput) -> qe.SparseVector:
    return _sparse(sp["indices"], sp["values"])


def _lexical(text: str) -> qe.Query:
    return qe.Query.Nearest(_terms(lexical.query_vector(text)), using="lexical")


class EdgeState:
    """The pipeline's state as points (no vectors) of the store's `shoal_state` shard."""

    def __init__(self, root: EdgeRoot) -> None:
        self.root = root
        with root.mu:
            if STATE_PREFIX in root.shards or (root.path / STATE_PREFIX / "edge_config.json").exists():
                self.shard = root.shard(STATE_PREFIX)
            else:
                config = qe.EdgeConfig(sparse_vectors={"none": qe.EdgeSparseVectorParams()})
                self.shard = root.create(STATE_PREFIX, config, {"state": True})
                for key in ("kind", "collection", "root"):
                    self.shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))

    def get(self, keys: list[str]) -> dict[str, Record]:
        if not keys:
            return {}
        got = self.shard.retrieve([point_id(k) for k in keys], with_payload=True, with_vector=False)
        return dict(_state_record(p) for p in got)

    def put(self, records: Mapping[str, Mapping[str, JSONLike]]) -> None:
        points = [
            qe.Point(id=point_id(k), vector={}, payload={
                "key": k, "kind": d["kind"], "collection": d.get("collection"), "root": d.get("root"),
                "doc": json.dumps(d, default=str)})
            for k, d in records.items()
        ]  # fmt: skip
        for i in range(0, len(points), BATCH):
            _write(self.shard, qe.UpdateOperation.upsert_points(points[i : i + BATCH]))

    def delete(self, keys: list[str]) -> None:
        if keys:
            _write(self.shard, qe.UpdateOperation.delete_points([point_id(k) for k in keys]))

    def scan(self, kind: str, collection: str | None = None, root: str | None = None) -> dict[str, Record]:
        must: list[Condition] = [qe.FieldCondition(key="kind", match=qe.MatchValue(kind))]
        for key, value in (("collection", collection), ("root", root)):
            if value is not None:
                must.append(qe.FieldCondition(key=key, match=qe.MatchValue(value)))
        return dict(_state_record(p) for p in _scroll(self.shard, qe.Filter(must=must), True))


def _state_record(point: qe.Record) -> tuple[str, Record]:
    """A state point's key and record; every state point is written with a payload and read with it."""
    if point.payload is None:
        raise StoreError(f"state point {point.id} in {STATE_PREFIX!r} has no payload")
    return point.payload["key"], json.loads(point.payload["doc"])

"""Qdrant server connector (and qdrant-client's deprecated local mode): named vectors, the Query API.

Vectors per point: `dense` (cosine), `lexical` (BM25 term weights computed locally, IDF applied by Qdrant),
`sparse` (a SPLADE step's output, IDF-free) and `colbert` (multivector, MaxSim; no HNSW graph). Hybrid queries
dense, lexical, sparse and `colbert` (when the query has them) and fuses them as every store does
(connectors/fusion.py).
"""

from __future__ import annotations

import atexit
import json
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from qdrant_client import QdrantClient, models

from connectors import lexical
from connectors.base import (
    INTEGER_INDEXES,
    KEYWORD_INDEXES,
    STATE_PREFIX,
    Capabilities,
    CollectionSpec,
    Hit,
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
from connectors.chunks import F32, ChunkBatch, ChunkRow, SparseInput, as_batch, payload_items
from connectors.filters import Filter
from connectors.fusion import Kind, Ranking, depth, fuse
from connectors.qdrant_filters import combined_filter, to_qdrant
from connectors.registry import StoreURL, parse_url

BATCH = 256

_LOCAL: dict[str, _Held] = {}  # path -> [client, users]: local mode allows one client per folder
_LOCAL_MU = threading.Lock()


class QdrantStore:
    """`qdrant://HOST:PORT/COLLECTION[?api_key=K&https=1&grpc=1]` or `qdrant+local://PATH` (local mode)."""

    capabilities = Capabilities(sparse=True, sparse_search=True, multivector=True, text=True, hybrid=True)

    def __init__(self, url: StoreURL | str) -> None:
        url = parse_url(url) if isinstance(url, str) else url
        self.uri, self.url = url.uri, url
        self.path = Path(url.path).expanduser().resolve() if url.local and url.path else None
        if self.path is not None:
            self.client = _open_local(self.path)
        else:
            self.client = QdrantClient(
                host=url.host, port=url.port or 6333, grpc_port=int(url.params.get("grpc_port", 6334)),
                prefer_grpc=url.flag("grpc"), https=url.flag("https"), api_key=url.params.get("api_key"),
                timeout=int(url.params.get("timeout", 30)), check_compatibility=False,
            )  # fmt: skip
            try:
                self.client.get_collections()
            except Exception as e:  # noqa: BLE001 - any failure to talk to the server is "unreachable"
                raise StoreError(
                    f"cannot reach Qdrant at {url.host}:{url.port or 6333}: {type(e).__name__}: {str(e)[:200]}",
                    code="STORE_UNREACHABLE",
                ) from None
        self._layouts: dict[str, Layout] = {}

    def state_dir(self) -> Path | None:
        return self.path

    def state_table(self) -> QdrantState:
        return QdrantState(self.client)

    def close(self) -> None:
        if self.path is not None:
            _close_local(self.path)
        else:
            self.client.close()

    # -- collections ---------------------------------------------------------------------------------

    def _layout(self, name: str) -> Layout:
        if name not in self._layouts:
            if not self.client.collection_exists(name):
                raise StoreError(f"no collection {name!r} in {self.uri}", code="NO_COLLECTION")
            params = self.client.get_collection(name).config.params
            vectors = params.vectors if isinstance(params.vectors, dict) else {}
            sparse = params.sparse_vectors or {}
            self._layouts[name] = {
                "dense": vectors["dense"].size if "dense" in vectors else None,
                "colbert": vectors["colbert"].size if "colbert" in vectors else None,
                "sparse": "sparse" in sparse,
                "lexical": "lexical" in sparse,
            }
        return self._layouts[name]

    def ensure_collection(self, spec: CollectionSpec) -> None:
        check_spec(self.uri, self.capabilities, spec)
        want = layout_of(spec)
        if self.client.collection_exists(spec.name):
            have = self._layout(spec.name)
            if have != want:
                raise StoreError(
                    f"collection {spec.name!r} in {self.uri} was built with another layout ({describe(have)}), "
                    f"this config needs ({describe(want)}); use another --collection or remove the old one",
                    code="SCHEMA_MISMATCH",
                )
            return
        vectors = {"dense": models.VectorParams(size=spec.dense_dim, distance=models.Distance.COSINE)}
        if spec.multivector_dim:
            vectors["colbert"] = models.VectorParams(
                size=spec.multivector_dim, distance=models.Distance.COSINE, hnsw_config=models.HnswConfigDiff(m=0),
                multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
            )  # fmt: skip
        sparse = {"lexical": models.SparseVectorParams(modifier=models.Modifier.IDF)}
        if spec.sparse:
            sparse["sparse"] = models.SparseVectorParams()
        self.client.create_collection(spec.name, vectors_config=vectors, sparse_vectors_config=sparse)
        with warnings.catch_warnings():  # local mode warns that payload indexes have no effect there
            warnings.simplefilter("ignore")
            for key in KEYWORD_INDEXES:
                self.client.create_payload_index(spec.name, key, models.PayloadSchemaType.KEYWORD)
            for key in INTEGER_INDEXES:
                self.client.create_payload_index(spec.name, key, models.PayloadSchemaType.INTEGER)
        self._layouts[spec.name] = want

    def list_collections(self) -> list[str]:
        names = [c.name for c in self.client.get_collections().collections]
        return sorted(n for n in names if not n.startswith(STATE_PREFIX))

    def drop_collection(self, name: str) -> bool:
        self._layouts.pop(name, None)
        if not self.client.collection_exists(name):
            return False
        self.client.delete_collection(name)
        return True

    # -- writes --------------------------------------------------------------------------------------

    def upsert(self, collection: str, chunks: ChunkBatch | Sequence[ChunkRow]) -> int:
        batch, layout = as_batch(chunks), self._layout(collection)
        for i in range(0, len(batch), BATCH):
            self.client.upsert(collection, points=_points(batch, i, i + BATCH, layout), wait=True)
        return len(batch)

    def delete(self, collection: str, ids: list[str]) -> int:
        removed = 0
        for i in range(0, len(ids), 1000):
            pids = [point_id(x) for x in ids[i : i + 1000]]
            removed += len(self.client.retrieve(collection, pids, with_payload=False, with_vectors=False))
            self.client.delete(collection, points_selector=models.PointIdsList(points=pids), wait=True)
        return removed

    def delete_where(self, collection: str, where: Filter) -> int:
        flt = to_qdrant(where)
        n = self.client.count(collection, count_filter=flt, exact=True).count
        self.client.delete(collection, points_selector=models.FilterSelector(filter=flt), wait=True)
        return n

    # -- reads ---------------------------------------------------------------------------------------

    def _scroll(self, collection: str, flt: models.Filter | None, payload: bool | list[str]) -> list[models.Record]:
        out: list[models.Record] = []
        offset: models.ExtendedPointId | None = None
        while True:
            points, offset = self.client.scroll(
                collection, scroll_filter=flt, limit=1000, offset=offset, with_payload=payload, with_vectors=False
            )
            out += points
            if offset is None:
                return out

    def ids_where(self, collection: str, where: Filter) -> set[str]:
        return {str(p.payload["id"]) for p in self._scroll(collection, to_qdrant(where), ["id"]) if p.payload}

    def count(self, collection: str, where: Filter | None = None) -> int:
        self._layout(collection)
        flt = to_qdrant(where) if where is not None else None
        return self.client.count(collection, count_filter=flt, exact=True).count

    def sources(self, collection: str) -> list[SourceCount]:
        points = self._scroll(collection, None, ["root", "source"])
        return source_counts([((p.payload or {}).get("root") or "", (p.payload or {}).get("source") or "") for p in points])  # fmt: skip

    def rows(self, collection: str, fields: list[str] | None = None) -> list[Record]:
        payload: bool | list[str] = ["id", *fields] if fields else True
        points = self._scroll(collection, None, payload)
        return [dict(p.payload or {}) for p in points]

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        layout = self._layout(collection)
        flt = combined_filter(request)
        k = request.top_k
        mode = request.mode
        if mode == "text" or (mode == "hybrid" and request.vector is None and request.text):
            query, using = _terms(lexical.query_vector(request.text or "")), "lexical"
            return self._query(collection, query=query, using=using, query_filter=flt, limit=k)
        if mode == "sparse":
            if request.sparse is None or not layout["sparse"]:
                raise StoreError(
                    "sparse search needs a sparse query and a collection with a sparse step", "INVALID_QUERY"
                )
            return self._query(collection, query=_terms(request.sparse), using="sparse", query_filter=flt, limit=k)
        if mode == "multivector":
            if request.multivector is None or not layout["colbert"]:
                raise StoreError("multivector search needs token vectors and a collection with them", "INVALID_QUERY")
            mv = np.asarray(request.multivector, dtype=np.float32)  # the client takes numpy queries
            return self._query(collection, query=mv, using="colbert", query_filter=flt, limit=k)
        if request.vector is None:
            raise StoreError(f"{mode} search needs a query vector", code="INVALID_QUERY")
        dense = np.asarray(request.vector, dtype=np.float32)
        if mode == "dense" or not request.text:
            return self._query(collection, query=dense, using="dense", query_filter=flt, limit=k)
        wide = depth(k)  # each ranking queried on its own and fused here (connectors/fusion.py): one meaning
        lists: list[tuple[Kind, F32 | models.SparseVector, str]] = [("dense", dense, "dense"), ("text", _terms(lexical.query_vector(request.text)), "lexical")]  # fmt: skip
        if request.sparse is not None and layout["sparse"]:
            lists.append(("sparse", _terms(request.sparse), "sparse"))
        if request.multivector is not None and layout["colbert"]:
            lists.append(("multivector", np.asarray(request.multivector, dtype=np.float32), "colbert"))
        rankings = [
            Ranking(kind, self._query(collection, query=q, using=using, query_filter=flt, limit=wide), wide)
            for kind, q, using in lists
        ]
        return fuse(request.text, rankings, k)

    def _query(
        self, collection: str, *, query: F32 | models.SparseVector, query_filter: models.Filter | None, limit: int,
        using: str | None = None,
    ) -> list[Hit]:  # fmt: skip
        try:
            res = self.client.query_points(
                collection, query=query, using=using, query_filter=query_filter, limit=limit,
                with_payload=True,
            )  # fmt: skip
        except (ValueError, KeyError) as e:
            raise StoreError(f"Qdrant search failed: {str(e).splitlines()[0][:300]}", code="SEARCH_FAILED") from None
        hits = []
        for p in res.points:
            meta = dict(p.payload or {})
            hits.append(
                Hit(id=meta.pop("id", str(p.id)), score=float(p.score), text=meta.pop("text", ""), metadata=meta)
            )
        return hits

    def finalize(self, collection: str, changed: bool = True, rebuild: bool = False) -> Maintenance:
        """Qdrant indexes as it goes (HNSW, payload indexes); nothing to do after a run."""
        return Maintenance("store")


def _points(batch: ChunkBatch, lo: int, hi: int, layout: Layout) -> models.Batch:
    """Chunks lo:hi as one Qdrant batch: each named vector a numpy matrix (or list of them), as the client takes it."""
    fields = batch.fields[lo:hi]
    terms = lexical.doc_vectors([f.get("text") or "" for f in fields])
    vectors: dict[str, F32 | list[F32] | list[models.SparseVector]] = {
        "dense": batch.vectors[lo:hi],
        "lexical": [_terms(terms[j]) for j in range(len(fields))],
    }
    if layout["sparse"] and batch.sparse is not None:
        sp = batch.sparse
        vectors["sparse"] = [_sparse(*sp[j]) for j in range(lo, lo + len(fields))]
    if layout["colbert"] and batch.multivectors is not None:
        vectors["colbert"] = [batch.multivectors[j] for j in range(lo, lo + len(fields))]
    ids: list[models.ExtendedPointId] = [point_id(f["id"]) for f in fields]
    return models.Batch(ids=ids, vectors=vectors, payloads=[payload_items(f) for f in fields])


def _sparse(indices: npt.ArrayLike, values: npt.ArrayLike) -> models.SparseVector:
    """A sparse vector as the client's model (which holds Python lists: converted at C speed here)."""
    return models.SparseVector(indices=np.asarray(indices).tolist(), values=np.asarray(values).tolist())


def _terms(sp: lexical.SparseVector | SparseInput) -> models.SparseVector:
    return _sparse(sp["indices"], sp["values"])


@dataclass
class _Held:
    """A local-mode client and how many stores use it."""

    client: QdrantClient
    users: int = 0


def _open_local(path: Path) -> QdrantClient:
    with _LOCAL_MU:
        entry = _LOCAL.get(str(path))
        if entry is None:
            try:
                path.mkdir(parents=True, exist_ok=True)
                entry = _LOCAL[str(path)] = _Held(QdrantClient(path=str(path)))
            except OSError as e:
                raise StoreError(f"cannot open {path}: {e.strerror or e}", "STORE_UNAVAILABLE") from None
            except RuntimeError as e:
                if "already accessed" in str(e):
                    raise StoreError(f"another process has {path} open (Qdrant local mode)", "STORE_LOCKED") from None
                raise
        entry.users += 1
        return entry.client


@atexit.register
def _close_all_local() -> None:
    """Close local-mode clients before the interpreter tears down (their finaliser fails late in shutdown)."""
    with _LOCAL_MU:
        for held in _LOCAL.values():
            held.client.close()
        _LOCAL.clear()


def _close_local(path: Path) -> None:
    with _LOCAL_MU:
        entry = _LOCAL.get(str(path))
        if entry is not None:
            entry.users -= 1
            if entry.users <= 0:
                entry.client.close()
                del _LOCAL[str(path)]


class QdrantState:
    """The pipeline's state as points (no vectors) of the `shoal_state` collection."""

    def __init__(self, client: QdrantClient) -> None:
        self.client = client
        if not client.collection_exists(STATE_PREFIX):
            client.create_collection(STATE_PREFIX, vectors_config={})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for key in ("kind", "collection", "root"):
                    client.create_payload_index(STATE_PREFIX, key, models.PayloadSchemaType.KEYWORD)

    def get(self, keys: list[str]) -> dict[str, Record]:
        got = self.client.retrieve(STATE_PREFIX, [point_id(k) for k in keys], with_payload=True) if keys else []
        return dict(_state_record(p) for p in got)

    def put(self, records: Mapping[str, Mapping[str, JSONLike]]) -> None:
        points = [
            models.PointStruct(id=point_id(k), vector={}, payload={
                "key": k, "kind": d["kind"], "collection": d.get("collection"), "root": d.get("root"),
                "doc": json.dumps(d, default=str)})
            for k, d in records.items()
        ]  # fmt: skip
        for i in range(0, len(points), BATCH):
            self.client.upsert(STATE_PREFIX, points=points[i : i + BATCH], wait=True)

    def delete(self, keys: list[str]) -> None:
        if keys:
            pids = [point_id(k) for k in keys]
            self.client.delete(STATE_PREFIX, points_selector=models.PointIdsList(points=pids), wait=True)

    def scan(self, kind: str, collection: str | None = None, root: str | None = None) -> dict[str, Record]:
        must = [models.FieldCondition(key="kind", match=models.MatchValue(value=kind))]
        for key, value in (("collection", collection), ("root", root)):
            if value is not None:
                must.append(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
        out: dict[str, Record] = {}
        offset = None
        while True:
            points, offset = self.client.scroll(
                STATE_PREFIX, scroll_filter=models.Filter(must=must), limit=1000, offset=offset, with_payload=True
            )
            out.update(_state_record(p) for p in points)
            if offset is None:
                return out


def _state_record(point: models.Record) -> tuple[str, Record]:
    """A state point's key and record; every state point is written with a payload and read with it."""
    if point.payload is None:
        raise StoreError(f"state point {point.id} in {STATE_PREFIX!r} has no payload")
    return point.payload["key"], json.loads(point.payload["doc"])

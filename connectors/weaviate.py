"""Weaviate connector (weaviate-client v4): named vectors `dense` and `colbert`, BM25 + vector fused by RRF here.

Chunk ids become deterministic object UUIDs (the chunk id itself is kept in `chunk_id`, as `id` is
reserved). Metadata are typed properties (exact-match `field` tokenization for filters, `word`
tokenization for the BM25 text); the entity map is kept as JSON in `entities_json` and filtered through
`entity_tags`. Writes use the batch importer and fail with the collected per-object errors.
No Weaviate server runs on the project's machine: the tests for this module run when WEAVIATE_URL is set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import weaviate
from weaviate.classes.config import Configure, DataType, Property, Tokenization, VectorDistances
from weaviate.classes.init import Auth
from weaviate.classes.query import Filter as WFilter
from weaviate.classes.query import MetadataQuery
from weaviate.collections import Collection
from weaviate.collections.classes.filters import FilterReturn, _Filters
from weaviate.collections.classes.internal import Object
from weaviate.collections.classes.types import WeaviateField, WeaviateProperties

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
    point_id,
    source_counts,
)
from connectors.chunks import ChunkBatch, ChunkFields, ChunkRow, as_batch
from connectors.filters import ENTITY, And, Cond, Filter, Or, Scalar, conditions, entity_tag, field_kind, matches
from connectors.fusion import Ranking, depth, fuse
from connectors.registry import StoreURL, parse_url

BATCH = 200
_TEXT = {"source", "root", "title", "kind", "doc_hash", "chunk_hash", "chunk_id"}
_INT = {"chunk_index", "n_tokens", "char_start", "char_end"}
_ARRAYS = {"heading_path": DataType.TEXT_ARRAY, "classes": DataType.TEXT_ARRAY, "entity_tags": DataType.TEXT_ARRAY}


def class_name(name: str) -> str:
    """Weaviate collection names start with a capital letter and hold letters, digits and `_`."""
    name = name.replace("-", "_")
    return name[:1].upper() + name[1:]


def chunk_properties() -> list[Property]:
    field = Tokenization.FIELD
    props = [Property(name="text", data_type=DataType.TEXT, tokenization=Tokenization.WORD)]
    props += [Property(name=n, data_type=DataType.TEXT, tokenization=field) for n in sorted(_TEXT)]
    props += [Property(name=n, data_type=DataType.INT) for n in sorted(_INT)]
    props += [
        Property(name="ingested_at", data_type=DataType.NUMBER),
        Property(name="pages", data_type=DataType.INT_ARRAY),
    ]
    props += [Property(name=n, data_type=t, tokenization=field) for n, t in _ARRAYS.items()]
    props.append(
        Property(name="entities_json", data_type=DataType.TEXT, index_filterable=False, index_searchable=False)
    )
    return props


class WeaviateStore:
    """`weaviate://HOST:PORT/Collection[?grpc_port=50051&api_key=K&https=1]`."""

    capabilities = Capabilities(sparse=False, sparse_search=False, multivector=True, text=True, hybrid=True)

    def __init__(self, url: StoreURL | str) -> None:
        url = parse_url(url) if isinstance(url, str) else url
        self.uri = url.uri
        key = url.params.get("api_key")
        try:
            self.client = weaviate.connect_to_custom(
                http_host=url.host or "localhost", http_port=url.port or 8080, http_secure=url.flag("https"),
                grpc_host=url.params.get("grpc_host", url.host or "localhost"),
                grpc_port=int(url.params.get("grpc_port", 50051)), grpc_secure=url.flag("https"),
                auth_credentials=Auth.api_key(key) if key else None,
            )  # fmt: skip
        except Exception as e:  # noqa: BLE001 - WeaviateStartUpError, connection errors, timeouts
            raise StoreError(
                f"cannot reach Weaviate at {url.host}:{url.port or 8080}: {str(e)[:200]}", code="STORE_UNREACHABLE"
            ) from None

    def state_dir(self) -> Path | None:
        return None

    def state_table(self) -> WeaviateState:
        return WeaviateState(self.client)

    def close(self) -> None:
        self.client.close()

    def _col(self, name: str) -> Collection[WeaviateProperties, None]:
        if not self.client.collections.exists(class_name(name)):
            raise StoreError(f"no collection {name!r} in {self.uri}", code="NO_COLLECTION")
        return self.client.collections.use(class_name(name))

    def ensure_collection(self, spec: CollectionSpec) -> None:
        check_spec(self.uri, self.capabilities, spec)
        want = {"shoal_dense_dim": spec.dense_dim, "shoal_colbert_dim": spec.multivector_dim}
        name = class_name(spec.name)
        if self.client.collections.exists(name):
            description = self.client.collections.use(name).config.get().description or "{}"
            try:
                have = {k: json.loads(description).get(k) for k in want}
            except (json.JSONDecodeError, AttributeError):
                have = {"description": description}
            if have != want:
                raise StoreError(
                    f"collection {name!r} in {self.uri} was built with another layout ({have}), this config needs "
                    f"({want}); use another --collection or remove the old one",
                    code="SCHEMA_MISMATCH",
                )
            return
        hnsw = Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE)
        vectors = [Configure.Vectors.self_provided(name="dense", vector_index_config=hnsw)]
        if spec.multivector_dim:
            vectors.append(Configure.MultiVectors.self_provided(name="colbert"))
        self.client.collections.create(
            name, description=json.dumps(want), properties=chunk_properties(), vector_config=vectors
        )

    def list_collections(self) -> list[str]:
        names = self.client.collections.list_all(simple=True)
        return sorted(n for n in names if not n.lower().startswith(STATE_PREFIX))

    def drop_collection(self, name: str) -> bool:
        if not self.client.collections.exists(class_name(name)):
            return False
        self.client.collections.delete(class_name(name))
        return True

    def upsert(self, collection: str, chunks: ChunkBatch | Sequence[ChunkRow]) -> int:
        chunk_batch, col = as_batch(chunks), self._col(collection)
        with col.batch.fixed_size(batch_size=BATCH) as batch:
            for i, fields in enumerate(chunk_batch.fields):
                vector: dict[str, Sequence[float] | Sequence[Sequence[float]]] = {
                    "dense": _vector(chunk_batch.vectors[i])
                }
                if chunk_batch.multivectors is not None and len(tokens := chunk_batch.multivectors[i]):
                    vector["colbert"] = [_vector(t) for t in tokens]
                batch.add_object(properties=to_properties(fields), uuid=point_id(fields["id"]), vector=vector)
        failed = col.batch.failed_objects
        if failed:
            raise StoreError(
                f"Weaviate refused {len(failed)} of {len(chunk_batch)} objects; first: {failed[0].message[:300]}",
                code="WRITE_FAILED",
            )
        return len(chunk_batch)

    def delete(self, collection: str, ids: list[str]) -> int:
        col, removed = self._col(collection), 0
        for i in range(0, len(ids), 1000):
            uuids = [point_id(x) for x in dict.fromkeys(ids[i : i + 1000])]
            removed += col.data.delete_many(where=WFilter.by_id().contains_any(uuids)).successful
        return removed

    def delete_where(self, collection: str, where: Filter) -> int:
        return self._col(collection).data.delete_many(where=to_weaviate(where)).successful

    def _iterate(self, collection: str, properties: list[str] | None) -> list[Record]:
        it = self._col(collection).iterator(return_properties=properties)
        return [from_properties(dict(o.properties)) for o in it]

    def ids_where(self, collection: str, where: Filter) -> set[str]:
        """Iterates the collection (filtered queries stop at Weaviate's result window; the iterator does not)."""
        needed = sorted({"entity_tags" if c.field.startswith(ENTITY) else _prop(c.field) for c in conditions(where)})
        return {str(r["id"]) for r in self._iterate(collection, ["chunk_id", *needed]) if matches(where, r)}

    def count(self, collection: str, where: Filter | None = None) -> int:
        flt = to_weaviate(where) if where is not None else None
        return self._col(collection).aggregate.over_all(total_count=True, filters=flt).total_count or 0

    def sources(self, collection: str) -> list[SourceCount]:
        rows = self._iterate(collection, ["root", "source"])
        return source_counts([(str(r.get("root") or ""), str(r.get("source") or "")) for r in rows])

    def rows(self, collection: str, fields: list[str] | None = None) -> list[Record]:
        props = ["chunk_id", *[_prop(f) for f in fields]] if fields else None
        return self._iterate(collection, props)

    def search(self, collection: str, request: SearchRequest) -> list[Hit]:
        col, k, flt = self._col(collection), request.top_k, _combined_filter(request)
        meta = MetadataQuery(score=True, distance=True)
        if request.mode == "sparse":
            raise StoreError("Weaviate has no sparse-vector search; use dense, text or hybrid", code="UNSUPPORTED")
        if request.mode == "text" or request.vector is None and request.mode == "hybrid":
            res = col.query.bm25(query=request.text or "", query_properties=["text"], limit=k, filters=flt, return_metadata=meta)  # fmt: skip
            return [_hit(o, o.metadata.score) for o in res.objects]
        if request.mode == "multivector":
            if request.multivector is None:
                raise StoreError("multivector search needs token vectors", code="INVALID_QUERY")
            mv = [_vector(t) for t in np.asarray(request.multivector, dtype=np.float32)]
            res = col.query.near_vector(near_vector=mv, target_vector="colbert", limit=k, filters=flt, return_metadata=meta)  # fmt: skip
            return [_hit(o, 1.0 - (o.metadata.distance or 0.0)) for o in res.objects]
        if request.vector is None:
            raise StoreError(f"{request.mode} search needs a query vector", code="INVALID_QUERY")
        vec = _vector(request.vector)
        if request.mode == "dense" or not request.text:
            res = col.query.near_vector(near_vector=vec, target_vector="dense", limit=k, filters=flt, return_metadata=meta)  # fmt: skip
            return [_hit(o, 1.0 - (o.metadata.distance or 0.0)) for o in res.objects]
        wide = depth(k)  # fused here, as every store does (connectors/fusion.py): one meaning for a score
        dense = col.query.near_vector(near_vector=vec, target_vector="dense", limit=wide, filters=flt, return_metadata=meta)  # fmt: skip
        words = col.query.bm25(query=request.text, query_properties=["text"], limit=wide, filters=flt, return_metadata=meta)  # fmt: skip
        ranked = [
            Ranking("dense", [_hit(o, 1.0 - (o.metadata.distance or 0.0)) for o in dense.objects], wide),
            Ranking("text", [_hit(o, o.metadata.score or 0.0) for o in words.objects], wide),
        ]
        return fuse(request.text, ranked, k)

    def finalize(self, collection: str, changed: bool = True, rebuild: bool = False) -> Maintenance:
        """Weaviate indexes as it goes; nothing to do after a run."""
        return Maintenance("store")


def _prop(field: str) -> str:
    return "chunk_id" if field == "id" else field


def _vector(row: npt.ArrayLike) -> Sequence[float]:
    """A float32 vector as the client takes it: a numpy array (it reads arrays itself, `weaviate.util.get_vector`);
    its annotation names only sequences of numbers."""
    return cast("Sequence[float]", np.asarray(row, dtype=np.float32).reshape(-1))


def to_properties(fields: ChunkFields) -> dict[str, WeaviateField]:
    props: dict[str, WeaviateField] = {
        k: p for k, v in fields.items() if k not in ("id", "entities") and (p := _property(v)) is not None
    }
    props["chunk_id"] = fields["id"]
    if fields.get("entities") is not None:
        props["entities_json"] = json.dumps(fields.get("entities"))
    return props


def _property(value: object) -> WeaviateField:
    """A chunk field as a Weaviate property: a scalar or a list of them (None for anything else)."""
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [str(v) for v in value]
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    return None


def from_properties(props: Mapping[str, object]) -> Record:
    out: Record = {k: _json(v) for k, v in props.items() if v is not None and k not in ("chunk_id", "entities_json")}
    chunk_id = props.get("chunk_id")
    out["id"] = chunk_id if isinstance(chunk_id, str) else None
    entities = props.get("entities_json")
    if isinstance(entities, str) and entities:
        out["entities"] = json.loads(entities)
    return out


def _json(value: object) -> JSONValue:
    """A Weaviate property as JSON: scalars as they are, arrays as lists, anything else as text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return str(value)


def _hit(obj: Object[WeaviateProperties, None], score: float | None) -> Hit:
    meta = from_properties(obj.properties)
    text = meta.pop("text", "")
    return Hit(
        id=str(meta.pop("id")), score=float(score or 0.0), text=text if isinstance(text, str) else "", metadata=meta
    )


def to_weaviate(f: Filter) -> FilterReturn:
    """A portable filter as Weaviate filter objects."""
    if isinstance(f, And):
        return WFilter.all_of([to_weaviate(x) for x in f.items])
    if isinstance(f, Or):
        return WFilter.any_of([to_weaviate(x) for x in f.items])
    return _cond(f)


def _cond(c: Cond) -> FilterReturn:
    key, values = _prop(c.field), c.values
    if c.field.startswith(ENTITY):
        key, values = "entity_tags", tuple(entity_tag(c.field, v) for v in values)
    prop = WFilter.by_property(key)
    many = _sequence(values)
    if (field_kind(c.field) or "").endswith("_list"):
        if c.op == "in":
            return prop.contains_any(many)
        return prop.contains_any(_sequence(values[:1])) if c.op == "eq" else prop.contains_none(_sequence(values[:1]))
    if c.op == "in":
        return prop.contains_any(many)
    value = values[0]
    return {
        "eq": prop.equal, "ne": prop.not_equal, "gt": prop.greater_than, "gte": prop.greater_or_equal,
        "lt": prop.less_than, "lte": prop.less_or_equal,
    }[c.op](value)  # fmt: skip


def _sequence(values: tuple[Scalar, ...]) -> list[str] | list[int] | list[float] | list[bool]:
    """A condition's values as the one-typed list Weaviate's filters take (a field holds one type)."""
    if all(isinstance(v, str) for v in values):
        return [str(v) for v in values]
    if all(isinstance(v, bool) for v in values):
        return [bool(v) for v in values]
    if all(isinstance(v, int) for v in values):
        return [int(v) for v in values]
    return [float(v) for v in values]


def _combined_filter(request: SearchRequest) -> FilterReturn | None:
    parts = [to_weaviate(request.where)] if request.where is not None else []
    if request.native is not None:
        if isinstance(request.native, str | dict):
            raise StoreError(
                "Weaviate's native filter is a weaviate.classes.query.Filter object (from the SDK); use --where",
                code="INVALID_FILTER",
            )
        if not isinstance(request.native, _Filters):
            raise StoreError(
                "Weaviate's native filter is a weaviate.classes.query.Filter object", code="INVALID_FILTER"
            )
        parts.append(request.native)
    return None if not parts else parts[0] if len(parts) == 1 else WFilter.all_of(parts)


class WeaviateState:
    """The pipeline's state as objects (no vectors) of the `Shoal_state` collection."""

    def __init__(self, client: weaviate.WeaviateClient) -> None:
        name = class_name(STATE_PREFIX)
        if not client.collections.exists(name):
            field = Tokenization.FIELD
            props = [Property(name=n, data_type=DataType.TEXT, tokenization=field) for n in ("key", "kind", "collection", "root")]  # fmt: skip
            props.append(Property(name="doc", data_type=DataType.TEXT, index_filterable=False, index_searchable=False))
            client.collections.create(name, properties=props, vector_config=Configure.Vectors.self_provided())
        self.col = client.collections.use(name)

    def get(self, keys: list[str]) -> dict[str, Record]:
        out: dict[str, Record] = {}
        for i in range(0, len(keys), 1000):
            part = [point_id(k) for k in keys[i : i + 1000]]
            res = self.col.query.fetch_objects(filters=WFilter.by_id().contains_any(part), limit=len(part))
            out.update(_state_record(o.properties) for o in res.objects)
        return out

    def put(self, records: Mapping[str, Mapping[str, JSONLike]]) -> None:
        with self.col.batch.fixed_size(batch_size=BATCH) as batch:
            for k, d in records.items():
                props: dict[str, WeaviateField] = {
                    "key": k,
                    "doc": json.dumps(d, default=str),
                    **{f: v for f in ("kind", "collection", "root") if isinstance(v := d.get(f), str) and v},
                }
                batch.add_object(properties=props, uuid=point_id(k))
        if self.col.batch.failed_objects:
            raise StoreError(f"Weaviate refused state: {self.col.batch.failed_objects[0].message}", "WRITE_FAILED")

    def delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            self.col.data.delete_many(where=WFilter.by_id().contains_any([point_id(k) for k in keys[i : i + 1000]]))

    def scan(self, kind: str, collection: str | None = None, root: str | None = None) -> dict[str, Record]:
        want = {"kind": kind, "collection": collection, "root": root}
        out: dict[str, Record] = {}
        for o in self.col.iterator(return_properties=["key", "kind", "collection", "root", "doc"]):
            p = o.properties
            if all(v is None or p.get(f) == v for f, v in want.items()):
                key, record = _state_record(p)
                out[key] = record
        return out


def _state_record(props: Mapping[str, object]) -> tuple[str, Record]:
    """A state object's key and record (the record is kept as JSON in `doc`)."""
    key, doc = props.get("key"), props.get("doc")
    if not isinstance(key, str) or not isinstance(doc, str):
        raise StoreError(f"a {STATE_PREFIX!r} object without its key and doc", "STORE_CORRUPT")
    return key, json.loads(doc)

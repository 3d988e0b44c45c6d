"""A chunk batch as the Arrow table LanceDB writes: the chunk schema of a collection, and vector columns that
wrap the batch's float32 arrays (no Python lists of floats)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from connectors.base import CollectionSpec
from connectors.chunks import F32, VECTOR_KEYS, ChunkBatch, ChunkFields

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


def arrow_batch(batch: ChunkBatch, schema: pa.Schema) -> pa.Table:
    """A batch as an Arrow table of a chunk schema: each vector column wraps its flat float32 array as it is."""
    n = len(batch)
    vectors = {"vector": _fixed(batch.vectors)}
    if batch.multivectors is not None:
        mv = batch.multivectors
        vectors["multivector"] = pa.ListArray.from_arrays(pa.array(mv.offsets.astype(np.int32)), _fixed(mv.values))
    if batch.sparse is not None:
        sp = batch.sparse
        offsets = pa.array(sp.offsets.astype(np.int32))
        parts = [pa.ListArray.from_arrays(offsets, pa.array(sp.indices)), pa.ListArray.from_arrays(offsets, pa.array(sp.values))]  # fmt: skip
        vectors["sparse"] = pa.StructArray.from_arrays(parts, names=["indices", "values"])
    fields = pa.schema([f for f in schema if f.name not in VECTOR_KEYS])
    meta = pa.Table.from_pylist([_arrow_fields(f) for f in batch.fields], schema=fields)
    columns = [
        (vectors[f.name].cast(f.type) if f.name in vectors else pa.nulls(n, f.type))
        if f.name in VECTOR_KEYS
        else meta.column(f.name)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _fixed(matrix: F32) -> pa.FixedSizeListArray:
    """A float32 [n, dims] matrix as an Arrow fixed-size-list array over the same buffer."""
    flat = np.ascontiguousarray(matrix, dtype=np.float32).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), int(matrix.shape[1]))


def _arrow_fields(fields: ChunkFields) -> dict[str, object]:
    """A chunk's fields as Arrow rows them: the entity map as (label, texts) pairs."""
    out: dict[str, object] = dict(fields)
    if "entities" in fields:
        out["entities"] = list(fields["entities"].items())
    return out

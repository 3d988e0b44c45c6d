"""The Qdrant Edge shard configuration shoal writes: named vectors, optimiser thresholds and memory placement.

Optimiser thresholds keep maintenance proportional to what changed. Segments are bounded (`SEGMENT_POINTS`
points of the dense size), so a merge or a vacuum rewrites and re-indexes one bounded segment, never the whole
collection; up to `SEGMENTS` segments are kept before the smallest are merged, so a run's new segment is not
folded into a large one; a segment gets its HNSW graph from `INDEXING_POINTS` points (below that an exact scan
of it costs less than a graph); deleted points are dropped, and their segment re-indexed, past
`DELETED_FRACTION` of it (amortised: a re-written point costs 1 / DELETED_FRACTION points of index build).

Memory (`qdrant+edge://PATH?memory=disk`): vectors and the HNSW graph stay on disk (memory-mapped, paged in
as searches touch them) and an 8-bit scalar-quantised copy of the dense vectors is kept in RAM to search
(rescored against the full vectors); payload is always on disk. The default (`memory=ram`) keeps the vectors
and graph in RAM. The placement is fixed when a collection is created.
"""

from __future__ import annotations

from typing import Literal

import qdrant_edge as qe

from connectors.base import CollectionSpec, Layout, StoreError

SEGMENT_POINTS = 131_072
SEGMENTS = 8
INDEXING_POINTS = 20_000
DELETED_FRACTION = 0.3
MemoryMode = Literal["ram", "disk"]


def memory_mode(value: str | None) -> MemoryMode:
    """The `memory=` option of a store URL: ram (the default) or disk."""
    if value in (None, "", "ram"):
        return "ram"
    if value == "disk":
        return "disk"
    raise StoreError(f"memory={value!r}: use memory=ram (the default) or memory=disk", code="INVALID_URL")


def optimizers(dense_dim: int, rebuild: bool = False) -> qe.EdgeOptimizersConfig:
    """The thresholds above (in KB of dense vectors, as Qdrant counts them); `rebuild` makes every segment with a
    deleted point, and every mergeable small one, planned for rewriting and re-indexing."""
    kb = dense_dim * 4 / 1024  # one dense float32 vector
    return qe.EdgeOptimizersConfig(
        deleted_threshold=0.0 if rebuild else DELETED_FRACTION,
        vacuum_min_vector_number=1 if rebuild else 1000,
        default_segment_number=1 if rebuild else SEGMENTS,
        max_segment_size=max(1, int(SEGMENT_POINTS * kb)),
        indexing_threshold=max(1, int(INDEXING_POINTS * kb)),
    )


def retuned(layout: Layout, rebuild: bool) -> qe.EdgeConfig:
    """An existing shard's config with other optimiser thresholds: its vectors named as they are (what is
    left unset, placement included, stays as stored)."""
    dim = layout["dense"] or 1
    vectors = {"dense": qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)}
    if layout["colbert"]:
        vectors["colbert"] = qe.EdgeVectorParams(
            size=layout["colbert"], distance=qe.Distance.Cosine,
            multivector_config=qe.MultiVectorConfig(comparator=qe.MultiVectorComparator.MaxSim),
        )  # fmt: skip
    sparse = {"lexical": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
    if layout["sparse"]:
        sparse["sparse"] = qe.EdgeSparseVectorParams()
    return qe.EdgeConfig(vectors=vectors, sparse_vectors=sparse, optimizers=optimizers(dim, rebuild))


def shard_config(spec: CollectionSpec, memory: MemoryMode) -> qe.EdgeConfig:
    """A new collection's shard: dense (cosine, HNSW), optional ColBERT (MaxSim, no graph), lexical and SPLADE."""
    disk = memory == "disk"
    hnsw = qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10000, memory=qe.Memory.Cold) if disk else None  # fmt: skip
    quant = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True) if disk else None
    vectors = {
        "dense": qe.EdgeVectorParams(
            size=spec.dense_dim, distance=qe.Distance.Cosine, hnsw_config=hnsw, quantization_config=quant,
            memory=qe.Memory.Cold if disk else None,
        )
    }  # fmt: skip
    if spec.multivector_dim:
        vectors["colbert"] = qe.EdgeVectorParams(
            size=spec.multivector_dim, distance=qe.Distance.Cosine,
            multivector_config=qe.MultiVectorConfig(comparator=qe.MultiVectorComparator.MaxSim),
            hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10000),
            memory=qe.Memory.Cold if disk else None,
        )  # fmt: skip
    sparse = {"lexical": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
    if spec.sparse:
        sparse["sparse"] = qe.EdgeSparseVectorParams()
    return qe.EdgeConfig(
        vectors=vectors, sparse_vectors=sparse, optimizers=optimizers(spec.dense_dim), payload_memory=qe.Memory.Cold
    )

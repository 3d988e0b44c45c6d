"""The chunks one upsert writes: their fields, and their vectors as arrays (a float32 matrix, never float lists).

A batch holds every dense vector in one float32 [n, dims] matrix, every chunk's token vectors (late
interaction) in one float32 [tokens, dim] matrix with offsets, and sparse vectors as flat index and weight
arrays with offsets: the forms Arrow, numpy and the stores' clients read without a Python float per value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NotRequired, Required, TypedDict

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
Offsets = npt.NDArray[np.int64]  # [n + 1]: row i is [offsets[i], offsets[i + 1])
VECTOR_KEYS = ("vector", "multivector", "sparse")


class ChunkFields(TypedDict, total=False):
    """The stored fields of one chunk besides its vectors (the payload / metadata / columns of a store)."""

    id: Required[str]
    text: str
    root: str
    source: str
    title: str | None
    kind: str
    chunk_index: int
    chunk_hash: str
    doc_hash: str
    pages: list[int]
    heading_path: list[str]
    char_start: int
    char_end: int
    n_tokens: int
    ingested_at: float
    entities: dict[str, list[str]]  # label -> the distinct texts found
    entity_tags: list[str]  # "label:text", what entity filters match
    classes: list[str]


class SparseInput(TypedDict):
    """One sparse vector as given: its term ids and their weights (lists or arrays)."""

    indices: npt.ArrayLike
    values: npt.ArrayLike


class ChunkRow(ChunkFields, total=False):
    """One chunk as a single dict (tests, benchmarks, callers writing by hand): its fields and its vectors."""

    vector: NotRequired[npt.ArrayLike]  # [dims]
    multivector: NotRequired[npt.ArrayLike]  # [tokens, dim]
    sparse: NotRequired[SparseInput]


@dataclass(frozen=True)
class TokenVectors:
    """Token vectors of many chunks in one float32 [tokens, dim] matrix; chunk i's are rows offsets[i]:offsets[i+1]."""

    values: F32
    offsets: Offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> F32:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def stack(cls, matrices: Sequence[npt.ArrayLike], dim: int | None = None) -> TokenVectors:
        """One chunk's [tokens, dim] matrix each, in order."""
        parts = [np.asarray(m, dtype=np.float32).reshape(-1, dim or np.shape(m)[-1]) for m in matrices]
        width = dim or (parts[0].shape[1] if parts else 0)
        values = np.concatenate(parts) if parts else np.empty((0, width), dtype=np.float32)
        return cls(values, _offsets([len(p) for p in parts]))

    @classmethod
    def concat(cls, batches: Sequence[TokenVectors]) -> TokenVectors:
        return cls(np.concatenate([b.values for b in batches]), _joined([b.offsets for b in batches]))


@dataclass(frozen=True)
class SparseVectors:
    """Sparse vectors of many chunks as flat int32 term ids and float32 weights; chunk i's are offsets[i]:offsets[i+1]."""

    indices: I32
    values: F32
    offsets: Offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> tuple[I32, F32]:
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.indices[lo:hi], self.values[lo:hi]

    @classmethod
    def stack(cls, vectors: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]]) -> SparseVectors:
        """One chunk's (term ids, weights) each, in order."""
        ids = [np.asarray(i, dtype=np.int32).reshape(-1) for i, _ in vectors]
        weights = [np.asarray(w, dtype=np.float32).reshape(-1) for _, w in vectors]
        empty_i, empty_w = np.empty(0, dtype=np.int32), np.empty(0, dtype=np.float32)
        return cls(
            np.concatenate(ids) if ids else empty_i,
            np.concatenate(weights) if weights else empty_w,
            _offsets([len(i) for i in ids]),
        )

    @classmethod
    def concat(cls, batches: Sequence[SparseVectors]) -> SparseVectors:
        indices = np.concatenate([b.indices for b in batches])
        return cls(indices, np.concatenate([b.values for b in batches]), _joined([b.offsets for b in batches]))


@dataclass(frozen=True)
class ChunkBatch:
    """Chunks to write: one fields dict each, their dense vectors as one float32 [n, dims] matrix, and the
    token vectors and sparse vectors of the steps that made them (None without such a step)."""

    fields: list[ChunkFields]
    vectors: F32  # [n, dims]
    multivectors: TokenVectors | None = None
    sparse: SparseVectors | None = None

    def __post_init__(self) -> None:
        n = len(self.fields)
        if self.vectors.ndim != 2 or len(self.vectors) != n:
            raise ValueError(f"a batch of {n} chunks needs a [{n}, dims] vector matrix, not {self.vectors.shape}")
        for name, part in (("multivectors", self.multivectors), ("sparse", self.sparse)):
            if part is not None and len(part) != n:
                raise ValueError(f"a batch of {n} chunks has {len(part)} {name}")

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def dims(self) -> int:
        return int(self.vectors.shape[1])

    @classmethod
    def from_rows(cls, rows: Sequence[ChunkRow]) -> ChunkBatch:
        """Row dicts (each with its `vector`, optional `multivector` and `sparse`) as a batch.

        A row without a `multivector` or `sparse` in a batch whose other rows have one holds none (no token
        vectors, no terms)."""
        fields = [_fields(r) for r in rows]
        if not rows:
            return cls(fields, np.empty((0, 0), dtype=np.float32))
        vectors = np.stack([np.asarray(r["vector"], dtype=np.float32).reshape(-1) for r in rows])
        multi = sparse = None
        if any(r.get("multivector") is not None for r in rows):
            given = [r.get("multivector") for r in rows]
            dim = next(np.shape(m)[-1] for m in given if m is not None)
            multi = TokenVectors.stack([np.empty((0, dim)) if m is None else m for m in given], dim)
        if any(r.get("sparse") is not None for r in rows):
            given_sparse = [r.get("sparse") for r in rows]
            sparse = SparseVectors.stack([(s["indices"], s["values"]) if s else ((), ()) for s in given_sparse])
        return cls(fields, vectors, multi, sparse)

    @classmethod
    def concat(cls, batches: Sequence[ChunkBatch]) -> ChunkBatch:
        """Several batches as one (the writer joins the files it writes together)."""
        if len(batches) == 1:
            return batches[0]
        multi = [b.multivectors for b in batches if b.multivectors is not None]
        sparse = [b.sparse for b in batches if b.sparse is not None]
        if len(multi) not in (0, len(batches)) or len(sparse) not in (0, len(batches)):
            raise ValueError("batches joined into one write must have the same vector kinds")
        return cls(
            [f for b in batches for f in b.fields],
            np.concatenate([b.vectors for b in batches]),
            TokenVectors.concat(multi) if multi else None,
            SparseVectors.concat(sparse) if sparse else None,
        )


def as_batch(chunks: ChunkBatch | Sequence[ChunkRow]) -> ChunkBatch:
    """What an upsert was given, as a batch (row dicts are gathered into arrays once, here)."""
    return chunks if isinstance(chunks, ChunkBatch) else ChunkBatch.from_rows(chunks)


def _fields(row: ChunkRow) -> ChunkFields:
    fields = row.copy()
    fields.pop("vector", None)
    fields.pop("multivector", None)
    fields.pop("sparse", None)
    return fields


def _offsets(lengths: Sequence[int]) -> Offsets:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _joined(offsets: Sequence[Offsets]) -> Offsets:
    """Offsets of consecutive ragged batches as the offsets of one."""
    parts, base = [np.zeros(1, dtype=np.int64)], 0
    for o in offsets:
        parts.append(o[1:] + base)
        base += int(o[-1])
    return np.concatenate(parts)


def payload_items(fields: Mapping[str, object]) -> dict[str, object]:
    """The fields a store keeps as payload: every set one."""
    return {k: v for k, v in fields.items() if v is not None}

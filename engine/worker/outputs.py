"""Shaping one task's outputs for the wire: sentence vectors (engine.model.heads), output dtypes, sparse maps."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from engine.errors import InvalidInput
from engine.model.heads import Sparse, sentence_vectors
from engine.tasks.results import DenseVector, MultiVector, SparseVector
from engine.tasks.task import OUTPUT_DTYPES, EncodeParams


def quantize(x: npt.NDArray[np.float32], dtype: str) -> npt.NDArray[np.generic]:
    """float32 rows -> the requested wire dtype. int8 scales [-1, 1] to [-127, 127]; uint8 maps each row's
    [min, max] to [0, 255] (as SIE does); binary and ubinary pack the sign bits, 8 dimensions a byte."""
    if dtype == "float32":
        return x.astype(np.float32, copy=False)
    if dtype == "float16":
        return x.astype(np.float16)
    if dtype == "int8":
        return np.clip(np.rint(x * 127.0), -127, 127).astype(np.int8)
    if dtype == "uint8":
        low, high = x.min(axis=-1, keepdims=True), x.max(axis=-1, keepdims=True)
        span = np.where(high > low, high - low, 1.0)
        return np.rint((x - low) / span * 255.0).astype(np.uint8)
    if dtype in ("binary", "ubinary"):
        return np.packbits(x > 0, axis=-1)
    raise InvalidInput(f"output_dtype must be one of {list(OUTPUT_DTYPES)}, got {dtype!r}")


def dense(params: EncodeParams, pooled: torch.Tensor) -> list[DenseVector]:
    """One request's pooled rows [n, hidden] -> truncated, normalised, quantised wire entries."""
    x = sentence_vectors(pooled, params.dimensions, params.normalize)  # [n, dims]
    values = quantize(x.numpy(), params.output_dtype)
    return [{"dims": int(x.shape[1]), "dtype": params.output_dtype, "values": row} for row in values]


def multivector(params: EncodeParams, rows: list[torch.Tensor]) -> list[MultiVector]:
    dtype = params.output_dtype
    return [
        {
            "token_dims": int(r.shape[1]),
            "num_tokens": int(r.shape[0]),
            "dtype": dtype,
            "values": quantize(r.numpy(), dtype),
        }
        for r in rows
    ]


def sparse(rows: list[Sparse], vocab_size: int) -> list[SparseVector]:
    return [{"dims": vocab_size, "dtype": "float32", "indices": ids, "values": vals} for ids, vals in rows]

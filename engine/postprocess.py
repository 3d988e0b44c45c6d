"""Output shaping after pooling: Matryoshka truncation, renormalisation and output dtypes."""

from __future__ import annotations

import numpy as np
import torch

from engine.errors import InvalidInput

OUTPUT_DTYPES = ("float32", "float16", "int8", "binary")


def truncate_dims(x: torch.Tensor, dims: int | None, full: int) -> torch.Tensor:
    """Keep the first `dims` dimensions (Matryoshka). x: [B, full] -> [B, dims]."""
    if dims is None or dims == full:
        return x
    if not 0 < dims <= full:
        raise InvalidInput(f"dimensions must be between 1 and {full}, got {dims}")
    return x[:, :dims]


def quantize(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 rows -> the requested wire dtype. int8 scales [-1, 1] to [-127, 127]; binary packs sign bits."""
    if dtype == "float32":
        return x.astype(np.float32, copy=False)
    if dtype == "float16":
        return x.astype(np.float16)
    if dtype == "int8":
        return np.clip(np.rint(x * 127.0), -127, 127).astype(np.int8)
    if dtype == "binary":
        return np.packbits(x > 0, axis=-1)
    raise InvalidInput(f"output_dtype must be one of {list(OUTPUT_DTYPES)}, got {dtype!r}")

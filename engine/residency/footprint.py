"""A model's footprint before it loads: tensor bytes from safetensors headers plus an activation reserve."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import torch

from engine.catalogue.inference import read_json

SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files a disk load reads in full."""
    return sorted(folder.glob("*.safetensors")) + sorted(folder.glob("[0-9]*_Dense/model.safetensors"))


def header_bytes(folder: Path, dtype: torch.dtype) -> int:
    """Bytes the checkpoint's float tensors take once cast to `dtype`, read from safetensors headers only."""
    size = torch.tensor([], dtype=dtype).element_size()
    total = 0
    for f in weight_files(folder):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            numel = 1
            for d in meta["shape"]:
                numel *= int(d)
            is_float = meta["dtype"] in ("F64", "F32", "F16", "BF16")
            total += numel * (size if is_float else SAFETENSORS_BYTES.get(meta["dtype"], 4))
    return total


def activation_reserve(config: dict[str, Any], max_batch_tokens: int, max_len: int, dtype: torch.dtype) -> int:
    """Peak activation bytes of one forward batch: per token the layer's live tensors (x, q, k, v, attention
    out, residual, MLP up) plus one sequence's attention matrix, plus the float32 output."""
    hidden = int(config.get("hidden_size", 768))
    inter = int(config.get("intermediate_size", 4 * hidden))
    heads = int(config.get("num_attention_heads", 12))
    size = torch.tensor([], dtype=dtype).element_size()
    per_token = (6 * hidden + inter) * size + 4 * hidden
    return max_batch_tokens * per_token + heads * max_len * max_len * 4


PICKLED = "pytorch_model.bin"  # GLiNER checkpoints (read with weights_only): no header to read, so its size counts


def encoder_config(folder: Path) -> dict[str, Any]:
    """config.json, or a GLiNER folder's encoder config (inside gliner_config.json); {} when neither is there."""
    config = read_json(folder / "config.json")
    if isinstance(config, dict):
        return config
    gliner = read_json(folder / "gliner_config.json")
    encoder = gliner.get("encoder_config") if isinstance(gliner, dict) else None
    return encoder if isinstance(encoder, dict) else {}


def estimate(folder: Path, max_batch_tokens: int, max_len: int, dtype: torch.dtype) -> tuple[int, int]:
    """(tensor bytes, activation reserve) of a model before loading it."""
    weights = header_bytes(folder, dtype)
    if not weights and (folder / PICKLED).is_file():  # float32 on disk, scaled to the dtype it will take
        weights = (folder / PICKLED).stat().st_size * torch.tensor([], dtype=dtype).element_size() // 4
    return weights, activation_reserve(encoder_config(folder), max_batch_tokens, max_len, dtype)


def disk_bytes(folder: Path) -> int:
    pickled = [folder / PICKLED] if (folder / PICKLED).is_file() and not weight_files(folder) else []
    return sum(f.stat().st_size for f in weight_files(folder) + pickled)


def total_memory(device: str) -> int:
    """Total bytes of the device's memory (CUDA) or of this machine's RAM."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))

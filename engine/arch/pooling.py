"""Pooling and normalisation over a packed batch, as separate composable steps."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.arch.layers import PackedBatch


def cls_pool(hidden: Tensor, batch: PackedBatch) -> Tensor:
    """First token of each sequence. [T, H] -> [B, H]."""
    return hidden[batch.cu_seqlens[:-1].long()]


def last_pool(hidden: Tensor, batch: PackedBatch) -> Tensor:
    """Last real token of each sequence. [T, H] -> [B, H]."""
    return hidden[batch.cu_seqlens[1:].long() - 1]


def mean_pool(hidden: Tensor, batch: PackedBatch) -> Tensor:
    """Mean over each sequence's tokens. [T, H] -> [B, H]."""
    lengths = batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]  # [B]
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=hidden.device), lengths.long())
    sums = torch.zeros(len(lengths), hidden.shape[1], dtype=hidden.dtype, device=hidden.device)
    sums.index_add_(0, segment, hidden)  # [B, H]
    return sums / lengths.unsqueeze(1).to(hidden.dtype)


POOLERS = {"cls": cls_pool, "mean": mean_pool, "last": last_pool}


def l2_normalize(x: Tensor) -> Tensor:
    """Unit length along the last dimension."""
    return F.normalize(x, p=2.0, dim=-1)

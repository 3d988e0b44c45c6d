"""Shared blocks over the packed layout: a batch is one [total_tokens, hidden] tensor plus cu_seqlens."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:  # flash-attn is optional; used only on CUDA tensors
    from flash_attn import flash_attn_varlen_func
except ImportError:  # pragma: no cover - absent on CPU machines
    flash_attn_varlen_func = None


@dataclass
class PackedBatch:
    """Sequences laid end to end: no padding anywhere."""

    input_ids: Tensor  # [T] int64, all tokens of all sequences
    positions: Tensor  # [T] int64, position of each token inside its own sequence
    token_type_ids: Tensor  # [T] int64
    cu_seqlens: Tensor  # [B+1] int32, sequence b is tokens cu_seqlens[b]:cu_seqlens[b+1]
    max_seqlen: int

    @classmethod
    def from_token_lists(cls, seqs: list[list[int]], device: str | torch.device = "cpu") -> PackedBatch:
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int32)
        cu = torch.zeros(len(seqs) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(lengths, 0)
        ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
        positions = torch.cat([torch.arange(n) for n in lengths.tolist()])
        return cls(
            input_ids=ids.to(device),
            positions=positions.to(device),
            token_type_ids=torch.zeros_like(ids).to(device),
            cu_seqlens=cu.to(device),
            max_seqlen=int(lengths.max()) if len(seqs) else 0,
        )

    @property
    def lengths(self) -> list[int]:
        return (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).tolist()

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


def varlen_attention(q: Tensor, k: Tensor, v: Tensor, batch: PackedBatch, causal: bool = False) -> Tensor:
    """Attention inside each sequence only. q, k, v: [T, heads, head_dim] -> [T, heads, head_dim]."""
    if flash_attn_varlen_func is not None and q.is_cuda:
        cu = batch.cu_seqlens
        return flash_attn_varlen_func(q, k, v, cu, cu, batch.max_seqlen, batch.max_seqlen, causal=causal)
    out = torch.empty_like(q)
    bounds = batch.cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        # one sequence: [L, H, D] -> [1, H, L, D] for SDPA, with no mask because nothing is padded
        qs, ks, vs = (t[start:end].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
        out[start:end] = o.squeeze(0).transpose(0, 1)
    return out


class SelfAttention(nn.Module):
    """Multi-head self-attention over a packed batch (query/key/value/output projections)."""

    def __init__(self, hidden: int, heads: int, bias: bool = True) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden, bias=bias)
        self.key = nn.Linear(hidden, hidden, bias=bias)
        self.value = nn.Linear(hidden, hidden, bias=bias)
        self.out = nn.Linear(hidden, hidden, bias=bias)

    def forward(self, x: Tensor, batch: PackedBatch) -> Tensor:
        t = x.shape[0]  # x: [T, hidden]
        q = self.query(x).view(t, self.heads, self.head_dim)  # [T, H, D]
        k = self.key(x).view(t, self.heads, self.head_dim)
        v = self.value(x).view(t, self.heads, self.head_dim)
        o = varlen_attention(q, k, v, batch)  # [T, H, D]
        return self.out(o.reshape(t, -1))  # [T, hidden]


ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}


class MLP(nn.Module):
    """Position-wise feed-forward: up-project, activation, down-project."""

    def __init__(self, hidden: int, intermediate: int, activation: str = "gelu", bias: bool = True) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unsupported activation {activation!r}")
        self.act = ACTIVATIONS[activation]
        self.up = nn.Linear(hidden, intermediate, bias=bias)
        self.down = nn.Linear(intermediate, hidden, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.up(x)))  # [T, hidden] -> [T, intermediate] -> [T, hidden]


class PostNormBlock(nn.Module):
    """The original transformer block (BERT): residual then LayerNorm, after attention and after the MLP."""

    def __init__(self, hidden: int, heads: int, intermediate: int, activation: str, eps: float) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.mlp = MLP(hidden, intermediate, activation)
        self.mlp_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: Tensor, batch: PackedBatch) -> Tensor:
        x = self.attn_norm(x + self.attn(x, batch))  # [T, hidden]
        return self.mlp_norm(x + self.mlp(x))

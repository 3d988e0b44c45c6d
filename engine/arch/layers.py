"""Shared blocks over the packed layout: a batch is one [total_tokens, hidden] tensor plus cu_seqlens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.arch import cpu_kernels
from engine.arch.linear import FusedLinear, linear_plus

try:  # flash-attn is optional; used only on CUDA tensors
    from flash_attn import flash_attn_varlen_func  # type: ignore[import-not-found]
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
    # [B] int32 or None: only the first key_lengths[b] tokens of sequence b serve as attention keys
    # (ColBERT query expansion tokens are computed but not attended to). None: every token is a key.
    key_lengths: Tensor | None = None

    @classmethod
    def from_token_lists(
        cls,
        seqs: list[list[int]],
        device: str | torch.device = "cpu",
        type_ids: list[list[int]] | None = None,
        key_lengths: list[int] | None = None,
    ) -> PackedBatch:
        # No Python loop over tokens: chain and torch.tensor walk the lists in C; positions are computed.
        lengths = torch.tensor(list(map(len, seqs)), dtype=torch.int32)
        cu = torch.zeros(len(seqs) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(lengths, 0)
        ids = torch.tensor(list(chain.from_iterable(seqs)), dtype=torch.long)
        starts = torch.repeat_interleave(cu[:-1].long(), lengths.long())  # [T] first token of each token's sequence
        positions = torch.arange(ids.numel(), dtype=torch.long) - starts
        types = (
            torch.tensor(list(chain.from_iterable(type_ids)), dtype=torch.long) if type_ids else torch.zeros_like(ids)
        )
        keys = None
        if key_lengths is not None and key_lengths != lengths.tolist():
            keys = torch.tensor(key_lengths, dtype=torch.int32).to(device)
        return cls(
            input_ids=ids.to(device),
            positions=positions.to(device),
            token_type_ids=types.to(device),
            cu_seqlens=cu.to(device),
            max_seqlen=int(lengths.max()) if len(seqs) else 0,
            key_lengths=keys,
        )

    def with_filler(self, total: int) -> PackedBatch:
        """This batch with one more sequence of filler tokens (id 0, position 0) making it `total` tokens long;
        every real sequence, and what it attends to, is unchanged. `total` must not be below num_tokens."""
        extra = total - self.num_tokens
        if extra <= 0:
            return self
        pad = self.input_ids.new_zeros(extra)  # [extra] int64
        keys = self.key_lengths
        if keys is not None:  # the filler's tokens are all keys
            keys = torch.cat([keys, keys.new_tensor([extra])])
        return PackedBatch(
            input_ids=torch.cat([self.input_ids, pad]),
            positions=torch.cat([self.positions, pad]),
            token_type_ids=torch.cat([self.token_type_ids, pad]),
            cu_seqlens=torch.cat([self.cu_seqlens, self.cu_seqlens.new_tensor([total])]),
            max_seqlen=max(self.max_seqlen, extra),
            key_lengths=keys,
        )

    def segment_ids(self) -> Tensor:
        """[T] index of the sequence each token belongs to."""
        lengths = (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).long()
        return torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)

    @property
    def lengths(self) -> list[int]:
        return (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).tolist()

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


def token_bucket(n: int) -> int:
    """n rounded up to one of 16 sizes per power of two from 256 on; smaller counts are left as they are.

    oneDNN builds (JIT-compiles) a kernel for every row count it meets and caches it: a linear layer's first call
    with a new count ran at under half the speed of later ones in bf16 on AMX (about 0.8x in float32). A server's
    large batches have a new token count almost every time, so on AMX they are padded to these sizes (at most
    1/16 more rows, about 3% on average) and the cached kernels serve them (engine/model/packed.py decides
    where). Below 256 tokens (one or a few sentences) the counts repeat anyway, and a filler sequence would cost
    more than it saves."""
    if n < 256:
        return n
    step = 1 << (n.bit_length() - 5)  # [2^k, 2^(k+1)) in steps of 2^(k-4)
    return -(-n // step) * step


def _flash(q: Tensor, k: Tensor, v: Tensor, batch: PackedBatch, causal: bool, window: int | None) -> Tensor:
    """flash-attn's varlen kernel; keys may be a per-sequence prefix (key_lengths)."""
    cu_q = cu_k = batch.cu_seqlens
    max_k = batch.max_seqlen
    if batch.key_lengths is not None:  # keep only each sequence's leading key tokens
        keep = batch.positions < batch.key_lengths[batch.segment_ids()]
        k, v = k[keep], v[keep]
        cu_k = F.pad(torch.cumsum(batch.key_lengths, 0, dtype=torch.int32), (1, 0))
        max_k = int(batch.key_lengths.max())
    size = (window, window) if window is not None else (-1, -1)
    return flash_attn_varlen_func(q, k, v, cu_q, cu_k, batch.max_seqlen, max_k, causal=causal, window_size=size)


def varlen_attention(
    q: Tensor, k: Tensor, v: Tensor, batch: PackedBatch, causal: bool = False, window: int | None = None
) -> Tensor:
    """Attention inside each sequence only. q: [T, H, D], k/v: [T, KV, D] (KV divides H) -> [T, H, D].

    causal: a token sees only itself and earlier tokens. window: a token sees tokens at most `window`
    positions away on either side (ModernBERT's local layers). Fewer KV heads than query heads is GQA.
    """
    if flash_attn_varlen_func is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        return _flash(q, k, v, batch, causal, window)  # flash-attn takes half precision only
    gqa = k.shape[1] != q.shape[1]
    if cpu_kernels.usable(q, causal, window, gqa):  # bf16 on AVX512-BF16 CPUs: one call for the whole batch
        return cpu_kernels.varlen_attention_bf16(q, k, v, batch.cu_seqlens, batch.key_lengths)
    out = torch.empty_like(q)
    if batch.key_lengths is None:  # sequences of equal length share one SDPA call, still without padding
        for start, n, length in equal_length_runs(batch):
            end = start + n * length
            # n sequences of one length: [n*L, H, D] -> [n, H, L, D]
            qs, ks, vs = (t[start:end].view(n, length, t.shape[1], t.shape[2]).transpose(1, 2) for t in (q, k, v))
            mask = _window_mask(length, length, window, q.device)
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
            out[start:end] = o.transpose(1, 2).reshape(n * length, q.shape[1], q.shape[2])
        return out
    bounds = batch.cu_seqlens.tolist()
    keys = batch.key_lengths.tolist()
    for b, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        n_keys = keys[b]
        # one sequence: [L, H, D] -> [1, H, L, D]; keys are its first n_keys tokens
        qs = q[start:end].transpose(0, 1).unsqueeze(0)
        ks, vs = (t[start : start + n_keys].transpose(0, 1).unsqueeze(0) for t in (k, v))
        mask = _window_mask(end - start, n_keys, window, q.device)
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
        out[start:end] = o.squeeze(0).transpose(0, 1)
    return out


def _window_mask(n_queries: int, n_keys: int, window: int | None, device: torch.device) -> Tensor | None:
    """[L, n_keys] True where a query may see a key (|i - j| <= window); None when there is no window."""
    if window is None:
        return None
    distance = torch.arange(n_queries, device=device)[:, None] - torch.arange(n_keys, device=device)
    return distance.abs() <= window


def equal_length_runs(batch: PackedBatch) -> list[tuple[int, int, int]]:
    """(first token, number of sequences, length) for each run of consecutive equal-length sequences."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    for length in batch.lengths:
        if runs and runs[-1][2] == length:
            first, n, _ = runs[-1]
            runs[-1] = (first, n + 1, length)
        else:
            runs.append((start, 1, length))
        start += length
    return runs


class RMSNorm(nn.Module):
    """Root-mean-square norm without bias, computed in float32 (Llama, Qwen)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Rotary(nn.Module):
    """Rotary position embedding tables: position -> (cos, sin), each [T, 1, head_dim]. No weights."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=positions.device).float()
        inv_freq = 1.0 / (self.theta ** (exponents / self.head_dim))  # [D/2]
        freqs = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
        angles = torch.cat([freqs, freqs], dim=-1)[:, None, :]  # [T, 1, D]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """Rotate pairs (x_i, x_{i+D/2}) by each token's angle. x: [T, heads, D]."""
    cos, sin = rope
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class SelfAttention(nn.Module):
    """Self-attention over a packed batch: query/key/value/output projections.

    kv_heads < heads is grouped-query attention; head_dim may differ from hidden // heads (Qwen3);
    qk_norm_eps adds per-head RMSNorm on queries and keys (Qwen3); rotary is applied when the caller
    passes (cos, sin); causal and window choose the attention pattern.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        bias: bool = True,
        *,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        qk_norm_eps: float | None = None,
        causal: bool = False,
        window: int | None = None,
    ) -> None:
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.head_dim = head_dim or hidden // heads
        self.causal, self.window = causal, window
        self.query = FusedLinear(hidden, self.heads * self.head_dim, bias=bias)
        self.key = FusedLinear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.value = FusedLinear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.out = FusedLinear(self.heads * self.head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, qk_norm_eps) if qk_norm_eps else None
        self.k_norm = RMSNorm(self.head_dim, qk_norm_eps) if qk_norm_eps else None

    def forward(
        self, x: Tensor, batch: PackedBatch, rope: tuple[Tensor, Tensor] | None = None, residual: Tensor | None = None
    ) -> Tensor:
        """Attention over `x` [T, hidden], plus `residual` when given (added inside the output projection)."""
        t = x.shape[0]  # x: [T, hidden]
        q = self.query(x).view(t, self.heads, self.head_dim)  # [T, H, D]
        k = self.key(x).view(t, self.kv_heads, self.head_dim)  # [T, KV, D]
        v = self.value(x).view(t, self.kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = apply_rotary(q, rope), apply_rotary(k, rope)
        o = varlen_attention(q, k, v, batch, causal=self.causal, window=self.window).reshape(t, -1)  # [T, H*D]
        return self.out(o) if residual is None else linear_plus(self.out, o, residual)  # [T, hidden]


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}


class MLP(nn.Module):
    """Position-wise feed-forward: up-project, activation, down-project."""

    def __init__(self, hidden: int, intermediate: int, activation: str = "gelu", bias: bool = True) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unsupported activation {activation!r}")
        self.activation, self.act = activation, ACTIVATIONS[activation]
        self.up = FusedLinear(hidden, intermediate, bias=bias)
        self.down = FusedLinear(intermediate, hidden, bias=bias)

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        """[T, hidden] -> [T, hidden], plus `residual` when given (added inside the down projection)."""
        up = self.up  # an Int8Linear in an int8 profile: then no fused activation
        h = up.with_activation(x, self.activation) if isinstance(up, FusedLinear) else None
        if h is None:
            h = self.act(up(x))  # [T, hidden] -> [T, intermediate]
        return self.down(h) if residual is None else linear_plus(self.down, h, residual)  # [T, hidden]


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (the same parameters and checkpoints) whose bfloat16 CPU forward runs shoal's kernel
    (engine/arch/cpu_kernels.py) where it is built: torch's own ran bfloat16 3x slower than it could."""

    def forward(self, x: Tensor) -> Tensor:
        if self.weight is not None and len(self.normalized_shape) == 1 and cpu_kernels.norm_usable(x):
            return cpu_kernels.layer_norm_bf16(x, self.weight, self.bias, self.eps)  # [..., H]
        return super().forward(x)


class PostNormBlock(nn.Module):
    """The original transformer block (BERT): residual then LayerNorm, after attention and after the MLP."""

    def __init__(self, hidden: int, heads: int, intermediate: int, activation: str, eps: float) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.attn_norm = LayerNorm(hidden, eps=eps)
        self.mlp = MLP(hidden, intermediate, activation)
        self.mlp_norm = LayerNorm(hidden, eps=eps)

    def forward(self, x: Tensor, batch: PackedBatch, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        x = self.attn_norm(self.attn(x, batch, rope, residual=x))  # [T, hidden]
        return self.mlp_norm(self.mlp(x, residual=x))


class GatedMLP(nn.Module):
    """Gated feed-forward (SwiGLU with silu, GeGLU with gelu): down(act(gate(x)) * up(x))."""

    def __init__(self, hidden: int, intermediate: int, activation: str = "silu", bias: bool = False) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unsupported activation {activation!r}")
        self.act = ACTIVATIONS[activation]
        self.gate = FusedLinear(hidden, intermediate, bias=bias)
        self.up = FusedLinear(hidden, intermediate, bias=bias)
        self.down = FusedLinear(intermediate, hidden, bias=bias)

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        """[T, hidden] -> [T, hidden], plus `residual` when given (added inside the down projection)."""
        h = self.act(self.gate(x)) * self.up(x)  # [T, intermediate]
        return self.down(h) if residual is None else linear_plus(self.down, h, residual)  # [T, hidden]


class PreNormBlock(nn.Module):
    """The modern block (ModernBERT, Llama, Qwen): normalise, attend, add; normalise, feed forward, add."""

    def __init__(self, attn: SelfAttention, mlp: MLP | GatedMLP, attn_norm: nn.Module, mlp_norm: nn.Module) -> None:
        super().__init__()
        self.attn_norm, self.attn = attn_norm, attn
        self.mlp_norm, self.mlp = mlp_norm, mlp

    def forward(self, x: Tensor, batch: PackedBatch, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        x = self.attn(self.attn_norm(x), batch, rope, residual=x)  # [T, hidden]
        return self.mlp(self.mlp_norm(x), residual=x)

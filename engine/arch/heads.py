"""Heads over a backbone's packed hidden states: classifier, MLM logits, ColBERT / BGE-M3 projections.

Each head is a small module with its own checkpoint weights; the maths that turns its output into a
served result (SPLADE pooling, BGE-M3 term weights, MaxSim) lives here too, as plain functions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from engine.arch.layers import ACTIVATIONS, LayerNorm, PackedBatch
from engine.arch.pooling import POOLERS


class ClassifierHead(nn.Module):
    """Sequence classification: pool, optionally dense -> activation (-> LayerNorm), then out to the labels.

    BERT: cls, dense+tanh (the pooler), out. XLM-R: cls, dense+tanh, out_proj. ModernBERT: cls or mean,
    dense+gelu+LayerNorm, out. Decoders: last token, out without bias.
    """

    def __init__(
        self,
        hidden: int,
        labels: int,
        pooling: str,
        activation: str | None = None,
        *,
        norm_eps: float | None = None,
        norm_bias: bool = True,
        dense_bias: bool = True,
        out_bias: bool = True,
    ) -> None:
        super().__init__()
        self.pool = POOLERS[pooling]
        self.act = ACTIVATIONS[activation] if activation else None
        self.dense = nn.Linear(hidden, hidden, bias=dense_bias) if activation else None
        self.norm = LayerNorm(hidden, eps=norm_eps, bias=norm_bias) if norm_eps else None
        self.out = nn.Linear(hidden, labels, bias=out_bias)

    def forward(self, hidden: Tensor, batch: PackedBatch) -> Tensor:
        x = self.pool(hidden, batch)  # [B, H]
        if self.dense is not None and self.act is not None:
            x = self.act(self.dense(x))
        if self.norm is not None:
            x = self.norm(x)
        return self.out(x)  # [B, labels]


class MLMHead(nn.Module):
    """Masked-language-model head: dense -> activation -> LayerNorm -> decoder to vocabulary logits."""

    def __init__(
        self,
        hidden: int,
        vocab: int,
        activation: str,
        norm_eps: float,
        *,
        norm_bias: bool = True,
        dense_bias: bool = True,
        decoder_bias: bool = True,
    ) -> None:
        super().__init__()
        self.act = ACTIVATIONS[activation]
        self.dense = nn.Linear(hidden, hidden, bias=dense_bias)
        self.norm = LayerNorm(hidden, eps=norm_eps, bias=norm_bias)
        self.decoder = nn.Linear(hidden, vocab, bias=decoder_bias)  # weight usually tied to the embeddings

    def forward(self, hidden: Tensor) -> Tensor:
        return self.decoder(self.norm(self.act(self.dense(hidden))))  # [n, H] -> [n, vocab]


class TokenLogitHead(nn.Module):
    """A causal LM's output rows for a few tokens (Qwen3-Reranker reads the 'yes' and 'no' logits)."""

    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, hidden))  # lm_head, often tied to the embeddings

    def forward(self, hidden: Tensor, token_ids: list[int]) -> Tensor:
        return hidden @ self.weight[token_ids].T  # [B, H] -> [B, len(token_ids)]


class Projection(nn.Module):
    """A linear map of every token vector: ColBERT's projection to its token dim, BGE-M3's term weight."""

    def __init__(self, hidden: int, dim: int, bias: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.proj(hidden)  # [T, H] -> [T, dim]


def splade_pool(mlm: MLMHead, hidden: Tensor, batch: PackedBatch) -> Tensor:
    """SPLADE: max over each sequence's tokens of log(1 + relu(MLM logits)). -> [B, vocab].

    One sequence at a time, so the [tokens, vocab] logits never exist for the whole batch at once.
    """
    bounds = batch.cu_seqlens.tolist()
    rows = [torch.log1p(torch.relu(mlm(hidden[s:e]))).amax(dim=0) for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
    return torch.stack(rows)


def term_weights(token_ids: Tensor, weights: Tensor, skip: set[int]) -> tuple[Tensor, Tensor]:
    """BGE-M3 sparse: each distinct token's largest weight, special tokens dropped, zeros dropped.

    token_ids, weights: [L] of one sequence -> (sorted vocabulary ids, weights).
    """
    keep = weights > 0
    if skip:
        keep &= ~torch.isin(token_ids, torch.tensor(sorted(skip), device=token_ids.device))
    ids, inverse = torch.unique(token_ids[keep], return_inverse=True)
    best = torch.zeros(len(ids), dtype=weights.dtype, device=weights.device)
    best.scatter_reduce_(0, inverse, weights[keep], reduce="amax", include_self=False)
    return ids, best


def maxsim(query: Tensor, doc: Tensor) -> Tensor:
    """Late interaction: each query token's best match among the document tokens, summed. [q, d], [n, d] -> []."""
    return (query @ doc.T).amax(dim=1).sum()

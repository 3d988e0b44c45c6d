"""Useful FLOPs of one packed forward pass, per family, from its typed config: linear layers plus attention.

Useful means the work the model defines on real tokens: no padding, and attention only over the (query, key)
pairs a token may see (all of its sequence; earlier tokens when causal; a window for ModernBERT's local
layers). One multiply-add is 2 FLOPs. Embedding look-ups, norms, activations and pooling are not counted
(they are a few FLOPs per value, not per weight); heads are not counted either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.arch.bert import BertConfig
from engine.arch.configs import BackboneConfig
from engine.arch.decoder import DecoderConfig
from engine.arch.modernbert import ModernBertConfig


@dataclass(frozen=True)
class Shape:
    """What the count needs from a config: the sizes of every matrix a layer multiplies by."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    gated: bool  # gate, up and down projections (SwiGLU / GeGLU) instead of up and down
    causal: bool
    windows: tuple[int | None, ...]  # per layer: attention window on either side, None for the whole sequence


@dataclass(frozen=True)
class FlopCount:
    linear: int
    attention: int
    tokens: int

    @property
    def total(self) -> int:
        return self.linear + self.attention


def shape_of(config: BackboneConfig) -> Shape:
    """The shape of a BERT / XLM-R, ModernBERT or decoder config."""
    if isinstance(config, BertConfig):
        h, n = config.hidden_size, config.num_attention_heads
        layers = config.num_hidden_layers
        return Shape(h, layers, n, n, h // n, config.intermediate_size, False, False, (None,) * layers)
    if isinstance(config, ModernBertConfig):
        h, n = config.hidden_size, config.num_attention_heads
        windows = tuple(config.local_attention // 2 if t == "sliding_attention" else None for t in config.layer_types)
        return Shape(h, config.num_hidden_layers, n, n, h // n, config.intermediate_size, True, False, windows)
    if isinstance(config, DecoderConfig):
        h, n = config.hidden_size, config.num_attention_heads
        kv, d = config.num_key_value_heads or n, config.head_dim or h // n
        layers = config.num_hidden_layers
        return Shape(h, layers, n, kv, d, config.intermediate_size, True, True, (None,) * layers)
    raise TypeError(f"no FLOP count for {type(config).__name__}")


def linear_flops_per_token(s: Shape) -> int:
    """2 x (weights every token multiplies by): q, k, v, out projections and the MLP, over all layers."""
    attention = s.hidden * s.heads * s.head_dim * 2 + s.hidden * s.kv_heads * s.head_dim * 2  # q, out; k, v
    mlp = s.hidden * s.intermediate * (3 if s.gated else 2)
    return 2 * s.layers * (attention + mlp)


def attention_pairs(length: int, causal: bool, window: int | None) -> int:
    """(query, key) pairs one sequence's attention scores: L^2, L(L+1)/2 causal, or |i - j| <= window."""
    if causal:
        return length * (length + 1) // 2
    if window is None or length <= window + 1:
        return length * length
    return length * length - (length - window - 1) * (length - window)  # minus the pairs farther than window


def forward_flops(config: BackboneConfig, lengths: Iterable[int]) -> FlopCount:
    """Useful FLOPs of a forward pass over sequences of these lengths (each QK^T and PV score pair costs
    2 x head_dim FLOPs per head)."""
    s = shape_of(config)
    lengths = list(lengths)
    tokens = sum(lengths)
    attention = 0
    for window in s.windows:
        pairs = sum(attention_pairs(n, s.causal, window) for n in lengths)
        attention += 4 * pairs * s.heads * s.head_dim
    return FlopCount(linear_flops_per_token(s) * tokens, attention, tokens)


def linear_shapes(config: BackboneConfig) -> list[tuple[int, int]]:
    """(in, out) of each distinct matrix one layer multiplies every token by, with repeats: the shapes a
    matmul benchmark should use to stand for this model."""
    s = shape_of(config)
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    mlp = [(s.hidden, s.intermediate)] * (2 if s.gated else 1) + [(s.intermediate, s.hidden)]
    return [(s.hidden, q), (s.hidden, kv), (s.hidden, kv), (q, s.hidden), *mlp]

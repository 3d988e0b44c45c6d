"""FLOP counting from the config, checked against values worked out by hand and against torch's own counter."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from engine.arch import linear
from engine.arch.bert import Bert, BertConfig
from engine.arch.decoder import DecoderConfig
from engine.arch.flops import attention_pairs, forward_flops, linear_shapes
from engine.arch.layers import PackedBatch
from engine.arch.modernbert import ModernBertConfig


def tiny_bert() -> BertConfig:
    return BertConfig(vocab_size=100, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16)


def test_bert_by_hand() -> None:
    # per token per layer: q, k, v, out = 4 x 8 x 8 = 256 multiply-adds; MLP up + down = 2 x 8 x 16 = 256
    # -> 512 MACs = 1,024 FLOPs; 2 layers x 8 tokens (lengths 3 and 5) -> 16,384 FLOPs
    # attention per layer: score pairs 3^2 + 5^2 = 34; QK^T and PV cost 2 x 2 x head_dim (4) per pair and head
    # (2 heads) -> 4 x 34 x 2 x 4 = 1,088; 2 layers -> 2,176
    count = forward_flops(tiny_bert(), [3, 5])
    assert (count.linear, count.attention, count.total, count.tokens) == (16_384, 2_176, 18_560, 8)


def test_decoder_gqa_causal_by_hand() -> None:
    c = DecoderConfig(
        vocab_size=50,
        hidden_size=8,
        intermediate_size=12,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=4,
    )
    # q: 8 -> 4 x 4 = 128 MACs, k and v: 8 -> 2 x 4 = 64 each, out: 16 -> 8 = 128; gated MLP 3 x 8 x 12 = 288
    # -> 672 MACs = 1,344 FLOPs per token, x 4 tokens = 5,376
    # causal pairs for L = 4: 4 x 5 / 2 = 10 -> 4 x 10 x 4 heads x 4 = 640
    count = forward_flops(c, [4])
    assert (count.linear, count.attention) == (5_376, 640)


def test_modernbert_window_by_hand() -> None:
    c = ModernBertConfig(
        vocab_size=50,
        hidden_size=8,
        intermediate_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        local_attention=2,  # a window of 1 on either side
        layer_types=["full_attention", "sliding_attention"],
    )
    # per layer: 4 x 64 = 256 + gated 3 x 8 x 8 = 192 -> 448 MACs = 896 FLOPs; x 2 layers x 4 tokens = 7,168
    # pairs: full 16; window 1 on L = 4: the diagonal 4 plus 3 neighbours on each side = 10
    # -> 4 x (16 + 10) x 2 heads x 4 = 832
    count = forward_flops(c, [4])
    assert (count.linear, count.attention) == (7_168, 832)
    assert attention_pairs(4, False, 1) == 10 and attention_pairs(3, False, 5) == 9


def test_bert_count_matches_torch_flop_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real packed forward, counted by torch (its matmuls, attention through SDPA's math path); runs of
    equal-length sequences attend without a mask, so torch counts exactly the useful work. torch's counter
    does not know oneDNN's linear op (engine/arch/linear.py), so the linear layers take addmm here: the same
    matmuls."""
    monkeypatch.setattr(linear, "ENABLED", False)
    c = tiny_bert()
    model = Bert(c).eval()
    batch = PackedBatch.from_token_lists([[1, 2, 3], [4, 5, 6, 7, 8], [9, 10, 11, 12, 13]])
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(batch)
    assert counter.get_total_flops() == forward_flops(c, [3, 5, 5]).total


def test_linear_shapes() -> None:
    assert linear_shapes(tiny_bert()) == [(8, 8), (8, 8), (8, 8), (8, 8), (8, 16), (16, 8)]

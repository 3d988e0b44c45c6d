"""Packed attention equals plain per-sequence softmax attention, including runs of equal-length sequences;
batches padded to a token bucket leave their real tokens unchanged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from engine.arch.bert import Bert, BertConfig
from engine.arch.layers import PackedBatch, equal_length_runs, token_bucket, varlen_attention


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, window: int | None) -> torch.Tensor:
    """One sequence, float64, written out: q [L, H, D], k/v [L, KV, D]."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.shape[-1])  # [H, L, L]
    i = torch.arange(q.shape[0])[:, None]
    j = torch.arange(q.shape[0])[None, :]
    allowed = torch.ones(q.shape[0], q.shape[0], dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= (i - j).abs() <= window
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hij,jhd->ihd", scores.softmax(-1), v)


LENGTHS = [1, 1, 4, 4, 4, 9, 2, 2, 9]


@pytest.mark.parametrize(
    ("causal", "window", "kv_heads"), [(False, None, 4), (True, None, 2), (False, 2, 4), (True, 3, 1)]
)
def test_varlen_attention_matches_naive(causal: bool, window: int | None, kv_heads: int) -> None:
    torch.manual_seed(0)
    batch = PackedBatch.from_token_lists([[1] * n for n in LENGTHS])
    t = batch.num_tokens
    q = torch.randn(t, 4, 8)
    k = torch.randn(t, kv_heads, 8)
    v = torch.randn(t, kv_heads, 8)
    got = varlen_attention(q, k, v, batch, causal=causal, window=window)
    bounds = batch.cu_seqlens.tolist()
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        want = naive(q[s:e], k[s:e], v[s:e], causal, window)
        assert (got[s:e].double() - want).abs().max().item() < 1e-5


def test_equal_length_runs() -> None:
    batch = PackedBatch.from_token_lists([[1] * n for n in LENGTHS])
    assert equal_length_runs(batch) == [(0, 2, 1), (2, 3, 4), (14, 1, 9), (23, 2, 2), (27, 1, 9)]


def test_token_buckets_are_few_and_tight() -> None:
    sizes = [token_bucket(n) for n in range(1, 8193)]
    assert all(s >= n for n, s in enumerate(sizes, 1))
    assert all(s <= n * 17 / 16 for n, s in enumerate(sizes, 1))  # at most 1/16 more rows
    assert len(set(sizes[255:])) <= 81  # 16 row counts per power of two: oneDNN's cached kernels serve them all
    assert sizes[:255] == list(range(1, 256))  # small batches are left as they are
    assert token_bucket(4000) == 4096 and token_bucket(4096) == 4096 and token_bucket(300) == 304


@pytest.mark.parametrize("key_lengths", [None, [1, 1, 3, 2, 4, 9, 2, 1, 5]])
def test_a_filler_sequence_leaves_every_real_token_unchanged(key_lengths: list[int] | None) -> None:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    model = Bert(config).eval()
    seqs = [[(7 * i + j) % 50 for j in range(n)] for i, n in enumerate(LENGTHS)]
    batch = PackedBatch.from_token_lists(seqs, key_lengths=key_lengths)
    padded = batch.with_filler(batch.num_tokens + 16)
    assert padded.num_tokens == batch.num_tokens + 16
    assert padded.lengths == [*LENGTHS, padded.num_tokens - batch.num_tokens]
    with torch.inference_mode():
        want = model(batch)  # [T, hidden]
        got = model(padded)[: batch.num_tokens]
    assert torch.allclose(got, want, atol=1e-6)
    assert batch.with_filler(batch.num_tokens) is batch


@pytest.mark.parametrize("pad", [True, False])
def test_the_model_pads_to_a_bucket_only_where_it_is_switched_on(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch, pad: bool
) -> None:
    """PAD_TO_BUCKETS (on for AMX CPUs) decides whether the backbone sees a filler; the hidden states are the
    same either way."""
    import engine.model.packed as packed
    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model

    model = load_model(Catalogue().get(str(tiny_bert)), offline=True)
    vocab = model.backbone.embeddings.tokens.num_embeddings  # type: ignore[union-attr]
    seqs = [[(11 * i + j) % (vocab - 5) + 5 for j in range(40 + 2 * i)] for i in range(10)]  # 490 tokens: bucket 496
    seen: list[int] = []  # the token count the backbone is given, per forward
    backbone = model.backbone

    def counted(batch: PackedBatch) -> torch.Tensor:
        seen.append(batch.num_tokens)
        return backbone(batch)

    monkeypatch.setattr(model, "backbone", counted)
    monkeypatch.setattr(packed, "PAD_TO_BUCKETS", False)
    want, _ = model.forward(seqs)
    monkeypatch.setattr(packed, "PAD_TO_BUCKETS", pad)
    got, _ = model.forward(seqs)
    assert seen == [490, token_bucket(490) if pad else 490] and token_bucket(490) == 496
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)  # rounding only

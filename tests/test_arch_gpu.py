"""CUDA paths of the new families and heads: flash-attn varlen with GQA, sliding windows and ColBERT key
prefixes (when flash-attn is installed) or per-sequence SDPA on CUDA; compared with the CPU fp32 pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.catalogue.cards import ModelCard
from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model
from tests.tiny_models import make, random_ids

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (none on this machine)"),
]


@pytest.mark.parametrize("family", ["xlm_roberta", "modernbert", "qwen3", "llama"])
def test_cuda_backbone_matches_cpu(family: str, tmp_path: Path) -> None:
    make(family, "Model", tmp_path)
    card = Catalogue().get(str(tmp_path))
    cpu, gpu = load_model(card, "cpu"), load_model(card, "cuda")
    seqs = random_ids(seed=4)
    want = cpu.forward(seqs)[0].float()
    got = gpu.forward(seqs)[0].float().cpu()  # the default profile is float32 on CUDA too
    assert (got - want).abs().max().item() <= 2e-3, family


def test_cuda_colbert_query_expansion(tmp_path: Path) -> None:
    make("bert", "Model", tmp_path)
    card = ModelCard(
        id="tiny-colbert-gpu",
        source={"path": tmp_path},
        outputs=["multivector"],
        multivector={"query_marker": "[unused0]", "query_length": 16, "projection": False},
        max_seq_len=64,
        profiles={"default": {"max_batch_tokens": 4096}},
    )
    cpu, gpu = load_model(card, "cpu"), load_model(card, "cuda")
    seqs = cpu.encode_texts(["the capital of france", "a"], truncate=True, is_query=True)
    want = cpu.forward(seqs)[0].float()
    got = gpu.forward(seqs)[0].float().cpu()
    assert (got - want).abs().max().item() <= 2e-3


@pytest.mark.parametrize("family", ["modernbert", "qwen3"])
def test_cuda_half_precision_flash_path(family: str, tmp_path: Path) -> None:
    """fp16 takes flash-attn's varlen kernel when installed (window_size for ModernBERT's local layers)."""
    from engine.catalogue.cards import Profile

    make(family, "Model", tmp_path)
    card = Catalogue().get(str(tmp_path))
    card = card.model_copy(
        update={"profiles": {**card.profiles, "cuda": Profile(max_batch_tokens=8192, dtype="float16")}}
    )
    cpu, gpu = load_model(card, "cpu"), load_model(card, "cuda")
    seqs = random_ids(seed=5)
    want = cpu.forward(seqs)[0].float()
    got = gpu.forward(seqs)[0].float().cpu()
    assert torch.nn.functional.cosine_similarity(got, want, dim=-1).min().item() > 0.999

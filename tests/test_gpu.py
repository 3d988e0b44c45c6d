"""CUDA paths (flash-attn varlen when installed, fp16 profile): run only where CUDA exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (none on this machine)"),
]
TEXTS = ["a", "the packed forward pass on a GPU", "one two three four five six seven eight " * 40]


def test_cuda_forward_matches_cpu(minilm_path: Path) -> None:
    card = Catalogue().get("sentence-transformers/all-MiniLM-L6-v2")
    cpu = load_model(card, "cpu")
    gpu = load_model(card, "cuda")
    ids = cpu.tokenizer(TEXTS, truncate=True)
    want = F.normalize(cpu.embed(ids), dim=-1)
    got = F.normalize(gpu.embed(ids).float(), dim=-1)
    # the cuda profile runs fp16: compare by cosine, not to fp32 tolerance
    assert torch.nn.functional.cosine_similarity(got, want).min().item() > 0.999

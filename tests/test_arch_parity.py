"""Every backbone family against the transformers reference: fp32 hidden states and pooled vectors within 1e-4.

Each tiny checkpoint is loaded through the catalogue path (a local folder -> inferred card -> loader), and a
packed batch of very different lengths (1 ... 70 tokens) is compared with the reference run one sequence
at a time (no padding on either side, so nothing but the forward pass itself is compared).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model
from engine.model.packed import PackedModel
from tests.tiny_models import make, random_ids

ATOL = 1e-4


def load_folder(folder: Path) -> PackedModel:
    return load_model(Catalogue().get(str(folder)), offline=True)


def reference_hidden(ref: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        out = ref(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return out.hidden_states[-1][0] if out.get("last_hidden_state") is None else out.last_hidden_state[0]


@pytest.mark.parametrize("family", ["bert", "xlm_roberta", "modernbert", "qwen3", "llama"])
def test_backbone_matches_transformers(family: str, tmp_path: Path) -> None:
    ref = make(family, "Model", tmp_path)
    model = load_folder(tmp_path)
    seqs = random_ids(seed=1)
    hidden, batch = model.forward(seqs)
    assert hidden.shape[0] == sum(len(s) for s in seqs)  # packed: exactly the real tokens
    bounds = batch.cu_seqlens.tolist()
    for ids, start, end in zip(seqs, bounds[:-1], bounds[1:], strict=True):
        want = reference_hidden(ref, ids)
        assert (hidden[start:end] - want).abs().max().item() <= ATOL, (family, len(ids))


def test_modernbert_local_window_matters(tmp_path: Path) -> None:
    """The window is narrower than the sequence, so a far-away token changes only global layers' reach."""
    ref = make("modernbert", "Model", tmp_path)
    model = load_folder(tmp_path)
    assert any(layer.attn.window == 4 for layer in model.backbone.layers)  # local_attention 8 -> 4 each side
    ids = random_ids(seed=2, lengths=[60])[0]
    ref.config._attn_implementation = "sdpa"  # a second reference implementation of the sliding mask
    with torch.no_grad():
        want = ref(input_ids=torch.tensor([ids])).last_hidden_state[0]
    assert (model.forward([ids])[0].float() - want).abs().max().item() <= ATOL


@pytest.mark.parametrize(("family", "pooling"), [("qwen3", "last"), ("llama", "last"), ("xlm_roberta", "cls")])
def test_pooled_embeddings(family: str, pooling: str, tmp_path: Path) -> None:
    ref = make(family, "Model", tmp_path)
    model = load_folder(tmp_path)
    assert model.card.pooling == pooling
    seqs = random_ids(seed=3)
    got = model.embed(seqs)
    for row, ids in zip(got, seqs, strict=True):
        h = reference_hidden(ref, ids)
        want = h[-1] if pooling == "last" else h[0]
        assert (row - want).abs().max().item() <= ATOL


def test_qwen3_card_instruction_and_last_token(tmp_path: Path) -> None:
    """Qwen3-Embedding style: query instruction prefix from the card, last-token pooling, normalised."""
    from tests.task_support import encode_task, run

    make("qwen3", "Model", tmp_path)
    card = (
        Catalogue()
        .get(str(tmp_path))
        .model_copy(update={"query_instruction": "instruct : ", "normalize": True, "pooling": "last"})
    )
    model = load_model(card, offline=True)
    out = run(model, encode_task(model.card, ["the capital of france"], options={"is_query": True}), 4096, 64)
    vec = torch.from_numpy(out["items"][0]["dense"]["values"])
    ids = model.tokenizer(["instruct : the capital of france"], truncate=True)
    want = torch.nn.functional.normalize(model.embed(ids)[0], dim=-1)
    assert torch.allclose(vec, want, atol=1e-6) and abs(vec.norm().item() - 1) < 1e-5


def test_gqa_and_rope_are_exercised(tmp_path: Path) -> None:
    make("qwen3", "Model", tmp_path / "q")
    make("llama", "Model", tmp_path / "l")
    q, ll = load_folder(tmp_path / "q"), load_folder(tmp_path / "l")
    assert q.backbone.layers[0].attn.kv_heads == 2 and q.backbone.layers[0].attn.q_norm is not None
    assert ll.backbone.layers[0].attn.kv_heads == 1 and ll.backbone.rope.theta == 500.0

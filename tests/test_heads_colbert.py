"""Late-interaction heads against a direct recomputation from the reference model's hidden states.

ColBERT: [Q]/[D] markers after [CLS], queries padded to a fixed length with [MASK] (computed but not
attended to), a linear projection, L2 normalisation, punctuation dropped from documents. BGE-M3: dense
(CLS), sparse (relu of a per-token weight, max per distinct token, specials dropped) and multivector
(projection of every token but [CLS]) from one forward pass.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from engine.catalogue.cards import ModelCard
from engine.model.loader import load_model
from engine.model.packed import PackedModel
from tests.task_support import encode_task, run
from tests.tiny_models import CLS, MASK, SEP, VOCAB, make

QUERIES = ["the capital of france ?", "paris"]
DOCS = ["paris is the capital of france.", "a", "the dog, the cat and the bird; " * 5]
ATOL = 1e-4


def encode(model: PackedModel, texts: list[str], kinds: list[str], is_query: bool = False) -> list[dict]:
    task = encode_task(model.card, texts, output_types=kinds, options={"is_query": is_query})
    out = run(model, task)
    return out["items"]


def colbert_folder(folder: Path, layout: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """A tiny BERT plus an 8-d projection, saved like colbert-ir (linear.* beside bert.*) or PyLate (1_Dense)."""
    ref = make("bert", "Model", folder)
    proj = torch.randn(8, 32, generator=torch.Generator().manual_seed(5))
    if layout == "colbert-ir":
        tensors = {f"bert.{k}": v.contiguous() for k, v in ref.state_dict().items()}
        for f in folder.glob("*.safetensors"):
            f.unlink()
        save_file({**tensors, "linear.weight": proj}, str(folder / "model.safetensors"))
    else:
        (folder / "1_Dense").mkdir()
        save_file({"linear.weight": proj}, str(folder / "1_Dense" / "model.safetensors"))
    return ref, proj


def colbert_card(folder: Path, **spec: object) -> ModelCard:
    multivector = {
        "dim": 8,
        "query_marker": "[unused0]",
        "document_marker": "[unused1]",
        "query_length": 12,
        "skiplist": "punctuation",
        **spec,
    }
    return ModelCard(
        id="tiny-colbert",
        source={"path": folder},
        tasks=["encode", "score"],
        outputs=["multivector"],
        multivector=multivector,
        score={"kind": "maxsim"},
        max_seq_len=64,
        profiles={"default": {"max_batch_tokens": 4096}},
    )


def reference_vectors(ref: torch.nn.Module, proj: torch.Tensor, ids: list[int], mask: list[int]) -> torch.Tensor:
    with torch.no_grad():
        h = ref(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).last_hidden_state[0]
    return F.normalize(h @ proj.T, dim=-1)


def test_colbert_queries_and_documents(tmp_path: Path) -> None:
    for layout in ("colbert-ir", "pylate"):
        folder = tmp_path / layout
        ref, proj = colbert_folder(folder, layout)
        model = load_model(colbert_card(folder))
        late = model.late
        assert late is not None and late.query_marker == VOCAB.index("[unused0]")
        for text, item in zip(QUERIES, encode(model, QUERIES, ["multivector"], is_query=True), strict=True):
            ids = model.tokenizer([text], truncate=True)[0]
            ids = [CLS, late.query_marker, *ids[1:]]
            real = len(ids)
            ids += [MASK] * (12 - real)  # query augmentation: [MASK] up to query_length, not attended to
            want = reference_vectors(ref, proj, ids, [1] * real + [0] * (12 - real))
            mv = item["multivector"]
            assert mv["num_tokens"] == 12 and mv["token_dims"] == 8
            assert (torch.from_numpy(mv["values"]) - want).abs().max().item() <= ATOL
        skip = {VOCAB.index(c) for c in string.punctuation if c in VOCAB}
        for text, item in zip(DOCS, encode(model, DOCS, ["multivector"]), strict=True):
            ids = model.tokenizer([text], truncate=True)[0]
            ids = [CLS, late.document_marker, *ids[1:]]
            want = reference_vectors(ref, proj, ids, [1] * len(ids))
            want = want[[i for i, t in enumerate(ids) if t not in skip]]  # punctuation skip-list
            got = torch.from_numpy(item["multivector"]["values"])
            assert got.shape == want.shape and (got - want).abs().max().item() <= ATOL


def test_colbert_attend_to_expansion_and_truncation(tmp_path: Path) -> None:
    ref, proj = colbert_folder(tmp_path, "colbert-ir")
    model = load_model(colbert_card(tmp_path, attend_to_expansion=True, query_length=6))
    long_query = "the capital of france is paris and the dog"
    [item] = encode(model, [long_query], ["multivector"], is_query=True)
    ids = model.tokenizer([long_query], truncate=True)[0]
    ids = [CLS, VOCAB.index("[unused0]"), *ids[1:4], SEP]  # cut to query_length, closing [SEP] kept
    want = reference_vectors(ref, proj, ids, [1] * 6)
    assert (torch.from_numpy(item["multivector"]["values"]) - want).abs().max().item() <= ATOL
    # documents: markers count against max_seq_len
    [doc] = encode(model, ["the " * 200], ["multivector"])
    assert doc["multivector"]["num_tokens"] == 64


def bge_m3_folder(folder: Path) -> tuple[torch.nn.Module, torch.nn.Linear, torch.nn.Linear]:
    ref = make("xlm_roberta", "Model", folder, add_pooling_layer=False)
    torch.manual_seed(7)
    colbert, sparse = torch.nn.Linear(32, 32), torch.nn.Linear(32, 1)
    torch.save(colbert.state_dict(), folder / "colbert_linear.pt")
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")
    return ref, colbert, sparse


def test_bge_m3_three_outputs_one_pass(tmp_path: Path) -> None:
    ref, colbert, sparse_linear = bge_m3_folder(tmp_path)
    card = ModelCard(
        id="tiny-bge-m3",
        family="xlm_roberta",
        source={"path": tmp_path},
        tasks=["encode", "score"],
        outputs=["dense", "sparse", "multivector"],
        pooling="cls",
        normalize=True,
        multivector={"dim": 32, "bias": True, "skip_first": True},
        sparse={"kind": "bge_m3"},
        score={"kind": "maxsim"},
        max_seq_len=64,
        profiles={"default": {"max_batch_tokens": 4096}},
    )
    model = load_model(card)
    specials = model.tokenizer.special_ids()
    texts = ["paris is the capital of france", "a", "the dog and the dog and the cat"]
    items = encode(model, texts, ["dense", "sparse", "multivector"])
    for text, item in zip(texts, items, strict=True):
        ids = model.tokenizer([text], truncate=True)[0]
        with torch.no_grad():
            h = ref(input_ids=torch.tensor([ids])).last_hidden_state[0]  # [L, H]
            dense = F.normalize(h[0], dim=-1)
            vecs = F.normalize(colbert(h[1:]), dim=-1)
            weights = torch.relu(sparse_linear(h)).squeeze(-1)
        assert np.abs(item["dense"]["values"] - dense.numpy()).max() <= ATOL
        assert (torch.from_numpy(item["multivector"]["values"]) - vecs).abs().max().item() <= ATOL
        want: dict[int, float] = {}
        for t, w in zip(ids, weights.tolist(), strict=True):
            if t not in specials and w > 0:
                want[t] = max(want.get(t, 0.0), w)
        got = dict(zip(item["sparse"]["indices"].tolist(), item["sparse"]["values"].tolist(), strict=True))
        assert set(got) == set(want) and all(abs(got[k] - want[k]) <= ATOL for k in want)

"""jinaai/jina-colbert-v2: Jina's rotary XLM-R fork plus a ColBERT projection, by its catalogue name.

transformers has no rotary XLM-RoBERTa, so the reference here is written out in the test, line by line
from the model's description (flash-attn's post-norm Block over MHA with a fused Wqkv, Jina's
create_mixer_cls: rotary over the whole head, base `rotary_emb_base`, halves rotated): the rotation itself
is transformers' own (Llama's `LlamaRotaryEmbedding` and `apply_rotary_pos_emb`, the same maths as
flash-attn's non-interleaved RotaryEmbedding), everything else is explicit matrix products. A tiny random
checkpoint in Jina's layout is put where a download lands (the Hugging Face cache) and the built-in card,
unchanged, must give the reference's token vectors for queries and documents.
"""

from __future__ import annotations

import json
import math
import string
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from engine.catalogue.catalogue import Catalogue
from engine.errors import ModelLoadFailed
from engine.model.loader import load_model
from engine.model.packed import PackedModel
from tests.task_support import encode_task, run, score_task
from tests.tiny_models import CLS, MASK, VOCAB, write_tokenizer

JINA = "jinaai/jina-colbert-v2"
MARKERS = ["[QueryMarker]", "[DocumentMarker]"]  # added tokens after the vocabulary (ids 250002, 250003 there)
HIDDEN, HEADS, LAYERS, INTER, DIM, BASE = 32, 4, 2, 64, 128, 20000.0
CONFIG = {  # the fields the model's config.json holds for our forward pass (no model_type: custom code)
    "auto_map": {
        "AutoConfig": "jinaai/xlm-roberta-flash-implementation--configuration_xlm_roberta.XLMRobertaFlashConfig"
    },
    "vocab_size": len(VOCAB) + len(MARKERS),
    "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "intermediate_size": INTER,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-5,
    "max_position_embeddings": 130,
    "pad_token_id": 1,
    "type_vocab_size": 1,
    "position_embedding_type": "rotary",
    "rotary_emb_base": BASE,
    "use_flash_attn": True,
}
QUERIES = ["the capital of france ?", "paris"]
DOCS = ["paris is the capital of france.", "a", "the dog, the cat and the bird; " * 5]
ATOL = 1e-4


def jina_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under the names Jina's checkpoint uses (roberta.* in flash-attn names, linear.weight)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 0.2) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    def norm() -> dict[str, torch.Tensor]:
        return {"weight": 1 + rnd(HIDDEN, scale=0.05), "bias": rnd(HIDDEN, scale=0.05)}

    t = {
        "roberta.embeddings.word_embeddings.weight": rnd(CONFIG["vocab_size"], HIDDEN, scale=1.0),
        "roberta.embeddings.token_type_embeddings.weight": rnd(1, HIDDEN),
        "linear.weight": rnd(DIM, HIDDEN),
    }
    t |= {f"roberta.emb_ln.{k}": v for k, v in norm().items()}
    for n in range(LAYERS):
        p = f"roberta.encoder.layers.{n}"
        t |= {f"{p}.mixer.Wqkv.weight": rnd(3 * HIDDEN, HIDDEN), f"{p}.mixer.Wqkv.bias": rnd(3 * HIDDEN)}
        t |= {f"{p}.mixer.out_proj.weight": rnd(HIDDEN, HIDDEN), f"{p}.mixer.out_proj.bias": rnd(HIDDEN)}
        t |= {f"{p}.mlp.fc1.weight": rnd(INTER, HIDDEN), f"{p}.mlp.fc1.bias": rnd(INTER)}
        t |= {f"{p}.mlp.fc2.weight": rnd(HIDDEN, INTER), f"{p}.mlp.fc2.bias": rnd(HIDDEN)}
        t |= {f"{p}.norm1.{k}": v for k, v in norm().items()} | {f"{p}.norm2.{k}": v for k, v in norm().items()}
    return t


def write_checkpoint(folder: Path, tensors: dict[str, torch.Tensor], **config: object) -> None:
    """The checkpoint, config.json and the tiny tokenizer with the two markers added after its vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder)
    tok = json.loads((folder / "tokenizer.json").read_text())
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    for i, marker in enumerate(MARKERS):  # in the model's vocabulary too, so that their ids are these
        tok["model"]["vocab"][marker] = len(VOCAB) + i
        tok["added_tokens"].append({"id": len(VOCAB) + i, "content": marker, **flags})
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**CONFIG, **config}))


def llama_rope(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [1, L, head_dim] from transformers' LlamaRotaryEmbedding with Jina's base."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, head_dim=HIDDEN // HEADS, rope_theta=BASE)
    rope = LlamaRotaryEmbedding(cfg)
    return rope(torch.zeros(1, dtype=torch.float32), positions[None])


def reference(t: dict[str, torch.Tensor], ids: list[int], keys: int) -> torch.Tensor:
    """Token vectors [L, DIM] of one sequence whose first `keys` tokens are attended to."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    def ln(x: torch.Tensor, p: str) -> torch.Tensor:
        return F.layer_norm(x, (HIDDEN,), t[f"{p}.weight"], t[f"{p}.bias"], eps=1e-5)

    def lin(x: torch.Tensor, p: str) -> torch.Tensor:
        return x @ t[f"{p}.weight"].T + t[f"{p}.bias"]

    n, d = len(ids), HIDDEN // HEADS
    x = t["roberta.embeddings.word_embeddings.weight"][ids] + t["roberta.embeddings.token_type_embeddings.weight"][0]
    x = ln(x, "roberta.emb_ln")  # no position table: positions enter through the rotation only
    cos, sin = llama_rope(torch.arange(n))  # positions 0 .. n-1 in the sequence
    for layer in range(LAYERS):
        p = f"roberta.encoder.layers.{layer}"
        q, k, v = lin(x, f"{p}.mixer.Wqkv").split(HIDDEN, dim=-1)  # Wqkv = cat([Wq, Wk, Wv])
        q, k, v = (z.view(n, HEADS, d).transpose(0, 1)[None] for z in (q, k, v))  # [1, H, n, d]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores[..., keys:] = float("-inf")  # keys beyond the attended prefix
        attn = (scores.softmax(-1) @ v)[0].transpose(0, 1).reshape(n, HIDDEN)
        x = ln(x + lin(attn, f"{p}.mixer.out_proj"), f"{p}.norm1")  # post-norm, as Block(prenorm=False)
        x = ln(x + lin(F.gelu(lin(x, f"{p}.mlp.fc1")), f"{p}.mlp.fc2"), f"{p}.norm2")
    return F.normalize(x @ t["linear.weight"].T, dim=-1)


def test_llama_rotation_rotates_halves() -> None:
    """The reference's rotary is the textbook pairing (i, i + d/2) by angle position * base^(-2i/d)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    d, n = HIDDEN // HEADS, 9
    q = torch.randn(1, 1, n, d, generator=torch.Generator().manual_seed(1))
    cos, sin = llama_rope(torch.arange(n))
    got, _ = apply_rotary_pos_emb(q, q, cos, sin)
    angle = torch.arange(n)[:, None] * BASE ** (-torch.arange(0, d, 2) / d)  # [n, d/2]
    a, b = q[0, 0, :, : d // 2], q[0, 0, :, d // 2 :]
    want = torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], dim=-1)
    assert (got[0, 0] - want).abs().max().item() <= 1e-5


@pytest.fixture
def snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache holding the folder a download of jinaai/jina-colbert-v2 fills."""
    cache = tmp_path / "hub"
    repo = cache / "models--jinaai--jina-colbert-v2"
    snap = repo / "snapshots" / ("1" * 40)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snap.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    return snap


def vectors(model: PackedModel, texts: list[str], is_query: bool) -> list[torch.Tensor]:
    task = encode_task(model.card, texts, output_types=["multivector"], options={"is_query": is_query})
    return [torch.from_numpy(item["multivector"]["values"]) for item in run(model, task)["items"]]


def test_card_encodes_like_reference(snapshot: Path) -> None:
    t = jina_tensors()
    write_checkpoint(snapshot, t)
    model = load_model(Catalogue().get(JINA))
    late = model.late
    assert late is not None and [late.query_marker, late.document_marker] == [len(VOCAB), len(VOCAB) + 1]
    assert model.backbone.config.rotary_base == BASE and model.tokenizer.max_len == 128
    for text, got in zip(QUERIES, vectors(model, QUERIES, is_query=True), strict=True):
        ids = model.tokenizer([text], truncate=True)[0]
        ids = [CLS, late.query_marker, *ids[1:]]
        ids += [MASK] * (32 - len(ids))  # query expansion to 32 tokens, expansion tokens attended to
        want = reference(t, ids, keys=32)
        assert got.shape == (32, DIM) and (got - want).abs().max().item() <= ATOL
    skip = {VOCAB.index(c) for c in string.punctuation if c in VOCAB}
    for text, got in zip(DOCS, vectors(model, DOCS, is_query=False), strict=True):
        ids = model.tokenizer([text], truncate=True)[0]
        ids = [CLS, late.document_marker, *ids[1:]]
        want = reference(t, ids, keys=len(ids))[[i for i, tok in enumerate(ids) if tok not in skip]]
        assert got.shape == want.shape and (got - want).abs().max().item() <= ATOL
    # score: MaxSim of those vectors, best first
    result = run(model, score_task(model.card, QUERIES[0], DOCS))
    [q] = vectors(model, QUERIES[:1], is_query=True)
    docs = vectors(model, DOCS, is_query=False)
    want_scores = [(q @ doc.T).max(dim=1).values.sum().item() for doc in docs]
    got_scores = {s["item_id"]: s["score"] for s in result["scores"]}
    assert all(abs(got_scores[f"d{i}"] - w) <= 1e-3 for i, w in enumerate(want_scores)), (got_scores, want_scores)


BAD_CONFIG = [
    ({"rotary_emb_base": None}, "needs rotary_emb_base"),
    ({"rotary_emb_interleaved": True}, "interleaved"),
    ({"rotary_emb_dim": 4}, "partial rotary"),
]


@pytest.mark.parametrize(("change", "message"), BAD_CONFIG, ids=["no-base", "interleaved", "partial"])
def test_rotary_variants_we_do_not_build_are_refused(snapshot: Path, change: dict, message: str) -> None:
    config = {k: v for k, v in {**CONFIG, **change}.items() if v is not None}
    write_checkpoint(snapshot, jina_tensors())
    (snapshot / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadFailed, match=message):
        load_model(Catalogue().get(JINA))


def test_broken_checkpoints_fail_clearly(snapshot: Path) -> None:
    t = jina_tensors()
    write_checkpoint(snapshot, {**t, "roberta.embeddings.position_embeddings.weight": torch.zeros(130, HIDDEN)})
    with pytest.raises(ModelLoadFailed, match=r"unexpected tensors .*embeddings\.positions"):
        load_model(Catalogue().get(JINA))  # a position table beside rotary positions: not this model
    write_checkpoint(snapshot, {k: v for k, v in t.items() if k != "linear.weight"})
    with pytest.raises(ModelLoadFailed, match=r"missing tensors .*heads\.colbert\.proj\.weight"):
        load_model(Catalogue().get(JINA))
    write_checkpoint(snapshot, {k: v for k, v in t.items() if "layers.1.mixer.Wqkv" not in k})
    with pytest.raises(ModelLoadFailed, match=r"layer 1 has no mixer\.Wqkv"):
        load_model(Catalogue().get(JINA))

"""jinaai/jina-reranker-v2-base-multilingual: Jina's XLM-R fork (flash-attn weight names) by its catalogue name.

No Jina weights can be downloaded here, so a tiny random XLMRobertaForSequenceClassification is built
offline, its state dict rewritten into the layout Jina's `xlm-roberta-flash-implementation` saves
(flash-attn's `remap_state_dict` direction: `emb_ln`, `encoder.layers.N.mixer.Wqkv` = cat([q, k, v]),
`mixer.out_proj`, `norm1`, `mlp.fc1`, `mlp.fc2`, `norm2`) next to the config.json fields the model repo
ships (`architectures`, `auto_map` to custom code, `use_flash_attn`, no `model_type`), and put where a
download lands: the Hugging Face cache. The built-in card, unchanged, must then score exactly as the
transformers reference scores the original Hugging Face-layout model.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file

from engine.build import build_app
from engine.catalogue.cards import ScoreSpec
from engine.catalogue.catalogue import Catalogue
from engine.catalogue.weights import resolve_weights
from engine.config import EngineSettings
from engine.errors import ModelLoadFailed
from engine.model.loader import load_model
from engine.worker.handlers.score import score_inputs
from tests import task_support
from tests.task_support import run
from tests.tiny_models import make

JINA = "jinaai/jina-reranker-v2-base-multilingual"
LAYERS = 2
QUERY = "the capital of france"
DOCS = ["paris is the capital of france", "a", "the dog and the cat " * 8, "london is in england", "blue"]
# config.json of the model repo, less the sizes (taken from the tiny model); no model_type, as there
JINA_CONFIG = {
    "_name_or_path": "jina-reranker-v2-base-multilingual",
    "architectures": ["XLMRobertaForSequenceClassification"],
    "attention_probs_dropout_prob": 0.1,
    "auto_map": {
        "AutoConfig": "configuration_xlm_roberta.XLMRobertaFlashConfig",
        "AutoModel": "modeling_xlm_roberta.XLMRobertaModel",
        "AutoModelForSequenceClassification": "modeling_xlm_roberta.XLMRobertaForSequenceClassification",
    },
    "bos_token_id": 0,
    "classifier_dropout": None,
    "emb_pooler": None,
    "eos_token_id": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "num_labels": 1,
    "id2label": {"0": "LABEL_0"},
    "initializer_range": 0.02,
    "label2id": {"LABEL_0": 0},
    "layer_norm_eps": 1e-5,
    "output_past": True,
    "pad_token_id": 1,
    "position_embedding_type": "absolute",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0",
    "type_vocab_size": 1,
    "use_cache": False,
    "use_flash_attn": True,
}
SIZES = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"]
# custom code beside the weights, as on the hub: importing it would leave a marker file
REMOTE_CODE = "from pathlib import Path\nPath(__file__).with_name('REMOTE_CODE_RAN').write_text('ran')\n"


def jina_layout(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Hugging Face XLM-R state dict under the names Jina's flash implementation saves."""
    renames = [
        (r"^roberta\.embeddings\.LayerNorm\.", "roberta.emb_ln."),
        (r"\.encoder\.layer\.(\d+)\.attention\.output\.dense\.", r".encoder.layers.\1.mixer.out_proj."),
        (r"\.encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r".encoder.layers.\1.norm1."),
        (r"\.encoder\.layer\.(\d+)\.intermediate\.dense\.", r".encoder.layers.\1.mlp.fc1."),
        (r"\.encoder\.layer\.(\d+)\.output\.dense\.", r".encoder.layers.\1.mlp.fc2."),
        (r"\.encoder\.layer\.(\d+)\.output\.LayerNorm\.", r".encoder.layers.\1.norm2."),
    ]
    out: dict[str, torch.Tensor] = {}
    for name, tensor in hf.items():
        if ".attention.self." in name:
            continue
        for pattern, repl in renames:
            name = re.sub(pattern, repl, name)
        out[name] = tensor
    for n in range(LAYERS):
        own = f"roberta.encoder.layer.{n}.attention.self"
        for kind in ("weight", "bias"):
            qkv = [hf[f"{own}.{part}.{kind}"] for part in ("query", "key", "value")]
            out[f"roberta.encoder.layers.{n}.mixer.Wqkv.{kind}"] = torch.cat(qkv, dim=0)
    return out


def expected_jina_names() -> set[str]:
    """The parameter names of Jina's XLMRobertaForSequenceClassification (modules: embedding.py, block.py)."""
    names = {f"roberta.embeddings.{e}_embeddings.weight" for e in ("word", "position", "token_type")}
    per_layer = ["mixer.Wqkv", "mixer.out_proj", "norm1", "mlp.fc1", "mlp.fc2", "norm2"]
    for part in ["roberta.emb_ln", "classifier.dense", "classifier.out_proj"] + [
        f"roberta.encoder.layers.{n}.{p}" for n in range(LAYERS) for p in per_layer
    ]:
        names |= {f"{part}.weight", f"{part}.bias"}
    return names


def write_jina_checkpoint(hf_dir: Path, folder: Path, edit: Callable[[dict], None] | None = None) -> None:
    """The tiny model in `hf_dir` rewritten as Jina ships it; `edit` may break the tensors first."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = jina_layout(load_file(str(hf_dir / "model.safetensors")))
    if edit is not None:
        edit(tensors)
    save_file(tensors, str(folder / "model.safetensors"))
    sizes = json.loads((hf_dir / "config.json").read_text())
    config = {
        **JINA_CONFIG,
        **{k: sizes[k] for k in SIZES},
        "max_position_embeddings": sizes["max_position_embeddings"],
    }
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(hf_dir / "tokenizer.json", folder / "tokenizer.json")
    for module in ("configuration_xlm_roberta.py", "modeling_xlm_roberta.py"):
        (folder / module).write_text(REMOTE_CODE)


def snapshot(cache: Path) -> Path:
    """The (empty) folder where snapshot_download puts jinaai/jina-reranker-v2-base-multilingual."""
    repo = cache / "models--jinaai--jina-reranker-v2-base-multilingual"
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(snap.name)
    return snap


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    hf_dir = tmp_path_factory.mktemp("hf") / "tiny"
    ref = make("xlm_roberta", "ForSequenceClassification", hf_dir, num_labels=1, layer_norm_eps=1e-5)
    return ref, hf_dir


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache for this test (no network: HF_HUB_OFFLINE)."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    return cache


def logits(ref: torch.nn.Module, ids: list[int]) -> float:
    with torch.no_grad():
        return float(ref(input_ids=torch.tensor([ids])).logits[0, 0].item())


def test_layout_is_jinas(reference: tuple[torch.nn.Module, Path]) -> None:
    """The rewritten checkpoint holds exactly the names Jina's modules have (and no Hugging Face name)."""
    _, hf_dir = reference
    assert set(jina_layout(load_file(str(hf_dir / "model.safetensors")))) == expected_jina_names()


def test_card_scores_like_reference_from_the_hf_cache(reference: tuple[torch.nn.Module, Path], hub: Path) -> None:
    ref, hf_dir = reference
    snap = snapshot(hub)
    write_jina_checkpoint(hf_dir, snap)
    card = Catalogue().get(JINA)
    assert (card.family, card.max_seq_len, card.source.hf_repo) == ("xlm_roberta", 1024, JINA)
    assert resolve_weights(card, offline=True) == snap
    raw = load_model(card.model_copy(update={"score": ScoreSpec(kind="classifier", activation="none")}))
    model = load_model(card)
    assert model.tokenizer.max_len == 128  # the tiny config's 130 positions less padding_idx + 1
    for m, squash in ((raw, lambda x: x), (model, lambda x: 1 / (1 + math.exp(-x)))):
        task = task_support.score_task(m.card, QUERY, DOCS)
        by_id = {s["item_id"]: s["score"] for s in run(m, task, 4096, 64)["scores"]}
        for i, enc in enumerate(score_inputs(m, task)):
            assert abs(by_id[f"d{i}"] - squash(logits(ref, enc.ids))) <= 1e-4, (i, by_id, m.card.score)
    assert not (snap / "REMOTE_CODE_RAN").exists()  # the auto_map code was never imported


def test_local_jina_folder_is_inferred(reference: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    """The downloaded folder itself as the model id: no model_type, so the family comes from the class."""
    ref, hf_dir = reference
    write_jina_checkpoint(hf_dir, tmp_path / "jina")
    card = Catalogue().get(str(tmp_path / "jina"))
    assert (card.family, card.tasks, card.max_seq_len) == ("xlm_roberta", ["score"], 128)
    model = load_model(card.model_copy(update={"score": ScoreSpec(kind="classifier", activation="none")}))
    [enc] = model.encode_pairs([(QUERY, DOCS[0])], truncate=True)
    task = task_support.score_task(model.card, QUERY, DOCS[:1])
    [row] = run(model, task, 4096, 64)["scores"]
    assert abs(row["score"] - logits(ref, enc.ids)) <= 1e-4
    assert not (tmp_path / "jina" / "REMOTE_CODE_RAN").exists()


def drop_layer_1(tensors: dict) -> None:
    del tensors["roberta.encoder.layers.1.mixer.Wqkv.weight"], tensors["roberta.encoder.layers.1.mixer.Wqkv.bias"]


def short_wqkv(tensors: dict) -> None:
    name = "roberta.encoder.layers.0.mixer.Wqkv.weight"
    tensors[name] = tensors[name][:-3].contiguous()  # one q/k/v row block short of 3 x hidden


def wrong_bias(tensors: dict) -> None:
    name = "roberta.encoder.layers.1.mixer.Wqkv.bias"
    tensors[name] = torch.cat([tensors[name], torch.zeros(3)])  # splits in three, each a row too long


BAD = [
    (drop_layer_1, r"layer 1 has no mixer\.Wqkv\.weight"),
    (short_wqkv, r"layer 0's fused mixer\.Wqkv\.weight has shape \(93, 32\)"),
    (wrong_bias, r"shape mismatch .*layers\.1\.attn\.query\.bias"),
]


@pytest.mark.parametrize(("edit", "message"), BAD, ids=["missing-wqkv", "short-wqkv", "wrong-bias"])
def test_broken_jina_checkpoint_fails_to_load_clearly(
    reference: tuple[torch.nn.Module, Path], hub: Path, edit: Callable[[dict], None], message: str
) -> None:
    _, hf_dir = reference
    snap = snapshot(hub)
    write_jina_checkpoint(hf_dir, snap, edit)
    with pytest.raises(ModelLoadFailed, match=message) as e:
        load_model(Catalogue().get(JINA))
    assert e.value.code == "MODEL_LOAD_FAILED" and "do not match config.json" in e.value.message


@pytest.fixture
def client(hub: Path) -> Iterator[TestClient]:
    with TestClient(build_app(EngineSettings(offline=True))) as c:
        yield c


def test_rerank_by_name_over_http(reference: tuple[torch.nn.Module, Path], hub: Path, client: TestClient) -> None:
    """A client asking for the reranker by its hub name gets the reference's ranking; a broken copy is a 502
    MODEL_LOAD_FAILED and the server keeps serving."""
    ref, hf_dir = reference
    snap = snapshot(hub)
    write_jina_checkpoint(hf_dir, snap, short_wqkv)
    r = client.post("/v1/rerank", json={"model": JINA, "query": QUERY, "documents": DOCS})
    assert r.status_code == 502 and "MODEL_LOAD_FAILED" in r.text and "Wqkv" in r.text, r.text
    write_jina_checkpoint(hf_dir, snap)
    r = client.post("/v1/rerank", json={"model": JINA, "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    model = load_model(Catalogue().get(JINA))
    encs = model.encode_pairs([(QUERY, d) for d in DOCS], truncate=True)
    want = [1 / (1 + math.exp(-logits(ref, e.ids))) for e in encs]
    got = {row["index"]: row["relevance_score"] for row in r.json()["results"]}
    ranked = [row["relevance_score"] for row in r.json()["results"]]
    assert ranked == sorted(ranked, reverse=True) and sorted(got) == list(range(len(DOCS)))  # best first
    assert all(abs(got[i] - want[i]) <= 1e-4 for i in range(len(DOCS)))

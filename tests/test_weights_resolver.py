"""One weights resolver: what `weights_status` reports (shoal models, the console, the pipeline's check) is
what `resolve_weights` loads, for safetensors and GLiNER's pytorch_model.bin, offline and online, `~` paths."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.catalogue.cards import ModelCard, WeightSource
from engine.catalogue.weights import hf_cache_root, offline_mode, resolve_weights, weights_status
from engine.errors import ModelUnavailable
from tests.conftest import MINILM

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_repo(cache: Path, repo: str, files: tuple[str, ...], ref: str = "main") -> Path:
    """A Hugging Face hub cache holding `repo` at `ref` (refs/<ref> -> a commit's snapshot with `files`)."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name in ("config.json", *files):
        (snap / name).write_bytes(b"{}")
    (folder / "refs").mkdir()
    (folder / "refs" / ref).write_text(COMMIT)
    return snap


def card(repo: str, family: str = "bert", revision: str | None = None) -> ModelCard:
    src = WeightSource(hf_repo=repo, revision=revision)
    if family == "gliner":  # a GLiNER card as the catalogue's are (extract task, gliner extract section)
        return ModelCard.model_validate(
            {"id": repo, "family": family, "source": src, "tasks": ["extract"], "outputs": ["entities"],
             "extract": {"kind": "gliner"}}
        )  # fmt: skip
    return ModelCard(id=repo, family=family, source=src)


def agree(c: ModelCard, offline: bool | None) -> Path | None:
    """The folder both report (None when both say missing); fails if they disagree."""
    status = weights_status(c, offline)
    try:
        found: Path | None = resolve_weights(c, offline)
    except ModelUnavailable as e:
        assert not status.available, (status, e.message)
        for tried in status.tried:
            assert tried in e.message
        return None
    assert status.available and status.location == str(found), (status, found)
    return found


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """Online settings without a network: each hub download is recorded and fails as the hub would."""
    calls: list[dict[str, object]] = []

    def fake(repo: str, **kwargs: object) -> str:
        calls.append({"repo": repo, **kwargs})
        raise OSError("no network in tests")

    monkeypatch.setattr("huggingface_hub.snapshot_download", fake)
    return calls


@pytest.mark.parametrize("offline", [True, False])
@pytest.mark.parametrize(
    ("family", "files", "found"),
    [
        ("bert", ("model.safetensors",), True),
        ("gliner", ("pytorch_model.bin",), True),  # GLiNER ships a pickled state dict, read with weights_only
        ("gliner", ("model.safetensors",), True),
        ("bert", ("pytorch_model.bin",), False),  # only GLiNER may load a .bin
        ("bert", ("tokenizer.json",), False),  # a snapshot holding only the tokenizer has no weights
    ],
)
def test_a_cached_snapshot_is_found_by_both_or_neither(
    hub: Path, no_download: list[dict[str, object]], offline: bool, family: str, files: tuple[str, ...], found: bool
) -> None:
    snap = cache_repo(hub, "acme/model", files)
    c = card("acme/model", family)
    assert agree(c, offline) == (snap if found else None)
    status = weights_status(c, offline)
    if found:
        assert status.source == "hf-cache" and not no_download  # cached: online never asks the hub
    elif offline:
        assert status.source == "missing" and not no_download
        assert any("no weight files in acme/model" in t for t in status.tried), status.tried
    else:  # online: the hub is asked once, into the cache the status reads
        assert status.source == "hub"
        assert [(d["repo"], d["cache_dir"]) for d in no_download] == [("acme/model", hub)]


def test_revision_through_refs_and_by_commit(hub: Path) -> None:
    snap = cache_repo(hub, "acme/tagged", ("model.safetensors",), ref="v1")
    assert agree(card("acme/tagged", revision="v1"), True) == snap
    assert agree(card("acme/tagged", revision=COMMIT), True) == snap
    assert agree(card("acme/tagged"), True) is None  # no refs/main
    assert agree(card("acme/tagged", revision="v2"), True) is None


def test_tilde_paths_expand_in_the_cache_variables_and_the_card(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", "~/hf")
    assert hf_cache_root() == tmp_path / "hf" / "hub"
    snap = cache_repo(tmp_path / "hf" / "hub", "acme/home", ("model.safetensors",))
    assert agree(card("acme/home"), True) == snap
    monkeypatch.setenv("HF_HUB_CACHE", "~/elsewhere")
    assert hf_cache_root() == tmp_path / "elsewhere"
    assert agree(card("acme/home"), True) is None
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    local = ModelCard(id="acme/local", source=WeightSource(path=Path("~/ckpt")))
    assert agree(local, True) == ckpt and weights_status(local, True).source == "path"


@pytest.mark.parametrize(
    ("value", "offline"),
    [("1", True), ("true", True), ("ON", True), ("yes", True), ("0", False), ("false", False), ("off", False),
     ("no", False), ("", False)],
)  # fmt: skip
def test_hf_hub_offline_is_read_as_huggingface_hub_reads_it(
    monkeypatch: pytest.MonkeyPatch, value: str, offline: bool
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert offline_mode(None) is offline
    assert offline_mode(not offline) is (not offline)  # an explicit setting (SHOAL_OFFLINE) wins


def test_server_paths_are_left_out_of_the_message_when_asked(hub: Path) -> None:
    c = ModelCard(id="acme/x", source=WeightSource(path=Path("/srv/secret/ckpt"), hf_repo="acme/x"))
    with pytest.raises(ModelUnavailable) as e:
        resolve_weights(c, offline=True, show_paths=False)
    assert "/srv/secret" not in e.value.message and str(hub) not in e.value.message
    assert "HF cache (no acme/x)" in e.value.message and "offline" in e.value.message


def test_the_engine_lists_a_cached_gliner_bin_as_available_offline(hub: Path) -> None:
    """The pipeline refuses a step whose model the listing says is unavailable: a GLiNER checkpoint cached
    with only pytorch_model.bin is available to it exactly when the loader can resolve it."""
    from engine.catalogue.catalogue import Catalogue
    from engine.config import EngineSettings
    from engine.runtime import AsyncEngine

    gliner = Catalogue().get("urchade/gliner_small-v2.1")
    assert gliner.source.hf_repo
    snap = cache_repo(hub, gliner.source.hf_repo, ("pytorch_model.bin",))
    assert resolve_weights(gliner, offline=True) == snap

    from pipeline.config import ConfigError, PipelineConfig
    from pipeline.enrich import Enricher

    def steps(model: str) -> PipelineConfig:
        entities = {"kind": "entities", "model": model, "labels": ["person"]}
        return PipelineConfig.model_validate({"steps": [{"kind": "dense", "model": MINILM}, entities]})

    async def check() -> dict[str, bool]:
        engine = AsyncEngine(EngineSettings(offline=True))
        await Enricher(engine, steps("urchade/gliner_small-v2.1")).validate()  # the ingest's check passes
        with pytest.raises(ConfigError) as e:  # and refuses the one with no weights here
            await Enricher(engine, steps("urchade/gliner_multi-v2.1")).validate()
        assert e.value.code == "MODEL_UNAVAILABLE"
        return {m["name"]: m["available"] for m in await engine.models()}

    available = asyncio.run(check())
    assert available["urchade/gliner_small-v2.1"] is True
    assert available["urchade/gliner_multi-v2.1"] is False

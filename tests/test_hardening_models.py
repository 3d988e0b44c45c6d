"""Model ids and the server's filesystem: with local folders off (what `shoal serve` does by default) no
spelling of a path loads or reveals anything; model roots serve their folders by name; with local folders
on, every spelling of one folder is one model, loaded once. The same rules for LoRA adapters."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from engine.catalogue.catalogue import Catalogue
from engine.catalogue.folders import FolderPolicy, check_id, under
from engine.catalogue.weights import AdapterPolicy, resolve_adapter
from engine.config import EngineSettings
from engine.errors import InvalidInput, ModelLoadFailed, ModelNotFound
from engine.runtime import AsyncEngine
from tests.hardening_support import MINILM, samples
from tests.helpers import REPO, LiveServer, make_tiny_bert

pytestmark = pytest.mark.slow
ROOTS_ONLY = "a catalogue id, or the name of a checkpoint folder under the server's model roots"


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A model root with a checkpoint, an alias to it and an escape to outside; a checkpoint outside any root;
    a broken checkpoint; a card whose source.path is missing."""
    base = tmp_path_factory.mktemp("disk")
    root = base / "root"
    enc = make_tiny_bert(root / "team" / "enc", seed=1)
    outside = make_tiny_bert(base / "outside", seed=2)
    (root / "alias").symlink_to(enc)
    (root / "escape").symlink_to(outside)
    broken = make_tiny_bert(root / "broken", seed=3)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "hidden_size": "wide"}))
    nofields = make_tiny_bert(root / "nofields", seed=4)
    config = json.loads((nofields / "config.json").read_text())
    del config["hidden_size"]
    (nofields / "config.json").write_text(json.dumps(config))
    cards = base / "cards"
    cards.mkdir()
    (cards / "gone.yaml").write_text(f"id: team/gone\nsource: {{path: {base / 'no-such-folder'}}}\nmax_seq_len: 64\n")
    return {"base": base, "root": root, "enc": enc, "outside": outside, "cards": cards}


@pytest.fixture(scope="module")
def closed(disk: dict[str, Path]) -> Iterator[LiveServer]:
    env = {"SHOAL_MODEL_ROOTS": str(disk["root"]), "SHOAL_MODEL_DIR": str(disk["cards"])}
    srv = LiveServer(env=env).wait_ready()
    yield srv
    srv.stop()


def encode(server: LiveServer, model: str, text: str = "hello world") -> httpx.Response:
    """Through the OpenAI route: the model id travels in the body, so no URL normalisation touches it."""
    return httpx.post(f"{server.url}/v1/embeddings", json={"model": model, "input": text}, timeout=120)


def loads(server: LiveServer) -> dict[str, float]:
    return samples(server.url, "shoal_model_loads_total")


def path_spellings(folder: Path) -> list[str]:
    """20 spellings of one folder."""
    s = str(folder)
    rel = os.path.relpath(folder, REPO)  # the server runs in the repository
    parent, name = folder.parent, folder.name
    link = folder.parent / f"{name}-link"
    if not link.exists():
        link.symlink_to(folder)
    return [
        s,
        s + "/",
        s + "//",
        s + "/.",
        s + "/./",
        f"{parent}/./{name}",
        f"{parent}//{name}",
        f"{parent}/../{parent.name}/{name}",
        f"{parent}/{name}/../{name}",
        "/" + s,
        "//" + s.lstrip("/") + "/",
        rel,
        "./" + rel,
        rel + "/",
        f"./{rel}/.",
        str(link),
        str(link) + "/",
        f"{link.parent}/./{link.name}",
        f"{parent}/{name}/./../{name}/",
        s.replace("/", "///"),
    ]


def test_no_path_spelling_loads_or_reveals_anything(closed: LiveServer, disk: dict[str, Path]) -> None:
    before = loads(closed)
    spellings = path_spellings(disk["outside"]) + [str(disk["root"] / "escape"), "escape", "escape/"]
    spellings += ["/root", "/root/.ssh", "~", "~root", "~nosuchuser", "../../etc", "/etc/passwd", "."]
    for model in spellings:
        r = encode(closed, model)
        assert r.status_code == 404 and r.json()["error"]["code"] == "MODEL_NOT_FOUND", (model, r.text)
        # the answer is one template whatever exists on disk; an echoed absolute path is scrubbed too
        message = r.json()["error"]["message"].replace(repr(model), "ID").replace("'<server path>'", "ID")
        assert message == f"no model ID: this server serves {ROOTS_ONLY}", (model, message)
        if "." not in model.replace(".ssh", ""):  # a URL's dot segments are resolved by the client: not this id
            detail = httpx.get(f"{closed.url}/v1/models/{model}")
            assert detail.status_code == 404 and detail.json()["detail"]["code"] == "MODEL_NOT_FOUND", model
    assert loads(closed) == before  # nothing was loaded
    listed = {m["name"] for m in httpx.get(f"{closed.url}/v1/models").json()["models"]}
    assert not any("/" in n and n.startswith(("/", ".", "~")) for n in listed)
    assert "team/enc" in listed and "escape" not in listed and "broken" not in listed
    assert str(disk["base"]) not in httpx.get(f"{closed.url}/v1/models").text


def test_a_model_root_serves_its_folders_by_name_once(closed: LiveServer, disk: dict[str, Path]) -> None:
    first = encode(closed, "team/enc")
    assert first.status_code == 200 and first.json()["model"] == "team/enc", first.text
    alias = encode(closed, "alias")  # a link inside the root to the same folder: the same model
    assert alias.status_code == 200, alias.text
    assert alias.json()["data"][0]["embedding"] == first.json()["data"][0]["embedding"]
    ok_loads = {k: v for k, v in loads(closed).items() if 'outcome="ok"' in k and "team/enc" in k}
    assert list(ok_loads.values()) == [1.0]
    for spelling in ("team/enc/", "./team/enc", "team//enc", "team/./enc", "team/../team/enc"):
        assert encode(closed, spelling).status_code == 404, spelling


@pytest.mark.parametrize("name", ["broken", "nofields"])
def test_a_broken_checkpoint_config_is_its_load_failure(closed: LiveServer, disk: dict[str, Path], name: str) -> None:
    r = encode(closed, name)
    assert r.status_code == 502 and r.json()["error"]["code"] == "MODEL_LOAD_FAILED", r.text
    assert name in r.json()["error"]["message"] and str(disk["base"]) not in r.text


def test_missing_weights_are_model_unavailable_and_say_how_to_provide_them(
    closed: LiveServer, disk: dict[str, Path]
) -> None:
    for model in ("BAAI/bge-m3", "team/gone"):
        r = httpx.post(f"{closed.url}/v1/encode/{model}", json={"items": [{"text": "x"}]}, timeout=120)
        assert r.status_code == 503 and "retry-after" not in r.headers, r.text
        detail = r.json()["detail"]
        assert detail["code"] == "MODEL_UNAVAILABLE" and model in detail["message"]
        for hint in ("tried:", "SHOAL_OFFLINE", "source.path", "SHOAL_MODEL_ROOTS"):
            assert hint in detail["message"], (hint, detail["message"])
        assert str(disk["base"]) not in r.text and "checkpoint folder itself" not in r.text
    r = httpx.post(f"{closed.url}/v1/encode/{MINILM}", json={"items": [{"text": "x"}]}, timeout=120)
    assert r.status_code == 200
    tei = httpx.post(f"{closed.url}/embed", json={"inputs": "x", "model": "BAAI/bge-m3"}, timeout=120)
    assert tei.status_code == 503, tei.text  # TEI's shape: a model that cannot run here is Unhealthy
    assert tei.json()["error_type"] == "Unhealthy" and tei.json()["code"] == "MODEL_UNAVAILABLE", tei.text


def test_lora_names_follow_the_same_rules(closed: LiveServer, disk: dict[str, Path]) -> None:
    adapter = disk["base"] / "adapter"
    adapter.mkdir(exist_ok=True)
    (adapter / "adapter_config.json").write_text("{}")
    for lora in (str(adapter), str(adapter) + "/", "~nosuchuser", "../adapter"):
        body = {"items": [{"text": "x"}], "params": {"options": {"lora": lora}}}
        r = httpx.post(f"{closed.url}/v1/encode/team/enc", json=body, timeout=120)
        assert r.status_code == 400 and r.json()["detail"]["code"] == "INVALID_INPUT", (lora, r.text)
        assert str(disk["base"]) not in r.text.replace(json.dumps(lora)[1:-1], "")


@pytest.fixture(scope="module")
def opened() -> Iterator[LiveServer]:
    srv = LiveServer(env={"SHOAL_LOCAL_MODELS": "1"}).wait_ready()  # the explicit opt-in
    yield srv
    srv.stop()


def test_with_local_folders_on_20_spellings_load_one_model_once(opened: LiveServer, tmp_path: Path) -> None:
    folder = make_tiny_bert(tmp_path / "shared", seed=5)
    spellings = path_spellings(folder)
    assert len(set(spellings)) == 20
    replies = [encode(opened, s) for s in spellings]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies if r.status_code != 200]
    native = httpx.post(f"{opened.url}/v1/encode/{folder}//", json={"items": [{"text": "hello world"}]}, timeout=60)
    assert native.json()["model"] == str(folder.resolve())  # the one canonical id
    vectors = np.array([r.json()["data"][0]["embedding"] for r in replies])
    np.testing.assert_allclose(vectors, np.repeat(vectors[:1], 20, axis=0), atol=1e-6)
    ok = {k: v for k, v in loads(opened).items() if 'outcome="ok"' in k and str(folder) in k}
    assert list(ok.values()) == [1.0]
    listed = [m["name"] for m in httpx.get(f"{opened.url}/v1/models").json()["models"]]
    assert listed.count(str(folder.resolve())) == 1 and len([n for n in listed if "shared" in n]) == 1


# -- the policy itself, in process ------------------------------------------------------------------


def test_folder_policy_rules(disk: dict[str, Path]) -> None:
    root = disk["root"]
    assert under(root, "team/enc") == ("team/enc", disk["enc"].resolve())
    assert under(root, "alias") == ("team/enc", disk["enc"].resolve())
    for name in ("escape", "../root/team/enc", "/etc", "team/enc/", "", ".", "~", "team//enc", "nope"):
        assert under(root, name) is None, name
    closed = Catalogue(folders=FolderPolicy(local=False, roots=(root,)))
    with pytest.raises(ModelNotFound):
        closed.get(str(disk["outside"]))
    assert closed.get("alias").id == "team/enc" and closed.is_listed("team/enc")
    with pytest.raises(ModelLoadFailed, match="'broken'"):
        closed.get("broken")
    opened = Catalogue()
    cards = {opened.get(s).id for s in path_spellings(disk["outside"])}
    assert cards == {str(disk["outside"].resolve())} and not opened.is_listed(str(disk["outside"].resolve()))
    for bad in ("", "x" * 600, "a\x00b", "bad\ud800"):
        with pytest.raises(InvalidInput):
            check_id(bad, "model id", 512)


def test_lora_spellings_are_one_adapter_and_local_paths_need_the_switch(tmp_path: Path) -> None:
    from engine.catalogue.cards import ModelCard

    card = ModelCard(id="m")
    adapters = tmp_path / "adapters"
    (adapters / "one").mkdir(parents=True)
    (adapters / "one" / "adapter_config.json").write_text("{}")
    outside = tmp_path / "outside-adapter"
    outside.mkdir()
    (outside / "adapter_config.json").write_text("{}")
    (adapters / "escape").symlink_to(outside)
    assert resolve_adapter(card, "one", AdapterPolicy(adapters, local=False)) == ("one", (adapters / "one").resolve())
    for name in (str(outside), "escape", "../outside-adapter", "one/", "~nosuchuser"):
        with pytest.raises(InvalidInput):
            resolve_adapter(card, name, AdapterPolicy(adapters, local=False))
    keys = {
        resolve_adapter(card, s, AdapterPolicy(None, local=True))[0]
        for s in (str(outside), f"{outside}/", f"{outside}//.")
    }
    assert keys == {str(outside.resolve())}


async def test_the_sdk_engine_opens_local_folders_and_the_server_settings_do_not(tmp_path: Path) -> None:
    folder = make_tiny_bert(tmp_path / "sdk", seed=6)
    async with AsyncEngine(EngineSettings()) as engine:  # the SDK: on
        a = await engine.encode(str(folder), "hello")
        b = await engine.encode(str(folder) + "//", "hello")
        np.testing.assert_allclose(a["dense"], b["dense"])
        assert engine.registry.resident() == [str(folder.resolve())]
    async with AsyncEngine(EngineSettings(local_models=False)) as engine:
        with pytest.raises(ModelNotFound):
            await engine.encode(str(folder), "hello")

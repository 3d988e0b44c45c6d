"""A request can ask for a precision (`options.precision`, e.g. float32): it is served by the model in that
precision, loaded as an entry of its own when the model's own entry runs another one, and the reply says which
precision served it; an unknown name, or one this device does not offer, is a 400. A card can pin float32."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from engine.catalogue.cards import Profile
from engine.config import EngineSettings
from engine.errors import InvalidInput
from engine.http.app import create_app
from engine.model.precision import available
from engine.residency.ledger import DEVICE
from engine.residency.store import ProfileStore
from engine.runtime import AsyncEngine
from engine.tasks.requests import EncodeOptions, EncodeRequest, EncodeRequestParams, Item
from engine.tasks.task import Task
from tests.extract_support import LABELS
from tests.helpers import make_tiny_bert
from tests.test_autotune import GOOD, BlockedTuner
from tests.tiny_models import make, write_card

REDUCED = [p for p in available("cpu") if p != "float32"]
pytestmark = pytest.mark.skipif(not REDUCED, reason="this CPU offers no precision but float32")
TUNED = REDUCED[0] if REDUCED else "float32"  # what the model's own entry runs in: as if a tune had chosen it
TEXTS = ["the cat sat on the mat", "paris is the capital of france"]
CE = "tiny/precision-ce"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("precision") / "m", seed=3))


def tuned_settings(tmp_path: Path, *models: str, **more: object) -> EngineSettings:
    """Settings whose profile store records TUNED for each of `models` on this CPU."""
    store = ProfileStore(tmp_path / "profiles.json")
    for model in models:
        store.put(model, "cpu", Profile(dtype=TUNED), {"auto": True, "reason": f"auto-tuned: {TUNED} (test record)"})
    return EngineSettings(profile_store=store.path, **more)  # type: ignore[arg-type]


def asking(precision: str | None) -> EncodeRequest:
    options = EncodeOptions(precision=precision)
    return EncodeRequest(items=[Item(text=t) for t in TEXTS], params=EncodeRequestParams(options=options))


async def test_float32_asked_of_a_tuned_model_is_served_by_a_float32_entry_of_its_own(
    tiny: str, tmp_path: Path
) -> None:
    async with AsyncEngine(tuned_settings(tmp_path, tiny)) as engine:
        tuned = await engine.run(tiny, asking(None))
        exact = await engine.run(tiny, asking("float32"))
        again = await engine.run(tiny, asking("float32"))
        reg = engine.registry
        assert tuned["precision"] == TUNED and exact["precision"] == again["precision"] == "float32"
        assert reg.tier(tiny) == DEVICE and reg.tier(tiny, "float32") == DEVICE  # both resident, keyed apart
        assert reg.ledger.loads == 2  # the float32 entry loaded once, then reused
        assert (await engine.model(tiny))["precision_in_use"]["precision"] == TUNED  # the model's own is untouched
        same = await engine.run(tiny, asking(TUNED))  # asking for what the own entry runs: no third entry
        assert same["precision"] == TUNED and reg.ledger.loads == 2
    async with AsyncEngine(EngineSettings(precision="float32", profile_store=tmp_path / "none.json")) as engine:
        reference = await engine.run(tiny, asking(None))
    vectors = [np.stack([np.asarray(i["dense"]["values"]) for i in r["items"]]) for r in (exact, tuned, reference)]
    np.testing.assert_array_equal(vectors[0], vectors[2])  # float32 asked: float32's very vectors
    assert not np.array_equal(vectors[1], vectors[2])  # and not the tuned precision's


async def test_asking_what_the_own_entry_runs_reuses_it(tiny: str, tmp_path: Path) -> None:
    async with AsyncEngine(EngineSettings(profile_store=tmp_path / "none.json")) as engine:  # untuned: float32
        first = await engine.run(tiny, asking("float32"))
        await engine.run(tiny, asking(None))
        assert first["precision"] == "float32" and engine.registry.ledger.loads == 1
        assert engine.registry.tier(tiny, "float32") != DEVICE  # no entry of its own was made


@pytest.mark.parametrize(
    ("precision", "message"),
    [("float64", "unknown precision 'float64'"), ("fp32", "unknown precision"), ("float16", "does not offer float16")],
)
async def test_an_unknown_or_unoffered_precision_is_a_400(precision: str, message: str, tiny: str) -> None:
    async with AsyncEngine(EngineSettings(), worker=False) as engine:  # refused before anything is queued
        with pytest.raises(InvalidInput) as caught:
            await engine.run(tiny, asking(precision))
    assert caught.value.status == 400 and message in caught.value.message
    assert "options.precision" in caught.value.message


def test_the_task_carries_the_precision_over_the_wire(tiny: str) -> None:
    engine = AsyncEngine(EngineSettings(), worker=False)
    task = engine.annotate(tiny, asking("float32"))
    assert task.precision == "float32" and Task.from_wire(task.to_wire()) == task


@pytest.fixture(scope="module")
def served(
    tiny: str, gliner_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, AsyncEngine]]:
    root = tmp_path_factory.mktemp("precision-http")
    make("bert", "ForSequenceClassification", root / "ce", num_labels=1)
    card = {"id": CE, "family": "bert", "pooling": "cls", "max_seq_len": 64, "source": {"path": str(root / "ce")}}
    write_card(root / "cards", {**card, "tasks": ["score"], "outputs": ["score"], "score": {"kind": "classifier"}})
    gliner = str(gliner_dirs["span"])
    engine = AsyncEngine(tuned_settings(root, tiny, CE, gliner, model_dir=root / "cards"))
    with TestClient(create_app(engine)) as client:
        yield client, engine


@pytest.mark.parametrize("kind", ["encode", "score", "extract"])
def test_over_http_each_task_can_ask_for_float32(
    kind: str, served: tuple[TestClient, AsyncEngine], tiny: str, gliner_dirs: dict[str, Path]
) -> None:
    client, engine = served
    model = {"encode": tiny, "score": CE, "extract": str(gliner_dirs["span"])}[kind]
    bodies = {
        "encode": lambda o: {"items": [{"text": t} for t in TEXTS], "params": {"options": o}},
        "score": lambda o: {"query": {"text": "a query"}, "items": [{"text": t} for t in TEXTS], "options": o},
        "extract": lambda o: {"items": [{"text": "the cat from paris"}], "params": {"labels": LABELS, "options": o}},
    }
    for asked, want in ((None, TUNED), ("float32", "float32")):
        reply = client.post(f"/v1/{kind}/{model}", json=bodies[kind]({} if asked is None else {"precision": asked}))
        assert reply.status_code == 200, reply.text
        assert reply.json()["precision"] == want and reply.headers["X-Precision"] == want
    assert engine.registry.tier(model, "float32") == DEVICE
    for asked, message in (("float64", "unknown precision"), ("float16", "does not offer")):
        reply = client.post(f"/v1/{kind}/{model}", json=bodies[kind]({"precision": asked}))
        assert reply.status_code == 400, reply.text
        detail = reply.json()["detail"]
        assert detail["code"] == "INVALID_INPUT" and message in detail["message"]


async def test_a_card_can_pin_float32_and_is_never_tuned(tiny: str, tmp_path: Path) -> None:
    """A card profile `dtype: float32, auto_tune: false` keeps float32 with auto-tune on (no tune starts)."""
    card = {"id": "tiny/pinned", "family": "bert", "pooling": "mean", "source": {"path": tiny}, "max_seq_len": 64}
    card |= {
        "tasks": ["encode"],
        "outputs": ["dense"],
        "profiles": {"default": {"dtype": "float32", "auto_tune": False}},
    }
    write_card(tmp_path / "cards", card)
    settings = EngineSettings(model_dir=tmp_path / "cards", auto_tune=True, profile_store=tmp_path / "p.json")
    async with AsyncEngine(settings) as engine:
        reply = await engine.run("tiny/pinned", asking(None))
        shown = (await engine.model("tiny/pinned"))["precision_in_use"]
        assert engine.registry.tuner.running("tiny/pinned") is False
    assert reply["precision"] == "float32" and shown["precision"] == "float32"
    assert "the model card asks for float32" in shown["reason"] and not (tmp_path / "p.json").exists()


async def test_float32_asked_while_tuning_then_after_the_switch(tiny: str, tmp_path: Path) -> None:
    """While the tune runs, the model's own entry is float32 and serves a float32 request; once the tune has
    switched it to another precision, float32 requests get an entry of their own."""
    tuner = BlockedTuner()
    settings = EngineSettings(profile_store=tmp_path / "profiles.json", auto_tune=True)
    async with AsyncEngine(settings, tuner=tuner) as engine:
        during = await engine.run(tiny, asking("float32"))
        assert tuner.entered.wait(30) and engine.registry.ledger.loads == 1
        tuner.gate.set()
        await engine.registry.tuner.wait(tiny)
        after = await engine.run(tiny, asking("float32"))
        default = await engine.run(tiny, asking(None))
        assert engine.registry.ledger.loads == 2
    assert during["precision"] == after["precision"] == "float32" and default["precision"] == GOOD


@pytest.mark.nats
async def test_over_nats_the_asked_precision_travels_with_the_task(tiny: str, tmp_path: Path) -> None:
    from tests.nats_support import NatsServer

    server = NatsServer(tmp_path / "js").start()
    try:
        async with AsyncEngine(tuned_settings(tmp_path, tiny, queue_url=server.url)) as engine:
            tuned, exact = await engine.run(tiny, asking(None)), await engine.run(tiny, asking("float32"))
    finally:
        server.stop()
    assert tuned["precision"] == TUNED and exact["precision"] == "float32"

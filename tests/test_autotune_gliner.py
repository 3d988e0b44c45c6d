"""GLiNER models are auto-tuned like the embedders: each precision is gated on its entities against float32's,
the fastest that passed is recorded and served, a broken variant is refused, and the record survives a restart."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

from engine.config import EngineSettings
from engine.model.gliner_runtime import GlinerModel
from engine.model.precision import available, device_profile
from engine.model.quantize import Int8Linear
from engine.residency.autotune import Outcome, Tunable, auto_tune, gateable
from engine.residency.entity_gate import MIN_ENTITY_F1, EntitySet, load_entity_set
from engine.runtime import AsyncEngine
from tests.extract_support import LABELS, load_through_catalogue

GOOD, BROKEN = "bfloat16", "float16"  # labels of the two test variants (any names a profile accepts)
TEXT = "the cat from paris met a dog in london"


@pytest.fixture(scope="module")
def few() -> EntitySet:
    """The shipped entity set's first twelve texts: enough spans on the tiny model, a quarter of the cost."""
    data = load_entity_set()
    return EntitySet(data.texts[:12], data.labels[:12])


@pytest.fixture(scope="module")
def reference(gliner_dirs: dict[str, Path]) -> GlinerModel:
    loaded = load_through_catalogue(str(gliner_dirs["span"]))
    assert isinstance(loaded, GlinerModel)
    return loaded


def test_variants(reference: Tunable, name: str) -> Tunable:
    """GOOD: an exact float32 copy labelled GOOD; BROKEN: one whose word embeddings are shuffled."""
    assert isinstance(reference, GlinerModel)
    copy = reference.variant("float32")
    if name == BROKEN:
        emb = max((m for m in copy.runtime.modules() if isinstance(m, nn.Embedding)), key=lambda m: m.num_embeddings)
        with torch.no_grad():
            emb.weight.copy_(emb.weight[torch.randperm(emb.num_embeddings, generator=torch.Generator().manual_seed(0))])
    return dataclasses.replace(copy, precision=device_profile(copy.card, copy.device, name))


test_variants.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def tune_two(reference: Tunable, stop: threading.Event, data: EntitySet | None = None) -> Outcome:
    """The real tune over the two test variants; any passing variant beats float32 (speed is not the point)."""
    return auto_tune(
        reference, stop, precisions=[BROKEN, GOOD], variant=test_variants, min_speedup=0.0, entity_set=data
    )


def test_a_gliner_card_is_gateable(reference: GlinerModel) -> None:
    assert gateable(reference.card)


def test_tune_refuses_the_broken_variant_and_picks_the_passing_one(reference: GlinerModel, few: EntitySet) -> None:
    outcome = tune_two(reference, threading.Event(), few)
    gates = outcome.report["gates"]
    assert gates[GOOD]["passed"] is True and gates[GOOD]["entity_f1"] == 1.0, gates
    assert gates[BROKEN]["passed"] is False and gates[BROKEN]["entity_f1"] < MIN_ENTITY_F1, gates
    assert gates[GOOD]["reference_entities"] >= 5  # the tiny model finds spans: the gate measures something
    assert outcome.model.precision.name == GOOD and outcome.profile.dtype == GOOD
    assert {r["dtype"] for r in outcome.report["grid"]} == {"float32", BROKEN, GOOD}
    assert all(r["tokens_per_s"] > 0 for r in outcome.report["grid"])  # speed comes from the gate run itself


@pytest.mark.skipif("int8" not in available("cpu"), reason="this CPU offers no int8")
def test_the_real_int8_variant_runs_quantised_and_is_gated(reference: GlinerModel, few: EntitySet) -> None:
    outcome = auto_tune(reference, precisions=["int8"], min_speedup=0.0, entity_set=few)
    gate = outcome.report["gates"]["int8"]
    assert "error" not in gate and 0.0 <= gate["entity_f1"] <= 1.0, gate
    if gate["passed"]:
        assert isinstance(outcome.model, GlinerModel) and outcome.model.precision.name == "int8"
        assert any(isinstance(m, Int8Linear) for m in outcome.model.runtime.modules())
    assert not any(isinstance(m, Int8Linear) for m in reference.runtime.modules())  # the reference is untouched


class BlockedTuner:
    """`tune_two` over the small set, waiting until `gate` is set; `calls` counts its runs."""

    def __init__(self, data: EntitySet) -> None:
        self.data, self.entered, self.gate, self.calls = data, threading.Event(), threading.Event(), 0

    def __call__(self, reference: Tunable, stop: threading.Event) -> Outcome:
        self.calls += 1
        self.entered.set()
        assert self.gate.wait(60), "the test never opened the gate"
        return tune_two(reference, stop, self.data)


async def test_first_gliner_load_tunes_records_and_a_restart_reuses_it(
    gliner_dirs: dict[str, Path], few: EntitySet, tmp_path: Path
) -> None:
    model = str(gliner_dirs["span"])
    settings = EngineSettings(profile_store=tmp_path / "profiles.json", auto_tune=True)
    tuner = BlockedTuner(few)
    async with AsyncEngine(settings, tuner=tuner) as engine:
        before = await engine.extract(model, TEXT, labels=LABELS)  # answered by float32 while the tune waits
        assert tuner.entered.wait(30)
        assert (await engine.model(model))["precision_in_use"]["tuning"] is True
        tuner.gate.set()
        await engine.registry.tuner.wait(model)
        after = await engine.extract(model, TEXT, labels=LABELS)
        info = await engine.model(model)
        assert info["precision_in_use"]["precision"] == GOOD and info["precision"]["selected"] == GOOD
        rows = {p["precision"]: p for p in info["precision"]["precisions"]}
        assert rows[BROKEN]["passed"] is False and rows[GOOD]["entity_f1"] == 1.0
    assert after["entities"] == before["entities"]  # GOOD is an exact copy
    entry = json.loads((tmp_path / "profiles.json").read_text())[f"{model}@cpu"]
    assert entry["profile"]["dtype"] == GOOD and entry["report"]["auto"] is True

    again = BlockedTuner(few)  # a restart reads the record: the recorded precision loads, no second tune
    async with AsyncEngine(settings, tuner=again) as engine:
        await engine.extract(model, TEXT, labels=LABELS)
        assert (await engine.model(model))["precision_in_use"]["precision"] == GOOD
        assert engine.registry.tuner.running(model) is False
    assert again.calls == 0 and tuner.calls == 1


@pytest.mark.skipif("int8" not in available("cpu"), reason="this CPU offers no int8")
def test_a_recorded_int8_gliner_loads_quantised(gliner_dirs: dict[str, Path], reference: GlinerModel) -> None:
    """What a restart loads for an int8 record: the Linear layers quantised, entities still found."""
    from engine.catalogue.weights import resolve_weights
    from engine.model.loaded import LoadSpec
    from engine.model.loader import load
    from engine.model.lora import AdapterCache

    card = reference.card
    spec = LoadSpec(card, resolve_weights(card), "cpu", device_profile(card, "cpu", "int8"), AdapterCache())
    loaded = load(spec)
    assert isinstance(loaded, GlinerModel) and loaded.precision.name == "int8"
    assert any(isinstance(m, Int8Linear) for m in loaded.runtime.modules())
    assert loaded.tensor_bytes() < reference.tensor_bytes()

"""Shared bits of the residency tests: four tiny models, a budget that fits a given number of them, a gated loader."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from engine.catalogue.catalogue import Catalogue
from engine.model.loaded import LoadedModel, LoadSpec
from engine.model.loader import load
from engine.residency import footprint
from tests.helpers import make_tiny_bert


def tiny_models(root: Path, n: int = 4) -> list[str]:
    return [str(make_tiny_bert(root / f"m{i}", seed=i + 1)) for i in range(n)]


def budget_for(model: str, count: float) -> int:
    """Device bytes that fit `count` copies of the model (weights + activation reserve)."""
    card = Catalogue().get(model)
    weights, reserve = footprint.estimate(
        Path(model), card.profile(None).max_batch_tokens, card.max_seq_len, torch.float32
    )
    return int(count * (weights + reserve))


class GatedLoader:
    """The engine's loader, counting its calls; when gated, each call blocks until `open()`.

    `entered` is set once a load has started (and is waiting at the gate), so tests wait on that instead of
    sleeping."""

    def __init__(self, gated: bool = False) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.gate = threading.Event()
        if not gated:
            self.gate.set()

    def open(self) -> None:
        self.gate.set()

    def __call__(self, spec: LoadSpec) -> LoadedModel:
        self.calls += 1
        self.entered.set()
        assert self.gate.wait(60), "the test never opened the gate"
        return load(spec)

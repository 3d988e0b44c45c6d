"""Shared bits of the residency tests: four tiny models and a budget that fits a given number of them."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from engine import footprint
from engine.cards import Catalogue
from engine.runner import load_model
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
    """load_model that counts its calls and, when gated, blocks until `open()`."""

    def __init__(self, gated: bool = False) -> None:
        self.calls = 0
        self.gate = threading.Event()
        if not gated:
            self.gate.set()

    def open(self) -> None:
        self.gate.set()

    def __call__(self, card, device, offline):  # noqa: ANN001 - the Loader signature
        self.calls += 1
        self.gate.wait(30)
        return load_model(card, device, offline)

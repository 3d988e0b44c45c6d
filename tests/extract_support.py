"""Shared bits of the extract tests: tiny GLiNER checkpoints, their catalogue cards, texts, and a direct loader.

Registered as a plugin by tests/conftest.py (its fixtures are visible to every test); it imports nothing heavy
until a fixture or helper runs.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import WORDS

if TYPE_CHECKING:
    from engine.model.loaded import LoadedModel

LABELS = ["city", "animal", "person"]
VARIANTS = {  # name -> (builder arguments, a threshold at which the random model finds entities)
    "span": ({}, 0.5),
    "token": ({"span_mode": "token_level"}, 0.05),
    "bi-span": ({"bi_encoder": True}, 0.5),
    "bi-token": ({"bi_encoder": True, "span_mode": "token_level"}, 0.05),
}
GLINER_ID = "tiny/gliner"


def texts(n: int, seed: int = 0, lo: int = 1, hi: int = 40) -> list[str]:
    """Sentences of the tiny vocabulary, `lo` to `hi` words, some with punctuation."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(lo, hi))]
        if len(words) > 3:
            words[rnd.randrange(len(words))] += rnd.choice([",", ".", "!"])
        out.append(" ".join(words))
    return out


def gliner_card(folder: Path, cards: Path, model_id: str = GLINER_ID, **extract: Any) -> Path:
    """A YAML catalogue card for a GLiNER folder (family gliner, weights at its path)."""
    from tests.tiny_models import write_card

    card = {
        "id": model_id,
        "family": "gliner",
        "description": "tiny random GLiNER for tests",
        "source": {"path": str(folder)},
        "tasks": ["extract"],
        "outputs": ["entities"],
        "max_seq_len": 256,
        "extract": {"kind": "gliner", **extract},
        "profiles": {"default": {"max_batch_tokens": 4096, "max_batch_items": 64}},
    }
    write_card(cards, card)
    return cards


def load_through_catalogue(model: str, cards: Path | None = None) -> LoadedModel:
    """The model as residency loads it: card from the catalogue, weights resolved, the family's loader."""
    from engine.catalogue.catalogue import Catalogue
    from engine.catalogue.weights import resolve_weights
    from engine.model.loaded import LoadSpec
    from engine.model.loader import load
    from engine.model.lora import AdapterCache
    from engine.model.precision import device_profile

    card = Catalogue(cards).get(model)
    return load(LoadSpec(card, resolve_weights(card), "cpu", device_profile(card, "cpu"), AdapterCache()))


@pytest.fixture(scope="session")
def gliner_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four GLiNER variants (span / token level, uni / bi-encoder), built once."""
    from tests.tiny_gliner import make_tiny_gliner

    root = tmp_path_factory.mktemp("gliner")
    return {name: make_tiny_gliner(root / name, **kw) for name, (kw, _) in VARIANTS.items()}


@pytest.fixture(scope="session")
def gliner_cards(gliner_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A card folder naming the span variant `tiny/gliner`."""
    return gliner_card(gliner_dirs["span"], tmp_path_factory.mktemp("gliner-cards"))

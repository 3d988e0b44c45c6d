"""The catalogue: built-in and extra YAML cards, plus cards inferred from local checkpoint folders."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from engine.catalogue.cards import ModelCard, TaskKind
from engine.catalogue.inference import infer_card
from engine.errors import InvalidInput, ModelLoadFailed, ModelNotFound

CATALOGUE_DIR = Path(__file__).parent / "models"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: 10x faster


def load_card_file(path: Path) -> ModelCard:
    """Parse and validate one YAML card."""
    try:
        return ModelCard.model_validate(yaml.load(path.read_text(), Loader=YAML_LOADER))
    except (ValidationError, yaml.YAMLError) as e:
        raise ModelLoadFailed(f"invalid model card {path}: {e}") from e


@cache
def _builtin_cards() -> dict[str, ModelCard]:
    return {c.id: c for c in map(load_card_file, sorted(CATALOGUE_DIR.glob("*.yaml")))}


class Catalogue:
    """The known cards (built-in plus an optional extra folder) and local checkpoint folders."""

    def __init__(self, extra_dir: Path | None = None) -> None:
        self.cards: dict[str, ModelCard] = dict(_builtin_cards())
        if extra_dir is not None:
            for path in sorted(Path(extra_dir).glob("*.yaml")):
                card = load_card_file(path)
                self.cards[card.id] = card
        self._local: dict[str, ModelCard] = {}

    def ids(self) -> list[str]:
        return sorted(self.cards)

    def get(self, model: str) -> ModelCard:
        """The card for a catalogue id, or one inferred from a local checkpoint folder."""
        if model in self.cards:
            return self.cards[model]
        if model in self._local:
            return self._local[model]
        path = Path(model).expanduser()
        if path.is_dir():
            card = infer_card(path, model_id=model)
            self._local[model] = card
            return card
        raise ModelNotFound(f"no model {model!r} in the catalogue, and no checkpoint folder at that path")

    def known(self) -> list[ModelCard]:
        return [self.cards[i] for i in self.ids()] + list(self._local.values())


def check_task(card: ModelCard, task: TaskKind) -> None:
    if task not in card.tasks:
        raise InvalidInput(f"model {card.id!r} does not support {task!r}; it supports {card.tasks}")


def model_info(card: ModelCard, loaded: bool) -> dict[str, Any]:
    """What /v1/models and `shoal models` show for one card."""
    dims: dict[str, int] = {}
    if card.dense_dim and "dense" in card.outputs:
        dims["dense"] = card.dense_dim
    if card.multivector is not None and "multivector" in card.outputs:
        dim = card.multivector.dim or card.dense_dim
        if dim:
            dims["multivector"] = dim
    if card.sparse is not None and card.sparse.vocab_size:
        dims["sparse"] = card.sparse.vocab_size
    return {
        "name": card.id,
        "description": card.description,
        "family": card.family,
        "tasks": card.tasks,
        "inputs": ["text"],
        "outputs": card.outputs,
        "dims": dims,
        "loaded": loaded,
        "state": "loaded" if loaded else "available",
        "max_sequence_length": card.max_seq_len,
        "profiles": sorted(card.profiles),
    }

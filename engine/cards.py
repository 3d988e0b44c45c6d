"""Model cards: the declarative, pydantic-validated description of one servable model."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.errors import InvalidInput, ModelLoadFailed, ModelNotFound

Task = Literal["encode", "score", "extract"]
OutputType = Literal["dense", "sparse", "multivector", "score"]
Pooling = Literal["cls", "mean", "last"]

CATALOGUE_DIR = Path(__file__).parent / "models"


class WeightSource(BaseModel):
    """Where the weights may come from, tried in order: path, HF cache, package, hub."""

    model_config = ConfigDict(extra="forbid")

    path: Path | None = None
    hf_repo: str | None = None
    revision: str | None = None
    package: str | None = Field(default=None, description="installed Python package shipping the weights")
    package_subdir: str = ""


class Profile(BaseModel):
    """Batching settings for one device kind."""

    model_config = ConfigDict(extra="forbid")

    max_batch_tokens: int = 8192
    max_batch_items: int = 256
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"


class ModelCard(BaseModel):
    """One model: what it is, where its weights are, what it computes and how to batch it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    family: Literal["bert"] = "bert"
    description: str = ""
    source: WeightSource = Field(default_factory=WeightSource)
    tasks: list[Task] = Field(default_factory=lambda: ["encode"])
    outputs: list[OutputType] = Field(default_factory=lambda: ["dense"])
    dense_dim: int | None = None
    pooling: Pooling = "mean"
    normalize: bool = True
    matryoshka_dims: list[int] = Field(default_factory=list, description="dims the model was trained for")
    max_seq_len: int = 512
    truncate: bool = Field(default=True, description="truncate over-long input unless the request says not")
    query_instruction: str | None = None
    document_instruction: str | None = None
    profiles: dict[str, Profile] = Field(default_factory=lambda: {"default": Profile()})

    @model_validator(mode="after")
    def _check(self) -> ModelCard:
        if "default" not in self.profiles:
            raise ValueError("a card needs a 'default' profile")
        for name, p in self.profiles.items():
            if p.max_batch_tokens < self.max_seq_len:
                raise ValueError(
                    f"profile {name!r}: max_batch_tokens {p.max_batch_tokens} is below max_seq_len "
                    f"{self.max_seq_len}; one full-length input would never fit a batch"
                )
        return self

    def profile(self, name: str | None) -> Profile:
        if name is None:
            return self.profiles["default"]
        if name not in self.profiles:
            raise InvalidInput(f"model {self.id!r} has no profile {name!r}; it has {sorted(self.profiles)}")
        return self.profiles[name]


def load_card_file(path: Path) -> ModelCard:
    """Parse and validate one YAML card."""
    try:
        return ModelCard.model_validate(yaml.safe_load(path.read_text()))
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
            from engine.checkpoint import infer_card

            card = infer_card(path, model_id=model)
            self._local[model] = card
            return card
        raise ModelNotFound(f"no model {model!r} in the catalogue, and no checkpoint folder at that path")

    def known(self) -> list[ModelCard]:
        return [self.cards[i] for i in self.ids()] + list(self._local.values())


def check_task(card: ModelCard, task: Task) -> None:
    if task not in card.tasks:
        raise InvalidInput(f"model {card.id!r} does not support {task!r}; it supports {card.tasks}")

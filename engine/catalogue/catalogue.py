"""The catalogue: built-in and extra YAML cards, plus cards inferred from checkpoint folders the policy allows."""

from __future__ import annotations

from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from engine.catalogue.cards import ModelCard, TaskKind
from engine.catalogue.folders import FolderPolicy, check_id
from engine.catalogue.inference import infer_card
from engine.errors import InvalidInput, ModelLoadFailed, ModelNotFound

CATALOGUE_DIR = Path(__file__).parent / "models"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: 10x faster
FOLDER_CARDS = 1024  # cards inferred from folders kept (LRU); an evicted one is inferred again when asked for


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
    """The known cards (built-in plus an optional extra folder) and the checkpoint folders `folders` allows
    (by default any local folder: the SDK's behaviour; a server passes its own policy)."""

    def __init__(
        self, extra_dir: Path | None = None, folders: FolderPolicy | None = None, max_id_chars: int = 512
    ) -> None:
        self.cards: dict[str, ModelCard] = dict(_builtin_cards())
        if extra_dir is not None:
            for path in sorted(Path(extra_dir).glob("*.yaml")):
                card = load_card_file(path)
                self.cards[card.id] = card
        self.folders = folders or FolderPolicy()
        self.max_id_chars = max_id_chars
        self._folder_cards: OrderedDict[str, ModelCard] = OrderedDict()

    def ids(self) -> list[str]:
        return sorted(self.cards)

    def get(self, model: str) -> ModelCard:
        """The card for a catalogue id, or one inferred from a checkpoint folder the policy allows (every
        spelling of one folder gives the same card). 400 for a malformed id, 404 for anything else."""
        if model in self.cards:
            return self.cards[model]
        check_id(model, "model id", self.max_id_chars)
        card = self._folder_cards.get(model)
        if card is None:
            found = self.folders.find(model)
            if found is None:
                raise ModelNotFound(f"no model {model!r}: this server serves {self.folders.describe()}")
            model_id, folder = found
            card = self._folder_cards.get(model_id) or infer_card(folder, model_id=model_id)
            model = model_id
        self._folder_cards[model] = card
        self._folder_cards.move_to_end(model)
        while len(self._folder_cards) > FOLDER_CARDS:
            self._folder_cards.popitem(last=False)
        return card

    def is_listed(self, model: str) -> bool:
        """Whether `model` is a catalogue id or the id of a model-root folder already served (a bounded set:
        what a metrics label may hold)."""
        if model in self.cards:
            return True
        card = self._folder_cards.get(model)
        return card is not None and not Path(model).is_absolute()

    def known(self) -> list[ModelCard]:
        """Every card: the catalogue's, then each model-root folder's, then local folders already used."""
        out = [self.cards[i] for i in self.ids()]
        roots: set[str] = set()
        for model_id, folder in self.folders.root_folders():
            try:
                card = self._folder_cards.get(model_id) or infer_card(folder, model_id=model_id)
            except ModelLoadFailed:
                continue  # a broken checkpoint is not listed; asking for it says why
            out.append(card)
            roots.add(model_id)
        if self.folders.local:
            out += [c for i, c in self._folder_cards.items() if i not in roots and Path(i).is_absolute()]
        return out


def check_task(card: ModelCard, task: TaskKind) -> None:
    if task not in card.tasks:
        raise InvalidInput(f"model {card.id!r} does not support {task!r}; it supports {card.tasks}")


ExtractMode = Literal["entities", "nli", "embedding"]


def extract_mode(card: ModelCard) -> ExtractMode | None:
    """How a card extracts: GLiNER entities, NLI zero-shot classes, or classes by embedding similarity (any
    card with dense output); None when it cannot."""
    if card.extract is not None:
        return "entities" if card.extract.kind == "gliner" else "nli"
    if "encode" in card.tasks and "dense" in card.outputs:
        return "embedding"
    return None


def check_extract(card: ModelCard) -> ExtractMode:
    """The card's extract mode, or 400 for a model that cannot extract."""
    mode = extract_mode(card)
    if mode is None:
        raise InvalidInput(
            f"model {card.id!r} cannot extract: it is not a GLiNER model, an NLI cross-encoder or a dense "
            f"embedding model (it supports {card.tasks} with outputs {card.outputs})"
        )
    return mode


def check_serves(card: ModelCard, task: TaskKind) -> None:
    """400 for a model that does not serve `task`, the one check every task's entry makes: encode and score as
    the card lists them; extract by any of its modes (GLiNER, NLI, or classes by embedding similarity)."""
    if task == "extract":
        check_extract(card)
    else:
        check_task(card, task)


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
    tasks: list[str] = list(card.tasks)
    outputs: list[str] = list(card.outputs)
    mode = extract_mode(card)
    if mode is not None:  # embedding cards classify too; extract results are entities or classifications
        tasks += [] if "extract" in tasks else ["extract"]
        produced = "entities" if mode == "entities" else "classifications"
        outputs += [] if produced in outputs else [produced]
    return {
        "name": card.id,
        "description": card.description,
        "family": card.family,
        "tasks": tasks,
        "inputs": ["text"],
        "outputs": outputs,
        "dims": dims,
        "loaded": loaded,
        "state": "loaded" if loaded else "available",
        "max_sequence_length": card.max_seq_len,
        "profiles": sorted(card.profiles),
    }

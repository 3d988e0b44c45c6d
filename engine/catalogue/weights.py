"""Resolve a card's weights (path, HF cache, installed package, hub) and its LoRA adapters to local folders."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from engine.catalogue.cards import ModelCard
from engine.errors import InvalidInput, ModelLoadFailed

HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "1_Pooling/*", "1_Dense/*", "2_Dense/*"]
HUB_PATTERNS += ["colbert_linear.pt", "sparse_linear.pt"]  # BGE-M3 heads (plain tensors, read with weights_only)
# GLiNER checkpoints ship a pickled state dict (read with weights_only) and a bi-encoder's labels tokenizer
GLINER_PATTERNS = ["pytorch_model.bin", "labels_tokenizer/*"]


def has_weights(folder: Path, card: ModelCard) -> bool:
    """Whether a folder holds the card's weights: safetensors, or (GLiNER) its pytorch_model.bin."""
    return any(folder.glob("*.safetensors")) or (card.family == "gliner" and (folder / "pytorch_model.bin").is_file())


def _package_dir(package: str, subdir: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / subdir
    return folder if folder.is_dir() else None


def _hf_cache_dir(card: ModelCard, repo: str, revision: str | None) -> Path | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return folder if has_weights(folder, card) else None


def _hub_download(card: ModelCard, repo: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download

    patterns = HUB_PATTERNS + (GLINER_PATTERNS if card.family == "gliner" else [])
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=patterns))
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one clear load error
        raise ModelLoadFailed(f"could not download {repo!r} from the Hugging Face hub: {e}") from e


def resolve_weights(card: ModelCard, offline: bool | None = None) -> Path:
    """The folder holding config.json, safetensors and tokenizer files for this card."""
    src = card.source
    tried: list[str] = []
    if src.path is not None:
        if Path(src.path).is_dir():
            return Path(src.path)
        tried.append(f"path {src.path} (missing)")
    if src.hf_repo:
        found = _hf_cache_dir(card, src.hf_repo, src.revision)
        if found is not None:
            return found
        tried.append(f"HF cache for {src.hf_repo} (not cached)")
    if src.package:
        found = _package_dir(src.package, src.package_subdir)
        if found is not None:
            return found
        tried.append(f"package {src.package} (not installed)")
    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    if src.hf_repo and not offline:
        return _hub_download(card, src.hf_repo, src.revision)
    raise ModelLoadFailed(f"no weights for {card.id!r}; tried: {'; '.join(tried) or 'nothing configured'}")


def resolve_adapter(card: ModelCard, name: str, lora_dir: Path | None) -> Path:
    """Where a LoRA adapter lives: the card's `loras`, then the adapter folder, then a local folder path."""
    candidates = []
    if name in card.loras:
        candidates.append(Path(card.loras[name]).expanduser())
    if lora_dir is not None:
        candidates.append(Path(lora_dir).expanduser() / name)
    candidates.append(Path(name).expanduser())
    for folder in candidates:
        if (folder / "adapter_config.json").is_file():
            return folder
    raise InvalidInput(f"model {card.id!r} has no LoRA adapter {name!r}; known adapters: {sorted(card.loras)}")

"""Resolve a card's weights (path, HF cache, installed package, hub) and its LoRA adapters to local folders."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from engine.catalogue.cards import ModelCard
from engine.catalogue.folders import canonical, check_id, under
from engine.errors import InvalidInput, ModelUnavailable

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


def _hub_download(card: ModelCard, repo: str, revision: str | None) -> Path | str:
    """The downloaded folder, or why the download failed."""
    from huggingface_hub import snapshot_download

    patterns = HUB_PATTERNS + (GLINER_PATTERNS if card.family == "gliner" else [])
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=patterns))
    except Exception as e:  # noqa: BLE001 - any hub failure is one line of the unavailable message
        return f"hub download of {repo} (failed: {type(e).__name__})"


def how_to_provide(local: bool) -> str:
    """The ways to give a server weights, for the MODEL_UNAVAILABLE message."""
    ways = [
        "download them once with network access (unset HF_HUB_OFFLINE and SHOAL_OFFLINE) into the Hugging Face cache",
        "point a card's source.path (a YAML card in SHOAL_MODEL_DIR) at a checkpoint folder",
        "put the checkpoint folder under a model root (SHOAL_MODEL_ROOTS) and use its name",
    ]
    if local:
        ways.append("pass the checkpoint folder itself as the model id")
    return "; or ".join(ways)


def resolve_weights(card: ModelCard, offline: bool | None = None, show_paths: bool = True) -> Path:
    """The folder holding config.json, safetensors and tokenizer files for this card; 503 MODEL_UNAVAILABLE
    naming what was tried and how to provide the weights (server paths only when `show_paths`)."""
    src = card.source
    tried: list[str] = []
    if src.path is not None:
        if Path(src.path).is_dir():
            return Path(src.path)
        tried.append(f"source.path {src.path if show_paths else '(a server folder)'} (missing)")
    if src.hf_repo:
        found = _hf_cache_dir(card, src.hf_repo, src.revision)
        if found is not None:
            return found
        tried.append(f"Hugging Face cache for {src.hf_repo} (not cached)")
    if src.package:
        found = _package_dir(src.package, src.package_subdir)
        if found is not None:
            return found
        tried.append(f"package {src.package} (not installed)")
    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    if src.hf_repo and not offline:
        got = _hub_download(card, src.hf_repo, src.revision)
        if isinstance(got, Path):
            return got
        tried.append(got)
    elif src.hf_repo:
        tried.append("hub download (skipped: offline mode)")
    raise ModelUnavailable(
        f"model {card.id!r} has no weights on this server; tried: {'; '.join(tried) or 'no source configured'}. "
        f"To provide them: {how_to_provide(show_paths)}"
    )


def resolve_adapter(card: ModelCard, name: str, lora_dir: Path | None, local: bool = True) -> tuple[str, Path]:
    """(canonical name, folder) of a LoRA adapter: the card's `loras`, then a folder under the adapter folder,
    then (local folders on) any folder. Every spelling of one folder gives one name; 400 otherwise."""
    check_id(name, "LoRA adapter name", 512)
    candidates: list[tuple[str, Path]] = []
    if name in card.loras:
        candidates.append((name, Path(card.loras[name]).expanduser()))
    if lora_dir is not None:
        found = under(Path(lora_dir), name)
        if found is not None:
            candidates.append(found)
    if local:
        folder = canonical(Path(name))
        if folder is not None:
            candidates.append((str(folder), folder))
    for key, folder in candidates:
        try:
            if (folder / "adapter_config.json").is_file():
                return key, folder
        except OSError:  # a name too long for the filesystem
            continue
    raise InvalidInput(f"model {card.id!r} has no LoRA adapter {name!r}; known adapters: {sorted(card.loras)}")

"""Whether a card's weights are on this machine, and from where: a file-system look, no download, no import.

The same order as `resolve_weights` (explicit path, Hugging Face cache, installed package, hub when online),
cheap enough for `shoal models` and the console to ask about every card.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from engine.catalogue.cards import ModelCard

Source = Literal["path", "hf-cache", "package", "hub", "missing"]
COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class WeightsStatus:
    """Where a model's weights would be loaded from, or what was looked for when they are missing."""

    source: Source
    location: str | None = None
    tried: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        """True when the weights are on this machine (a load needs no network)."""
        return self.source in ("path", "hf-cache", "package")

    def summary(self) -> str:
        """One line: where the weights are, or what is missing and where it was looked for."""
        if self.available:
            return f"weights from {self.source}: {self.location}"
        if self.source == "hub":
            return f"weights not here; downloaded from the Hugging Face hub ({self.location}) on first use"
        return "no weights here; looked in " + "; ".join(self.tried or ("nothing configured",))

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.available, "source": self.source, "location": self.location, "tried": self.tried}


def hf_cache_root() -> Path:
    """The Hugging Face hub cache folder, from the same variables huggingface_hub reads."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def hf_cached(repo: str, revision: str | None) -> Path | None:
    """The cached snapshot of a repo at a revision (a branch or tag through refs/, or a commit) with safetensors."""
    folder = hf_cache_root() / f"models--{repo.replace('/', '--')}"
    rev = revision or "main"
    if not COMMIT.fullmatch(rev):
        try:
            rev = (folder / "refs" / rev).read_text().strip()
        except OSError:
            return None
    snapshot = folder / "snapshots" / rev
    return snapshot if snapshot.is_dir() and any(snapshot.glob("*.safetensors")) else None


def package_folder(package: str, subdir: str) -> Path | None:
    """The weights folder inside an installed package (found without importing it)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / subdir
    return folder if folder.is_dir() else None


def offline_mode(offline: bool | None) -> bool:
    if offline is not None:
        return offline
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no")


def weights_status(card: ModelCard, offline: bool | None = None) -> WeightsStatus:
    """Where `resolve_weights` would find this card's weights, without loading or downloading anything."""
    src, tried = card.source, []
    if src.path is not None:
        if Path(src.path).expanduser().is_dir():
            return WeightsStatus("path", str(src.path))
        tried.append(f"path {src.path} (missing)")
    if src.hf_repo:
        found = hf_cached(src.hf_repo, src.revision)
        if found is not None:
            return WeightsStatus("hf-cache", str(found))
        tried.append(f"HF cache {hf_cache_root()} (no {src.hf_repo})")
    if src.package:
        pkg = package_folder(src.package, src.package_subdir)
        if pkg is not None:
            return WeightsStatus("package", str(pkg))
        tried.append(f"package {src.package} (not installed)")
    if src.hf_repo and not offline_mode(offline):
        return WeightsStatus("hub", src.hf_repo, tuple(tried))
    if src.hf_repo:
        tried.append("the hub (offline: HF_HUB_OFFLINE / SHOAL_OFFLINE)")
    return WeightsStatus("missing", None, tuple(tried))

"""The one weights resolver: where a card's weights are (path, HF cache, package, hub) and its LoRA folders.

`weights_status` looks without downloading or importing anything (cheap enough for `shoal models`, the
console and the pipeline's checks to ask about every card); `resolve_weights` is the same look, then the hub
download when online. Both read the Hugging Face cache and `HF_HUB_OFFLINE` here and nowhere else, so what
is reported available is what loads.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.catalogue.cards import ModelCard
from engine.catalogue.folders import canonical, check_id, under
from engine.errors import InvalidInput, ModelUnavailable

Source = Literal["path", "hf-cache", "package", "hub", "missing"]
COMMIT = re.compile(r"[0-9a-f]{40}")
TRUE_VALUES = ("1", "ON", "YES", "TRUE")  # what huggingface_hub itself reads as set
HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "1_Pooling/*", "1_Dense/*", "2_Dense/*"]
HUB_PATTERNS += ["colbert_linear.pt", "sparse_linear.pt"]  # BGE-M3 heads (plain tensors, read with weights_only)
# GLiNER checkpoints ship a pickled state dict (read with weights_only) and a bi-encoder's labels tokenizer
GLINER_PATTERNS = ["pytorch_model.bin", "labels_tokenizer/*"]


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

    def to_dict(self) -> dict[str, object]:
        return {"available": self.available, "source": self.source, "location": self.location, "tried": self.tried}


def offline_mode(offline: bool | None) -> bool:
    """An explicit setting (SHOAL_OFFLINE), else HF_HUB_OFFLINE read as huggingface_hub reads it."""
    if offline is not None:
        return offline
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in TRUE_VALUES


def hf_cache_root() -> Path:
    """The Hugging Face hub cache folder, from the same variables huggingface_hub reads (`~` expanded)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def has_weights(folder: Path, card: ModelCard) -> bool:
    """Whether a folder holds the card's weights: safetensors, or (GLiNER) its pytorch_model.bin."""
    if any(folder.glob("*.safetensors")):
        return True
    return card.family == "gliner" and (folder / "pytorch_model.bin").is_file()


def hf_snapshot(repo: str, revision: str | None, root: Path | None = None) -> Path | None:
    """The cached snapshot folder of a repo at a revision (a branch or tag through refs/, or a commit)."""
    folder = (root or hf_cache_root()) / f"models--{repo.replace('/', '--')}"
    rev = revision or "main"
    if not COMMIT.fullmatch(rev):
        try:
            rev = (folder / "refs" / rev).read_text().strip()
        except OSError:
            return None
    snapshot = folder / "snapshots" / rev
    return snapshot if snapshot.is_dir() else None


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


def weights_status(card: ModelCard, offline: bool | None = None, show_paths: bool = True) -> WeightsStatus:
    """Where `resolve_weights` finds this card's weights, without loading or downloading anything; `tried`
    names server folders only when `show_paths`."""
    src, tried = card.source, []
    if src.path is not None:
        path = Path(src.path).expanduser()
        if path.is_dir():
            return WeightsStatus("path", str(path))
        tried.append(f"source.path {src.path if show_paths else '(a server folder)'} (missing)")
    if src.hf_repo:
        root = hf_cache_root()
        snapshot = hf_snapshot(src.hf_repo, src.revision, root)
        if snapshot is not None and has_weights(snapshot, card):
            return WeightsStatus("hf-cache", str(snapshot))
        where = f"HF cache {root}" if show_paths else "HF cache"
        at = f"{src.hf_repo}@{src.revision}" if src.revision else src.hf_repo
        tried.append(f"{where} ({'no weight files in ' + at if snapshot else 'no ' + at})")
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


def hub_patterns(card: ModelCard) -> list[str]:
    """The files of a card's hub repo that a load reads (a download fetches only these)."""
    return HUB_PATTERNS + (GLINER_PATTERNS if card.family == "gliner" else [])


def download(card: ModelCard, repo: str, revision: str | None) -> Path:
    """Download a card's weights from the hub into the cache `weights_status` reads (huggingface_hub resumes
    a partial download and shows its progress on stderr): the snapshot folder, which `has_weights` checks.
    Raises huggingface_hub's own errors."""
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(repo, revision=revision, allow_patterns=hub_patterns(card), cache_dir=hf_cache_root())
    )


def _hub_download(card: ModelCard, repo: str, revision: str | None) -> Path | str:
    """The downloaded folder (in the cache `weights_status` reads), or why the download failed."""
    try:
        folder = download(card, repo, revision)
    except Exception as e:  # noqa: BLE001 - any hub failure is one line of the unavailable message
        return f"hub download of {repo} (failed: {type(e).__name__})"
    return folder if has_weights(folder, card) else f"hub download of {repo} (no weight files in the repo)"


def how_to_provide(local: bool) -> str:
    """The ways to give a server weights, for the MODEL_UNAVAILABLE message."""
    ways = [
        "download them once with network access into the Hugging Face cache: `shoal models pull MODEL` (or unset "
        "HF_HUB_OFFLINE and SHOAL_OFFLINE, and the first use downloads them)",
        "point a card's source.path (a YAML card in SHOAL_MODEL_DIR) at a checkpoint folder",
        "put the checkpoint folder under a model root (SHOAL_MODEL_ROOTS) and use its name",
    ]
    if local:
        ways.append("pass the checkpoint folder itself as the model id")
    return "; or ".join(ways)


def resolve_weights(card: ModelCard, offline: bool | None = None, show_paths: bool = True) -> Path:
    """The folder holding config.json, weights and tokenizer files for this card: where `weights_status`
    finds them, else a hub download when online; 503 MODEL_UNAVAILABLE naming what was tried and how to
    provide the weights (server paths only when `show_paths`)."""
    status = weights_status(card, offline, show_paths)
    if status.available and status.location is not None:
        return Path(status.location)
    tried = list(status.tried)
    if status.source == "hub" and card.source.hf_repo:
        got = _hub_download(card, card.source.hf_repo, card.source.revision)
        if isinstance(got, Path):
            return got
        tried.append(got)
    raise ModelUnavailable(
        f"model {card.id!r} has no weights on this server; tried: {'; '.join(tried) or 'no source configured'}. "
        f"To provide them: {how_to_provide(show_paths)}"
    )


@dataclass(frozen=True)
class AdapterPolicy:
    """Where LoRA adapters may come from besides a card's `loras`: sub-folders of the adapter folder, the
    folders allowed by their path (canonical, resolved once here), and any folder when local folders are on."""

    lora_dir: Path | None = None
    local: bool = True
    allowed: frozenset[Path] = frozenset()

    @classmethod
    def of(cls, lora_dir: Path | None, local: bool, folders: Iterable[Path] = ()) -> AdapterPolicy:
        found = (canonical(Path(f)) for f in folders)
        return cls(lora_dir, local, frozenset(f for f in found if f is not None))


def resolve_adapter(card: ModelCard, name: str, policy: AdapterPolicy) -> tuple[str, Path]:
    """(canonical name, folder) of a LoRA adapter: the card's `loras`, then a folder under the adapter folder,
    then (local folders on, or one the policy allows by path) any folder. Every spelling of one folder gives
    one name; 400 otherwise."""
    check_id(name, "LoRA adapter name", 512)
    candidates: list[tuple[str, Path]] = []
    if name in card.loras:
        candidates.append((name, Path(card.loras[name]).expanduser()))
    if policy.lora_dir is not None:
        found = under(Path(policy.lora_dir), name)
        if found is not None:
            candidates.append(found)
    folder = canonical(Path(name))
    if folder is not None and (policy.local or folder in policy.allowed):
        candidates.append((str(folder), folder))
    for key, folder in candidates:
        try:
            if (folder / "adapter_config.json").is_file():
                return key, folder
        except OSError:  # a name too long for the filesystem
            continue
    raise InvalidInput(f"model {card.id!r} has no LoRA adapter {name!r}; known adapters: {sorted(card.loras)}")


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def adapter_signature(folder: Path) -> tuple[int, ...]:
    """(inode, size, mtime) of an adapter folder's two files: cheap to read on every request, and it changes
    whenever either file is written or replaced (a fit's re-tune), so a digest is recomputed only then."""
    out: list[int] = []
    for name in ADAPTER_FILES:
        try:
            s = os.stat(folder / name)
        except OSError:
            out += [-1, -1, -1]
            continue
        out += [s.st_ino, s.st_size, s.st_mtime_ns]
    return tuple(out)


def adapter_digest(folder: Path) -> str:
    """sha256 over an adapter folder's config and weights: what identifies an adapter's content, whatever its
    path (a re-tune written to the same folder is a different adapter); 'missing' for a file not there."""
    import hashlib

    h = hashlib.sha256()
    for name in ADAPTER_FILES:
        h.update(name.encode() + b"\0")
        try:
            with open(folder / name, "rb") as f:
                h.update(hashlib.file_digest(f, "sha256").digest())
        except OSError:
            h.update(b"missing")
    return h.hexdigest()

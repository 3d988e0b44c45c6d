"""PEFT LoRA adapters on our backbones: read, keep in an LRU cache, and apply per row inside one packed batch."""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from engine.arch.layers import PackedBatch
from engine.catalogue.inference import read_json
from engine.catalogue.weights import AdapterPolicy, adapter_digest, adapter_signature
from engine.errors import ModelLoadFailed
from engine.metrics import LORA_CACHE
from engine.model.quantize import Int8Linear

KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[\w-]+)?\.weight$")
_STATE = threading.local()  # the adapter groups of the forward pass running on this thread
Renames = list[tuple[str, str]]
Groups = list[tuple["Adapter", Tensor | None]]  # each adapter with its token rows (None: every row)


@dataclass(eq=False)
class Adapter:
    """One adapter's low-rank pairs, keyed by our module path: delta(x) = scale * x @ A.T @ B.T."""

    name: str
    weights: dict[str, tuple[Tensor, Tensor, float]]  # path -> (A [r, in], B [out, r], scale)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes + b.nbytes for a, b, _ in self.weights.values())


def _rename(name: str, renames: Renames) -> str:
    for pattern, repl in renames:
        name = re.sub(pattern, repl, name)
    return name


def read_adapter(name: str, folder: Path, renames: Renames, device: str, dtype: torch.dtype) -> Adapter:
    """A PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) mapped onto our module names
    with the family's checkpoint renames."""
    cfg = read_json(folder / "adapter_config.json")
    if not isinstance(cfg, dict):
        raise ModelLoadFailed(f"LoRA adapter {name!r}: {folder} has no adapter_config.json")
    problems = []
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        problems.append(f"peft_type {cfg.get('peft_type')!r} (only LORA)")
    if cfg.get("use_dora"):
        problems.append("DoRA")
    if cfg.get("fan_in_fan_out"):
        problems.append("fan_in_fan_out")
    if cfg.get("bias", "none") != "none":
        problems.append(f"bias {cfg.get('bias')!r}")
    if cfg.get("modules_to_save"):
        problems.append(f"modules_to_save {cfg['modules_to_save']}")
    if problems:
        raise ModelLoadFailed(f"LoRA adapter {name!r} uses what shoal does not support: {', '.join(problems)}")
    path = folder / "adapter_model.safetensors"
    if not path.is_file():
        raise ModelLoadFailed(f"LoRA adapter {name!r}: {path} is missing (only safetensors are loaded)")
    pairs: dict[str, dict[str, Tensor]] = {}
    hf_names: dict[str, str] = {}
    for key, tensor in load_file(str(path)).items():
        m = KEY.match(key)
        if m is None:
            raise ModelLoadFailed(f"LoRA adapter {name!r}: unexpected tensor {key!r}")
        ours = _rename(m["module"] + ".weight", renames).removesuffix(".weight")
        pairs.setdefault(ours, {})[m["ab"]] = tensor
        hf_names[ours] = m["module"]
    weights: dict[str, tuple[Tensor, Tensor, float]] = {}
    for module, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise ModelLoadFailed(f"LoRA adapter {name!r}: {hf_names[module]} lacks lora_A or lora_B")
        rank = int(ab["A"].shape[0])
        alpha = float(cfg.get("lora_alpha", rank))
        for pattern, value in (cfg.get("alpha_pattern") or {}).items():
            if re.search(rf"(^|\.){pattern}$", hf_names[module]):
                alpha = float(value)
        scale = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
        weights[module] = (ab["A"].to(device, dtype), ab["B"].to(device, dtype), scale)
    return Adapter(name, weights)


def _hook(path: str) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], Tensor]:
    def add_delta(_: nn.Module, inputs: tuple[Tensor, ...], out: Tensor) -> Tensor:
        groups: Groups | None = getattr(_STATE, "groups", None)
        if not groups:
            return out
        x = inputs[0]
        for adapter, rows in groups:
            w = adapter.weights.get(path)
            if w is None:
                continue
            a, b, scale = w
            if rows is None:  # every row of the batch uses this adapter
                out = out + (x @ a.T @ b.T) * scale
                continue
            out.index_add_(0, rows, (x[rows] @ a.T @ b.T) * scale)  # out is this layer's fresh output
        return out

    return add_delta


def install(backbone: nn.Module, adapter: Adapter) -> None:
    """Hook the Linear layers an adapter touches (once per module); without an active scope they do nothing."""
    for path, (a, b, _) in adapter.weights.items():
        try:
            module = backbone.get_submodule(path)
        except AttributeError:
            raise ModelLoadFailed(f"LoRA adapter {adapter.name!r} targets {path!r}, which this model lacks") from None
        linear = isinstance(module, nn.Linear | Int8Linear)  # an int8 profile's layers take the float delta alike
        if not linear or module.in_features != a.shape[1] or module.out_features != b.shape[0]:
            raise ModelLoadFailed(f"LoRA adapter {adapter.name!r}: {path!r} shapes do not match the model")
        if not getattr(module, "_shoal_lora", False):
            module.register_forward_hook(_hook(path))
            module._shoal_lora = True  # type: ignore[assignment]


class AdapterCache:
    """Loaded adapters per (model id, adapter content digest, precision), least recently used dropped past
    `capacity`; thread-safe. Keyed on the content, not the folder: an adapter rewritten in place (a taxonomy
    fit's re-tune) is read again, and the same files under two names are read once.

    One cache per residency manager (engine.residency), handed to every model it loads; `lora_dir` is the
    folder adapter names are looked up in (engine.catalogue.weights.resolve_adapter).
    """

    def __init__(
        self, capacity: int = 16, lora_dir: Path | None = None, local: bool = True, folders: tuple[Path, ...] = ()
    ) -> None:
        self.capacity = max(1, capacity)
        self.policy = AdapterPolicy.of(lora_dir, local, folders)  # where adapter names may point
        self._items: OrderedDict[tuple[str, str, str], Adapter] = OrderedDict()
        self._digests: OrderedDict[Path, tuple[tuple[int, ...], str]] = OrderedDict()  # folder -> (stat, digest)
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def digest(self, folder: Path) -> str:
        """The folder's content digest, recomputed only when its files' (inode, size, mtime) change."""
        signature = adapter_signature(folder)
        with self._lock:
            known = self._digests.get(folder)
            if known is not None and known[0] == signature:
                self._digests.move_to_end(folder)
                return known[1]
        digest = adapter_digest(folder)
        with self._lock:
            self._digests[folder] = (signature, digest)
            while len(self._digests) > 4 * self.capacity:
                self._digests.popitem(last=False)
        return digest

    def get(self, model: str, folder: Path, load: Callable[[], Adapter], precision: str = "float32") -> Adapter:
        """The cached adapter of the folder's current content, or `load()`'s (then cached); read apart for each
        precision the model runs in."""
        key = (model, self.digest(folder), precision)
        with self._lock:
            adapter = self._items.get(key)
            if adapter is not None:
                self._items.move_to_end(key)
                self.hits += 1
                LORA_CACHE.labels("hit").inc()
                return adapter
        self.misses += 1
        LORA_CACHE.labels("miss").inc()
        adapter = load()
        with self._lock:
            self._items[key] = adapter
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return adapter

    def drop_model(self, model: str) -> None:
        """Forget a model's adapters (its weights left the device; they reload with it)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == model]:
                del self._items[key]

    def __len__(self) -> int:
        return len(self._items)


@contextmanager
def active(adapters: list[Adapter | None], batch: PackedBatch) -> Iterator[None]:
    """Within the block, forward passes on this thread add each sequence's adapter (None: the base model)."""
    named = list(dict.fromkeys(a for a in adapters if a is not None))
    if not named:
        yield
        return
    groups: Groups
    if len(named) == 1 and all(a is named[0] for a in adapters):
        groups = [(named[0], None)]
    else:  # mixed batch: each adapter adds its delta to its own rows only (segment-wise, one forward pass)
        index = {id(a): k for k, a in enumerate(named)}
        per_seq = torch.tensor([index[id(a)] if a is not None else -1 for a in adapters])
        per_token = torch.repeat_interleave(per_seq, torch.tensor(batch.lengths)).to(batch.input_ids.device)
        groups = [(a, (per_token == k).nonzero().squeeze(1)) for k, a in enumerate(named)]
    previous = getattr(_STATE, "groups", None)
    _STATE.groups = groups
    try:
        yield
    finally:
        _STATE.groups = previous

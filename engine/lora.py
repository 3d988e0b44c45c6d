"""PEFT LoRA adapters on our backbones: read, keep in an LRU cache, and apply per row inside one packed batch."""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from engine.checkpoint import read_json
from engine.errors import InvalidInput, ModelLoadFailed
from engine.metrics import LORA_CACHE

if TYPE_CHECKING:
    from engine.arch.layers import PackedBatch
    from engine.cards import ModelCard
    from engine.runner import LoadedModel

KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[\w-]+)?\.weight$")
_STATE = threading.local()  # the adapter groups of the forward pass running on this thread
# How a batch mixing adapters runs: "grouped" (one forward per adapter, rows stitched back) or "per_row" (one
# forward, each adapter's delta added to its own rows). bench/lora_batching.py measured grouped faster on CPU.
MIXED = "grouped"


@dataclass
class Adapter:
    """One adapter's low-rank pairs, keyed by our module path: delta(x) = scale * x @ A.T @ B.T."""

    name: str
    weights: dict[str, tuple[Tensor, Tensor, float]]  # path -> (A [r, in], B [out, r], scale)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes + b.nbytes for a, b, _ in self.weights.values())


def _family_renames(family: str) -> list[tuple[str, str]]:
    from engine import loader

    families = getattr(loader, "FAMILIES", None)
    if families is not None and family in families:
        return list(families[family].renames)
    return list(getattr(loader, "HF_RENAMES", []))


def _rename(name: str, renames: list[tuple[str, str]]) -> str:
    for pattern, repl in renames:
        name = re.sub(pattern, repl, name)
    return name


def read_adapter(name: str, folder: Path, family: str, device: str | torch.device, dtype: torch.dtype) -> Adapter:
    """A PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) mapped onto our module names."""
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
    renames = _family_renames(family)
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


def _hook(path: str) -> Any:
    def add_delta(_: nn.Module, inputs: tuple[Tensor, ...], out: Tensor) -> Tensor:
        groups = getattr(_STATE, "groups", None)
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
        if not isinstance(module, nn.Linear) or module.in_features != a.shape[1] or module.out_features != b.shape[0]:
            raise ModelLoadFailed(f"LoRA adapter {adapter.name!r}: {path!r} shapes do not match the model")
        if not getattr(module, "_shoal_lora", False):
            module.register_forward_hook(_hook(path))
            module._shoal_lora = True  # type: ignore[assignment]


class LoraCache:
    """Loaded adapters per (model, name), least recently used dropped past `capacity`; thread-safe."""

    def __init__(self, capacity: int = 16, lora_dir: Path | None = None) -> None:
        self.capacity = max(1, capacity)
        self.lora_dir = lora_dir
        self._items: OrderedDict[tuple[str, str], Adapter] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def resolve(self, card: ModelCard, name: str) -> Path:
        """Where an adapter lives: the card's `loras`, then the adapter folder, then a local folder path."""
        candidates = []
        if name in card.loras:
            candidates.append(Path(card.loras[name]).expanduser())
        if self.lora_dir is not None:
            candidates.append(Path(self.lora_dir).expanduser() / name)
        candidates.append(Path(name).expanduser())
        for folder in candidates:
            if (folder / "adapter_config.json").is_file():
                return folder
        known = sorted(card.loras)
        raise InvalidInput(f"model {card.id!r} has no LoRA adapter {name!r}; known adapters: {known}")

    def get(self, loaded: LoadedModel, name: str) -> Adapter:
        key = (loaded.card.id, name)
        with self._lock:
            adapter = self._items.get(key)
            if adapter is not None:
                self._items.move_to_end(key)
                self.hits += 1
                LORA_CACHE.labels("hit").inc()
        if adapter is None:
            self.misses += 1
            LORA_CACHE.labels("miss").inc()
            dtype = next(loaded.backbone.parameters()).dtype
            adapter = read_adapter(name, self.resolve(loaded.card, name), loaded.card.family, loaded.device, dtype)
            with self._lock:
                self._items[key] = adapter
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
        install(loaded.backbone, adapter)
        return adapter

    def drop_model(self, model: str) -> None:
        """Forget a model's adapters (its weights left the device; they reload with it)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == model]:
                del self._items[key]

    def __len__(self) -> int:
        return len(self._items)


DEFAULT_CACHE = LoraCache()


def cache_of(loaded: LoadedModel) -> LoraCache:
    cache = getattr(loaded, "lora", None)
    return DEFAULT_CACHE if cache is None else cache


def task_adapter(loaded: LoadedModel, params: dict[str, Any]) -> str | None:
    """The adapter a task asks for (options.lora), loaded and checked now so only that task fails if it is bad."""
    name = (params.get("options") or {}).get("lora")
    if name:
        cache_of(loaded).get(loaded, name)
    return name or None


@contextmanager
def scope(loaded: LoadedModel, adapters: list[str | None] | None, batch: PackedBatch) -> Iterator[None]:
    """Within the block, forward passes on this thread add each row's adapter (None: the base model)."""
    names = sorted({a for a in adapters or [] if a})
    if not names:
        yield
        return
    cache = cache_of(loaded)
    objs = [cache.get(loaded, n) for n in names]
    if len(names) == 1 and all(a == names[0] for a in adapters or []):
        groups: list[tuple[Adapter, Tensor | None]] = [(objs[0], None)]
    else:  # mixed batch: each adapter adds its delta to its own rows only (segment-wise, one forward pass)
        index = {n: k for k, n in enumerate(names)}
        per_seq = torch.tensor([index[a] if a else -1 for a in adapters or []])
        per_token = torch.repeat_interleave(per_seq, torch.tensor(batch.lengths)).to(batch.input_ids.device)
        groups = [(obj, (per_token == k).nonzero().squeeze(1)) for k, obj in enumerate(objs)]
    previous = getattr(_STATE, "groups", None)
    _STATE.groups = groups
    try:
        yield
    finally:
        _STATE.groups = previous


def forward(loaded: LoadedModel, seqs: list[Any], batch: PackedBatch) -> Tensor:
    """The backbone over a packed batch with each sequence's adapter (its `lora` attribute) applied."""
    adapters = [getattr(s, "lora", None) for s in seqs]
    if MIXED == "per_row" or len(set(adapters)) <= 1:
        with scope(loaded, adapters, batch):
            return loaded.backbone(batch)
    bounds = batch.cu_seqlens.tolist()
    out: Tensor | None = None
    for name in dict.fromkeys(adapters):  # one forward per adapter, rows written back in place
        idx = [i for i, a in enumerate(adapters) if a == name]
        part = loaded.pack([seqs[i] for i in idx])
        with scope(loaded, [name] * len(idx), part):
            hidden = loaded.backbone(part)
        if out is None:
            out = hidden.new_empty((batch.num_tokens, hidden.shape[1]))
        rows = torch.cat([torch.arange(bounds[i], bounds[i + 1]) for i in idx]).to(hidden.device)
        out[rows] = hidden
    assert out is not None
    return out

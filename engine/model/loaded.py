"""What residency holds: any loaded model (ours or a third-party runtime's) behind a small protocol."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.catalogue.cards import ModelCard
from engine.model.lora import AdapterCache
from engine.model.precision import DeviceProfile


class LoadedModel(Protocol):
    """A model in memory: its card, where it is, what it weighs, and how to move it.

    Our packed-forward backbones (engine.model.packed.PackedModel) are one kind; a model run by another
    package (a GLiNER extractor, say) is another. Task handlers say which kind they need.
    """

    card: ModelCard
    device: str
    precision: DeviceProfile

    @property
    def max_len(self) -> int:
        """The longest input it reads, in tokens (a batch budget never goes below it)."""
        ...

    def tensor_bytes(self) -> int:
        """Measured bytes of its parameters and buffers."""
        ...

    def move_to(self, device: str) -> None:
        """Move every tensor to `device` (host RAM is 'cpu')."""
        ...


@dataclass(frozen=True)
class LoadSpec:
    """Everything one load needs, resolved once by whoever asks for the load (residency or a test)."""

    card: ModelCard
    folder: Path  # the resolved weights
    device: str
    precision: DeviceProfile
    adapters: AdapterCache


Loader = Callable[[LoadSpec], LoadedModel]

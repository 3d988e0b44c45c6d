"""Memory of a loaded model's modules: measured tensor bytes, moving between devices, out-of-memory test faults."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import torch
from torch import nn


def tensor_bytes(modules: Iterable[nn.Module]) -> int:
    """Measured bytes of the distinct storages behind the modules' parameters and buffers."""
    seen: set[int] = set()
    total = 0
    for module in modules:
        for t in [*module.parameters(), *module.buffers()]:
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
    return total


def move_modules(modules: Iterable[nn.Module], device: str) -> None:
    """Move every module; host copies of a CUDA model are pinned so the copy back is fast."""
    for module in modules:
        module.to(device, non_blocking=True)
        if device == "cpu" and torch.cuda.is_available():
            for t in [*module.parameters(), *module.buffers()]:
                t.data = t.data.pin_memory()
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def free_cuda_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class FaultInjector:
    """Test hook: make the next n checks at a site ("forward" or "load") raise torch.OutOfMemoryError.

    The engine takes one through its constructor (AsyncEngine(faults=...)); without one nothing is injected.
    """

    def __init__(self) -> None:
        self._armed: dict[str, int] = {}
        self._lock = threading.Lock()
        self.raised: dict[str, int] = {}

    def arm(self, site: str = "forward", times: int = 1) -> None:
        with self._lock:
            self._armed[site] = times

    def disarm(self) -> None:
        with self._lock:
            self._armed.clear()

    def check(self, site: str) -> None:
        with self._lock:
            left = self._armed.get(site, 0)
            if left <= 0:
                return
            self._armed[site] = left - 1
            self.raised[site] = self.raised.get(site, 0) + 1
        raise torch.OutOfMemoryError(f"injected out-of-memory at {site}")

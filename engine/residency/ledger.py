"""Residency's bookkeeping: the entries it holds, and what it did (totals plus fixed-size windows of recent events)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from engine.model.loaded import LoadedModel

DEVICE, HOST, DISK = "device", "host", "disk"
WINDOW = 256  # recent loads and evictions kept for inspection; totals are counters


@dataclass
class Entry:
    """One model held in memory, on the device or demoted to host RAM."""

    model: str
    loaded: LoadedModel
    tier: str
    tensor_bytes: int
    reserve_bytes: int  # activation room kept free beside it while on the device
    last_used: float
    pinned: bool = False
    in_use: int = 0  # batches running on it right now
    moving: bool = False  # a demotion or promotion is copying it

    def bytes_in(self, tier: str) -> int:
        return self.tensor_bytes + (self.reserve_bytes if tier == DEVICE else 0)


class LoadRecord(NamedTuple):
    """One bring-in: where the weights came from ("disk" or "host") and what it cost."""

    model: str
    source: str
    seconds: float
    disk_bytes: int


class Eviction(NamedTuple):
    model: str
    from_tier: str
    to_tier: str


@dataclass
class Ledger:
    """Totals since start, and the last WINDOW loads and evictions: nothing here grows with uptime."""

    loads: int = 0  # loads from disk
    swap_ins: int = 0  # promotions from host RAM
    evicted: int = 0
    disk_bytes_read: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {DISK: 0.0, HOST: 0.0})
    records: deque[LoadRecord] = field(default_factory=lambda: deque(maxlen=WINDOW))
    evictions: deque[Eviction] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def loaded(self, record: LoadRecord) -> None:
        self.records.append(record)
        self.seconds[record.source] += record.seconds
        self.disk_bytes_read += record.disk_bytes
        if record.source == DISK:
            self.loads += 1
        else:
            self.swap_ins += 1

    def evict(self, model: str, src: str, dst: str) -> None:
        self.evictions.append(Eviction(model, src, dst))
        self.evicted += 1

    def recent_disk_seconds(self, n: int = 8) -> list[float]:
        """Seconds of the last n loads from disk (the ETA a waiting request is told)."""
        return [r.seconds for r in self.records if r.source == DISK][-n:]

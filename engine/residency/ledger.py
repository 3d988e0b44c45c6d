"""Residency's bookkeeping: the entries it holds, and what it did (totals plus fixed-size windows of recent events)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Container
from dataclasses import dataclass, field
from typing import NamedTuple

from engine.metrics import EVICTIONS, RESIDENT_MODELS, TIER_BYTES
from engine.model.loaded import LoadedModel

DEVICE, HOST, DISK = "device", "host", "disk"
WINDOW = 256  # recent loads and evictions kept for inspection; totals are counters
Key = tuple[str, str | None]  # an entry: the model, and the precision a request asked for (None: the engine's)


def key_name(key: Key) -> str:
    """How messages name an entry: the model, with the precision a request asked for in brackets."""
    return key[0] if key[1] is None else f"{key[0]} ({key[1]})"


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
    asked: str | None = None  # the precision requests asked this entry for; None: the model's own entry

    @property
    def key(self) -> Key:
        return (self.model, self.asked)

    def bytes_in(self, tier: str) -> int:
        return self.tensor_bytes + (self.reserve_bytes if tier == DEVICE else 0)


class Entries(OrderedDict[Key, Entry]):
    """The entries residency holds, least recently used first."""

    def resident(self) -> list[str]:
        """Models with an entry on the device (not moving), least recently used first."""
        return list(dict.fromkeys(e.model for e in self.values() if e.tier == DEVICE and not e.moving))

    def used(self, tier: str) -> int:
        return sum(e.bytes_in(tier) for e in self.values() if e.tier == tier)

    def victim(self, tier: str, exclude: Key | None, wanted: Container[Key]) -> Entry | None:
        """The least recently used entry in `tier` that may be moved out: idle, not pinned, not wanted."""
        for e in self.values():
            busy = e.in_use or e.moving or e.key in wanted
            if e.tier == tier and not busy and not e.pinned and e.key != exclude:
                return e
        return None

    def publish(self) -> None:
        """Entries and bytes per tier, to the metrics."""
        for tier in (DEVICE, HOST):
            RESIDENT_MODELS.labels(tier).set(sum(1 for e in self.values() if e.tier == tier))
            TIER_BYTES.labels(tier).set(self.used(tier))

    def busy(self, wanted: Container[Key]) -> list[str]:
        """The device entries that cannot be moved out now (in use, moving, or wanted), by name."""
        return [key_name(k) for k, e in self.items() if e.tier == DEVICE and (e.in_use or e.moving or k in wanted)]


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
        EVICTIONS.labels(model, src, dst).inc()

    def eta(self) -> float:
        """Seconds a waiting request is told a load takes: the mean of the last loads from disk, at least 1."""
        recent = self.recent_disk_seconds()
        return max(1.0, sum(recent) / len(recent)) if recent else 1.0

    def recent_disk_seconds(self, n: int = 8) -> list[float]:
        """Seconds of the last n loads from disk (the ETA a waiting request is told)."""
        return [r.seconds for r in self.records if r.source == DISK][-n:]

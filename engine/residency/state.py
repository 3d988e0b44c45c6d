"""The state one worker's residency keeps (budgets, entries, loads in flight, waiters) and what it says of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from engine.catalogue.cards import ModelCard
from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.model.loaded import LoadedModel, Loader
from engine.model.loader import load
from engine.model.lora import AdapterCache
from engine.model.memory import FaultInjector
from engine.residency import footprint
from engine.residency.autotune import BackgroundTuner, Tuner
from engine.residency.ledger import DEVICE, DISK, HOST, Entries, Entry, Key, Ledger
from engine.residency.reports import PrecisionState
from engine.residency.tune import ProfileStore


class ResidencyState:
    """Budgets, entries keyed by (model, precision a request asked for), loads in flight and their waiters; the
    queries on them, and the change signal every job waits on. The jobs build on it: eviction.py (making room,
    idle TTL), loading.py (disk or host RAM -> device), manager.py (holding a model for a batch)."""

    def __init__(
        self,
        catalogue: Catalogue,
        device: str = "cpu",
        offline: bool | None = None,
        settings: EngineSettings | None = None,
        *,
        loader: Loader = load,
        clock: Callable[[], float] = time.monotonic,
        faults: FaultInjector | None = None,
        tuner: Tuner | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.settings = settings or EngineSettings(device=device, offline=offline)
        self.device, self.offline = device, offline
        self.host_device = "cpu"
        s = self.settings
        self.budget = {
            DEVICE: int(s.device_budget) if s.device_budget is not None else int(0.8 * footprint.total_memory(device)),
            HOST: int(s.host_budget) if s.host_budget is not None else int(0.25 * footprint.total_memory("cpu")),
        }
        self.pins = set(s.pin)
        self.adapters = AdapterCache(s.lora_cache_size, s.lora_dir, s.local_models, tuple(s.lora_folders))
        self.profiles = ProfileStore(s.profile_store)
        self.tuner = BackgroundTuner(s, self.profiles, tuner)
        self._loader, self._clock, self._faults = loader, clock, faults
        self._entries = Entries()
        self._loading: dict[Key, asyncio.Task[LoadedModel]] = {}
        self._reserved = 0  # device bytes promised to loads in flight
        self._wanted: dict[Key, int] = {}  # callers waiting to acquire an entry: it is not a victim meanwhile
        self._change = asyncio.Event()
        self._sweeper: asyncio.Task[None] | None = None
        self.ledger = Ledger()

    # -- what is where -----------------------------------------------------------------------------

    def resident(self) -> list[str]:
        """Models on the device, least recently used first."""
        return self._entries.resident()

    def is_loaded(self, model: str, precision: str | None = None) -> bool:
        e = self._entries.get(self._key(model, precision))
        return e is not None and e.tier == DEVICE and not e.moving

    def tier(self, model: str, precision: str | None = None) -> str:
        e = self._entries.get((model, precision))
        return e.tier if e is not None else DISK

    def _key(self, model: str, precision: str | None) -> Key:
        """The entry serving `model` in `precision`: the model's own when it runs (or would load in) that
        precision, else one of its own."""
        if precision is None:
            return (model, None)
        own, card = self._entries.get((model, None)), self.catalogue.get(model)
        runs = own.loaded.precision.name if own is not None else self.tuner.loads_in(card, self.device)
        return (model, None if runs == precision else precision)

    def used(self, tier: str) -> int:
        return self._entries.used(tier)

    def pinned_models(self) -> list[str]:
        return sorted(self.pins | {c.id for c in self.catalogue.known() if c.pinned})

    def precision_in_use(self, card: ModelCard) -> PrecisionState:
        """The precision the model runs in on the device now (None: not there), why, and whether a tune runs."""
        return self.tuner.state(card, self.device, self._entries.get((card.id, None)))

    def waiting(self, model: str) -> int:
        """Callers waiting to acquire `model` (its own entry) right now."""
        return self._wanted.get((model, None), 0)

    def _touch(self, e: Entry) -> None:
        e.last_used = self._clock()
        if e.key in self._entries:
            self._entries.move_to_end(e.key)

    def _notify(self) -> None:
        self._change.set()
        self._change = asyncio.Event()

    async def _wait_change(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._change.wait(), timeout)
            return True
        except TimeoutError:
            return False

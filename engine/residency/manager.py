"""Tiered residency of one worker's models: device, host RAM, disk; byte budgets, LRU demotion, single-flight loads."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

import torch

from engine.catalogue.cards import ModelCard
from engine.catalogue.catalogue import Catalogue
from engine.catalogue.weights import resolve_weights
from engine.config import EngineSettings
from engine.errors import ModelLoadFailed, ModelLoading, ResourceExhausted, ShoalError
from engine.metrics import EVICTIONS, LOAD_SECONDS, MODEL_LOADS, RESIDENT_MODELS, TIER_BYTES
from engine.model.allocator import freeze_heap
from engine.model.loaded import LoadedModel, Loader, LoadSpec
from engine.model.loader import load
from engine.model.lora import AdapterCache
from engine.model.memory import FaultInjector, free_cuda_cache
from engine.model.precision import device_profile
from engine.residency import footprint
from engine.residency.autotune import BackgroundTuner, Outcome, Tunable, Tuner, tunable
from engine.residency.ledger import DEVICE, DISK, HOST, Entry, Ledger, LoadRecord
from engine.residency.reports import PrecisionState
from engine.residency.tune import ProfileStore

log = logging.getLogger("shoal.residency")
__all__ = ["DEVICE", "DISK", "HOST", "ResidencyManager"]
P = ParamSpec("P")
R = TypeVar("R")


class ResidencyManager:
    """Model id -> LoadedModel on this worker's device, within device and host byte budgets.

    Collaborators come in through the constructor: `loader` (how a resolved model loads), `clock` (idle TTL),
    `faults` (out-of-memory injection for tests), `tuner` (the background precision tune of a first load).
    """

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
        self.adapters = AdapterCache(s.lora_cache_size, s.lora_dir, s.local_models)
        self.profiles = ProfileStore(s.profile_store)
        self.tuner = BackgroundTuner(s, self.profiles, tuner)
        self._loader, self._clock, self._faults = loader, clock, faults
        self._entries: OrderedDict[str, Entry] = OrderedDict()  # least recently used first
        self._loading: dict[str, asyncio.Task[LoadedModel]] = {}
        self._reserved = 0  # device bytes promised to loads in flight
        self._wanted: dict[str, int] = {}  # callers waiting to acquire a model: it is not a victim meanwhile
        self._change = asyncio.Event()
        self._sweeper: asyncio.Task[None] | None = None
        self.ledger = Ledger()

    # -- what is where -----------------------------------------------------------------------------

    def resident(self) -> list[str]:
        """Models on the device, least recently used first."""
        return [m for m, e in self._entries.items() if e.tier == DEVICE and not e.moving]

    def is_loaded(self, model: str) -> bool:
        e = self._entries.get(model)
        return e is not None and e.tier == DEVICE and not e.moving

    def tier(self, model: str) -> str:
        e = self._entries.get(model)
        return e.tier if e is not None else DISK

    def used(self, tier: str) -> int:
        return sum(e.bytes_in(tier) for e in self._entries.values() if e.tier == tier)

    def pinned_models(self) -> list[str]:
        return sorted(self.pins | {c.id for c in self.catalogue.known() if c.pinned})

    def precision_in_use(self, card: ModelCard) -> PrecisionState:
        """The precision the model runs in on the device now (None: not there), why, and whether a tune runs."""
        return self.tuner.state(card, self.device, self._entries.get(card.id))

    def waiting(self, model: str) -> int:
        """Callers waiting to acquire `model` right now."""
        return self._wanted.get(model, 0)

    # -- getting a model ---------------------------------------------------------------------------

    async def get(self, model: str, wait: float | None = None) -> LoadedModel:
        """The model on the device, brought in if needed (one load however many ask). With `wait`, give up
        after that many seconds with 503 MODEL_LOADING; the load carries on."""
        self._start_sweeper()
        e = self._entries.get(model)
        if e is not None and e.tier == DEVICE and not e.moving:
            self._touch(e)
            return e.loaded
        task = self._loading.get(model)
        if task is None:
            self.catalogue.get(model)  # unknown models fail now, not inside the load
            task = asyncio.create_task(self._bring_in(model), name=f"shoal-load-{model}")
            self._loading[model] = task
            task.add_done_callback(lambda t: self._load_done(model, t))
        try:
            return await asyncio.wait_for(asyncio.shield(task), wait)
        except TimeoutError:
            eta = self._eta()
            raise ModelLoading(f"model {model!r} is loading; retry in about {eta:.0f}s", retry_after=eta) from None

    async def acquire(self, model: str, wait: float | None = None) -> LoadedModel:
        """The model on the device, held there (never evicted) until `release(model)`."""
        self._wanted[model] = self._wanted.get(model, 0) + 1
        try:
            while True:
                loaded = await self.get(model, wait)
                e = self._entries.get(model)
                if e is not None and e.tier == DEVICE and not e.moving and e.loaded is loaded:
                    e.in_use += 1
                    return loaded
        finally:
            self._wanted[model] -= 1
            if not self._wanted[model]:
                del self._wanted[model]

    def release(self, model: str) -> None:
        e = self._entries.get(model)
        if e is not None and e.in_use > 0:
            e.in_use -= 1
            self._touch(e)
        self._notify()

    @asynccontextmanager
    async def use(self, model: str, wait: float | None = None) -> AsyncIterator[LoadedModel]:
        """Hold the model on the device for the block (one batch)."""
        loaded = await self.acquire(model, wait)
        try:
            yield loaded
        finally:
            self.release(model)

    def _load_done(self, model: str, task: asyncio.Task[LoadedModel]) -> None:
        if self._loading.get(model) is task:
            del self._loading[model]
        if not task.cancelled():
            task.exception()  # retrieved here; every waiter still gets it through its shield

    def _eta(self) -> float:
        recent = self.ledger.recent_disk_seconds()
        return max(1.0, sum(recent) / len(recent)) if recent else 1.0

    def _touch(self, e: Entry) -> None:
        e.last_used = self._clock()
        if e.model in self._entries:
            self._entries.move_to_end(e.model)

    def _notify(self) -> None:
        self._change.set()
        self._change = asyncio.Event()

    async def _wait_change(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._change.wait(), timeout)
            return True
        except TimeoutError:
            return False

    # -- bringing in -------------------------------------------------------------------------------

    async def _bring_in(self, model: str) -> LoadedModel:
        card = self.catalogue.get(model)
        e = self._entries.get(model)
        while e is not None and e.moving:  # a demotion of this model is under way: let it finish
            await self._wait_change(1.0)
            e = self._entries.get(model)
        try:
            if e is not None and e.tier == HOST:
                return await self._promote(e)
            return await self._load(card)
        except ShoalError:
            MODEL_LOADS.labels(model, "failed").inc()
            raise
        except Exception as exc:  # noqa: BLE001 - a load never kills the worker; it reports why
            MODEL_LOADS.labels(model, "failed").inc()
            raise ModelLoadFailed(f"loading {model!r} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._publish()

    async def _promote(self, e: Entry) -> LoadedModel:
        """Host RAM -> device: a copy of tensors already in memory; nothing is read from disk."""
        started = time.perf_counter()
        need = e.bytes_in(DEVICE)
        e.moving = True
        try:
            await self._make_room(need, exclude=e.model)
            self._reserved += need
            try:
                await self._guarded_load(e.model, e.loaded.move_to, self.device)
            finally:
                self._reserved -= need
            e.tier = DEVICE
        finally:
            e.moving = False
            self._notify()
        self._touch(e)
        seconds = time.perf_counter() - started
        self.ledger.loaded(LoadRecord(e.model, HOST, seconds, 0))
        LOAD_SECONDS.labels(HOST).observe(seconds)
        return e.loaded

    async def _load(self, card: ModelCard) -> LoadedModel:
        """Disk -> device: resolve the weights (once), measure the footprint from the headers, make room, load."""
        started = time.perf_counter()
        folder: Path = await asyncio.to_thread(resolve_weights, card, self.offline, self.settings.local_models)
        tuned = self.tuner.tuned(card, self.device)
        precision = device_profile(tuned, self.device, self.settings.precision)
        profile = precision.profile
        weights, reserve = footprint.estimate(folder, profile.max_batch_tokens, card.max_seq_len, precision.dtype)
        need = weights + reserve
        await self._make_room(need, exclude=card.id)
        self._reserved += need
        spec = LoadSpec(tuned, folder, self.device, precision, self.adapters)
        try:
            loaded: LoadedModel = await self._guarded_load(card.id, self._loader, spec)
        finally:
            self._reserved -= need
            self._notify()
        if tunable(loaded) and self.tuner.wanted(card, loaded, self.device):
            self.tuner.start(loaded, self._swap)  # float32 serves meanwhile
        pinned = card.pinned or card.id in self.pins
        self._entries[card.id] = Entry(card.id, loaded, DEVICE, loaded.tensor_bytes(), reserve, self._clock(), pinned)
        freeze_heap()  # the model's objects live long: out of the collector's full passes
        seconds = time.perf_counter() - started
        self.ledger.loaded(LoadRecord(card.id, DISK, seconds, footprint.disk_bytes(folder)))
        MODEL_LOADS.labels(card.id, "ok").inc()
        LOAD_SECONDS.labels(DISK).observe(seconds)
        if self.used(DEVICE) > self.budget[DEVICE]:  # the measured size beat the estimate: rebalance
            try:
                await self._make_room(0, exclude=card.id, wait=0.0)
            except ShoalError as exc:
                log.warning("device over budget after loading %s: %s", card.id, exc.message)
        return loaded

    def _swap(self, reference: Tunable, outcome: Outcome) -> None:
        """Serve the precision a background tune chose, if the model it tuned is still the one on the device."""
        e = self._entries.get(reference.card.id)
        if e is None or e.loaded is not reference or e.tier != DEVICE or e.moving:
            return
        self.adapters.drop_model(e.model)  # adapters were read in float32's dtype
        e.loaded, e.tensor_bytes = outcome.serving(reference.card, self.device), outcome.model.tensor_bytes()
        self._notify()
        self._publish()

    async def _guarded_load(self, model: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a load step in a thread; on out-of-memory evict every idle model and try once more."""
        for attempt in (0, 1):
            try:
                if self._faults is not None:
                    self._faults.check("load")
                return await asyncio.to_thread(fn, *args, **kwargs)
            except torch.OutOfMemoryError as exc:
                freed = await self.free_device(exclude=model)
                if attempt or not freed:
                    raise ResourceExhausted(f"out of memory loading {model!r}: {exc}") from exc
        raise AssertionError("unreachable")

    # -- making room -------------------------------------------------------------------------------

    async def _make_room(self, need: int, exclude: str, wait: float | None = None) -> None:
        """Demote least recently used idle models until `need` more device bytes fit the budget."""
        budget = self.budget[DEVICE]
        if need > budget:
            raise ModelLoadFailed(
                f"{exclude!r} needs {need} bytes on the device (weights + activation reserve); the device budget is {budget}"
            )
        deadline = time.monotonic() + (self.settings.evict_wait_s if wait is None else wait)
        while self.used(DEVICE) + self._reserved + need > budget:
            victim = self._victim(DEVICE, exclude)
            if victim is not None:
                await self._demote(victim)
                continue
            left = deadline - time.monotonic()
            busy = [
                m for m, e in self._entries.items() if e.tier == DEVICE and (e.in_use or e.moving or m in self._wanted)
            ]
            if left <= 0 or not (busy or self._reserved):
                raise ResourceExhausted(
                    f"no room for {exclude!r} on the device: {need} bytes needed, "
                    f"{budget - self.used(DEVICE) - self._reserved} free of {budget}; in use: {busy}, pinned: "
                    f"{[e.model for e in self._entries.values() if e.pinned]}"
                )
            await self._wait_change(left)

    def _victim(self, tier: str, exclude: str | None) -> Entry | None:
        for e in self._entries.values():
            busy = e.in_use or e.moving or e.model in self._wanted
            if e.tier == tier and not busy and not e.pinned and e.model != exclude:
                return e
        return None

    async def _demote(self, e: Entry) -> None:
        """Device -> host RAM (a copy; no disk read to come back), or dropped when host RAM is full."""
        e.moving = True
        try:
            need = e.bytes_in(HOST)
            while need <= self.budget[HOST] and self.used(HOST) + need > self.budget[HOST]:
                old = self._victim(HOST, e.model)
                if old is None:
                    break
                self._drop(old)
            if self.used(HOST) + need <= self.budget[HOST]:
                await asyncio.to_thread(e.loaded.move_to, self.host_device)
                e.tier = HOST
                self._record_eviction(e.model, DEVICE, HOST)
            else:
                self._drop(e)
        finally:
            e.moving = False
            self.adapters.drop_model(e.model)
            self._notify()
            self._publish()

    def _drop(self, e: Entry) -> None:
        """Forget the in-memory copy; the model is back to disk only."""
        self._entries.pop(e.model, None)
        self._record_eviction(e.model, e.tier, DISK)
        e.loaded = None  # type: ignore[assignment]
        free_cuda_cache()

    def _record_eviction(self, model: str, src: str, dst: str) -> None:
        self.ledger.evict(model, src, dst)
        EVICTIONS.labels(model, src, dst).inc()

    async def free_device(self, exclude: str | None = None) -> int:
        """Demote every idle, unpinned model but `exclude` (out-of-memory recovery). -> bytes freed."""
        freed = 0
        while (victim := self._victim(DEVICE, exclude)) is not None:
            freed += victim.bytes_in(DEVICE)
            await self._demote(victim)
        free_cuda_cache()
        return freed

    # -- idle TTL ----------------------------------------------------------------------------------

    async def sweep(self) -> None:
        """Demote device models idle longer than the TTL; drop host copies idle longer than it."""
        ttl = self.settings.idle_ttl_s
        if ttl is None:
            return
        now = self._clock()
        for e in list(self._entries.values()):
            if e.in_use or e.pinned or e.moving or now - e.last_used < ttl:
                continue
            if e.tier == DEVICE:
                await self._demote(e)
            elif e.tier == HOST and now - e.last_used >= 2 * ttl:
                self._drop(e)
        self._publish()

    def _start_sweeper(self) -> None:
        ttl = self.settings.idle_ttl_s
        if ttl is not None and self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_loop(max(0.05, min(ttl / 2, 30.0))), name="shoal-ttl")

    async def _sweep_loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self.sweep()

    async def aclose(self) -> None:
        await self.tuner.aclose()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def _publish(self) -> None:
        for tier in (DEVICE, HOST):
            RESIDENT_MODELS.labels(tier).set(sum(1 for e in self._entries.values() if e.tier == tier))
            TIER_BYTES.labels(tier).set(self.used(tier))

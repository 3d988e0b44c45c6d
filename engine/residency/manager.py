"""Tiered residency of one worker's models: device, host RAM, disk; byte budgets, LRU demotion, single-flight loads."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

import torch

from engine.catalogue.cards import ModelCard
from engine.catalogue.catalogue import Catalogue
from engine.catalogue.weights import resolve_weights
from engine.config import EngineSettings
from engine.errors import InvalidInput, ModelLoadFailed, ModelLoading, ResourceExhausted, ShoalError
from engine.metrics import LOAD_SECONDS, MODEL_LOADS
from engine.model.allocator import freeze_heap
from engine.model.loaded import LoadedModel, Loader, LoadSpec
from engine.model.loader import load
from engine.model.lora import AdapterCache
from engine.model.memory import FaultInjector, free_cuda_cache
from engine.model.precision import device_profile
from engine.residency import footprint
from engine.residency.autotune import BackgroundTuner, Outcome, Tunable, Tuner, tunable
from engine.residency.ledger import DEVICE, DISK, HOST, Entries, Entry, Key, Ledger, LoadRecord, key_name
from engine.residency.reports import PrecisionState
from engine.residency.tune import ProfileStore

log = logging.getLogger("shoal.residency")
__all__ = ["DEVICE", "DISK", "HOST", "ResidencyManager"]
P = ParamSpec("P")
R = TypeVar("R")


class ResidencyManager:
    """(model, precision a request asked for) -> LoadedModel on this worker's device, within device and host byte
    budgets. A request asking for a precision the model's own entry does not run in (say float32, where the model
    is tuned to int8) is served by an entry of its own.

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

    # -- getting a model ---------------------------------------------------------------------------

    async def get(self, model: str, wait: float | None = None, precision: str | None = None) -> LoadedModel:
        """The model (in `precision`, if given) on the device, brought in if needed (one load however many ask).
        With `wait`, give up after that many seconds with 503 MODEL_LOADING; the load carries on."""
        return await self._get(self._key(model, precision), wait)

    async def _get(self, key: Key, wait: float | None) -> LoadedModel:
        self._start_sweeper()
        e = self._entries.get(key)
        if e is not None and e.tier == DEVICE and not e.moving:
            self._touch(e)
            return e.loaded
        task, model = self._loading.get(key), key_name(key)
        if task is None:
            self.catalogue.get(key[0])  # unknown models fail now, not inside the load
            task = asyncio.create_task(self._bring_in(key), name=f"shoal-load-{model}")
            self._loading[key] = task
            task.add_done_callback(lambda t: self._load_done(key, t))
        try:
            return await asyncio.wait_for(asyncio.shield(task), wait)
        except TimeoutError:
            eta = self.ledger.eta()
            raise ModelLoading(f"model {model!r} is loading; retry in about {eta:.0f}s", retry_after=eta) from None

    async def acquire(self, model: str, wait: float | None = None, precision: str | None = None) -> Entry:
        """The model's entry (in `precision`, if given) on the device, held there (never evicted) until
        `release(entry)`."""
        while True:
            key = self._key(model, precision)  # again each time: a tune may have swapped the model's own entry
            self._wanted[key] = self._wanted.get(key, 0) + 1
            try:
                loaded = await self._get(key, wait)
                e = self._entries.get(key)
                held = e is not None and e.tier == DEVICE and not e.moving and e.loaded is loaded
                if e is not None and held and (precision is None or loaded.precision.name == precision):
                    e.in_use += 1
                    return e
            finally:
                self._wanted[key] -= 1
                if not self._wanted[key]:
                    del self._wanted[key]

    def release(self, e: Entry) -> None:
        e.in_use = max(0, e.in_use - 1)
        self._touch(e)
        self._notify()

    @asynccontextmanager
    async def use(
        self, model: str, wait: float | None = None, precision: str | None = None
    ) -> AsyncIterator[LoadedModel]:
        """Hold the model (in `precision`, if given) on the device for the block (one batch)."""
        e = await self.acquire(model, wait, precision)
        try:
            yield e.loaded
        finally:
            self.release(e)

    def _load_done(self, key: Key, task: asyncio.Task[LoadedModel]) -> None:
        if self._loading.get(key) is task:
            del self._loading[key]
        if not task.cancelled():
            task.exception()  # retrieved here; every waiter still gets it through its shield

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

    # -- bringing in -------------------------------------------------------------------------------

    async def _bring_in(self, key: Key) -> LoadedModel:
        model, asked = key
        card = self.catalogue.get(model)
        e = self._entries.get(key)
        while e is not None and e.moving:  # a demotion of this model is under way: let it finish
            await self._wait_change(1.0)
            e = self._entries.get(key)
        try:
            if e is not None and e.tier == HOST:
                return await self._promote(e)
            return await self._load(card, asked)
        except ShoalError:
            MODEL_LOADS.labels(model, "failed").inc()
            raise
        except Exception as exc:  # noqa: BLE001 - a load never kills the worker; it reports why
            MODEL_LOADS.labels(model, "failed").inc()
            raise ModelLoadFailed(f"loading {model!r} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._entries.publish()

    async def _promote(self, e: Entry) -> LoadedModel:
        """Host RAM -> device: a copy of tensors already in memory; nothing is read from disk."""
        started = time.perf_counter()
        need = e.bytes_in(DEVICE)
        e.moving = True
        try:
            await self._make_room(need, exclude=e.key)
            self._reserved += need
            try:
                await self._guarded_load(e.key, e.loaded.move_to, self.device)
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

    async def _load(self, card: ModelCard, asked: str | None = None) -> LoadedModel:
        """Disk -> device: resolve the weights (once), measure the footprint from the headers, make room, load;
        in the precision `asked` for, else the recorded, pinned or card's one."""
        started, key = time.perf_counter(), (card.id, asked)
        tuned = self.tuner.tuned(card, self.device)
        precision = device_profile(tuned, self.device, asked or self.settings.precision)
        if asked is not None and precision.name != asked:
            raise InvalidInput(f"this worker's device ({self.device}) cannot run precision {asked!r}")
        folder: Path = await asyncio.to_thread(resolve_weights, card, self.offline, self.settings.local_models)
        profile = precision.profile
        weights, reserve = footprint.estimate(folder, profile.max_batch_tokens, card.max_seq_len, precision.dtype)
        need = weights + reserve
        await self._make_room(need, exclude=key)
        self._reserved += need
        spec = LoadSpec(tuned, folder, self.device, precision, self.adapters)
        try:
            loaded: LoadedModel = await self._guarded_load(key, self._loader, spec)
        finally:
            self._reserved -= need
            self._notify()
        if asked is None and tunable(loaded) and self.tuner.wanted(card, loaded, self.device):
            self.tuner.start(loaded, self._swap)  # float32 serves meanwhile
        pinned = card.pinned or card.id in self.pins
        entry = Entry(card.id, loaded, DEVICE, loaded.tensor_bytes(), reserve, self._clock(), pinned, asked=asked)
        self._entries[key] = entry
        freeze_heap()  # the model's objects live long: out of the collector's full passes
        seconds = time.perf_counter() - started
        self.ledger.loaded(LoadRecord(card.id, DISK, seconds, footprint.disk_bytes(folder)))
        MODEL_LOADS.labels(card.id, "ok").inc()
        LOAD_SECONDS.labels(DISK).observe(seconds)
        if self.used(DEVICE) > self.budget[DEVICE]:  # the measured size beat the estimate: rebalance
            try:
                await self._make_room(0, exclude=key, wait=0.0)
            except ShoalError as exc:
                log.warning("device over budget after loading %s: %s", key_name(key), exc.message)
        return loaded

    def _swap(self, reference: Tunable, outcome: Outcome) -> None:
        """Serve the precision a background tune chose, if the model it tuned is still the one on the device."""
        e = self._entries.get((reference.card.id, None))
        if e is None or e.loaded is not reference or e.tier != DEVICE or e.moving:
            return
        self.adapters.drop_model(e.model)  # adapters were read in float32's dtype
        e.loaded, e.tensor_bytes = outcome.serving(reference.card, self.device), outcome.model.tensor_bytes()
        self._notify()
        self._entries.publish()

    async def _guarded_load(self, key: Key, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a load step in a thread; on out-of-memory evict every idle model and try once more."""
        for attempt in (0, 1):
            try:
                if self._faults is not None:
                    self._faults.check("load")
                return await asyncio.to_thread(fn, *args, **kwargs)
            except torch.OutOfMemoryError as exc:
                freed = await self.free_device(exclude=key)
                if attempt or not freed:
                    raise ResourceExhausted(f"out of memory loading {key_name(key)!r}: {exc}") from exc
        raise AssertionError("unreachable")

    # -- making room -------------------------------------------------------------------------------

    async def _make_room(self, need: int, exclude: Key, wait: float | None = None) -> None:
        """Demote least recently used idle models until `need` more device bytes fit the budget."""
        budget, name = self.budget[DEVICE], key_name(exclude)
        if need > budget:
            raise ModelLoadFailed(
                f"{name!r} needs {need} bytes on the device (weights + activation reserve); the device budget is {budget}"
            )
        deadline = time.monotonic() + (self.settings.evict_wait_s if wait is None else wait)
        while self.used(DEVICE) + self._reserved + need > budget:
            victim = self._entries.victim(DEVICE, exclude, self._wanted)
            if victim is not None:
                await self._demote(victim)
                continue
            left = deadline - time.monotonic()
            busy = self._entries.busy(self._wanted)
            if left <= 0 or not (busy or self._reserved):
                raise ResourceExhausted(
                    f"no room for {name!r} on the device: {need} bytes needed, "
                    f"{budget - self.used(DEVICE) - self._reserved} free of {budget}; in use: {busy}, pinned: "
                    f"{[e.model for e in self._entries.values() if e.pinned]}"
                )
            await self._wait_change(left)

    async def _demote(self, e: Entry) -> None:
        """Device -> host RAM (a copy; no disk read to come back), or dropped when host RAM is full."""
        e.moving = True
        try:
            need = e.bytes_in(HOST)
            while need <= self.budget[HOST] and self.used(HOST) + need > self.budget[HOST]:
                old = self._entries.victim(HOST, e.key, self._wanted)
                if old is None:
                    break
                self._drop(old)
            if self.used(HOST) + need <= self.budget[HOST]:
                await asyncio.to_thread(e.loaded.move_to, self.host_device)
                e.tier = HOST
                self.ledger.evict(e.model, DEVICE, HOST)
            else:
                self._drop(e)
        finally:
            e.moving = False
            self.adapters.drop_model(e.model)
            self._notify()
            self._entries.publish()

    def _drop(self, e: Entry) -> None:
        """Forget the in-memory copy; the model is back to disk only."""
        self._entries.pop(e.key, None)
        self.ledger.evict(e.model, e.tier, DISK)
        e.loaded = None  # type: ignore[assignment]
        free_cuda_cache()

    async def free_device(self, exclude: Key | None = None) -> int:
        """Demote every idle, unpinned entry but `exclude` (out-of-memory recovery). -> bytes freed."""
        freed = 0
        while (victim := self._entries.victim(DEVICE, exclude, self._wanted)) is not None:
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
        self._entries.publish()

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

"""Bringing a model in: disk -> device (resolve, measure, make room, load) or host RAM -> device, once per key."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import torch

from engine.catalogue.cards import ModelCard
from engine.catalogue.weights import resolve_weights
from engine.errors import InvalidInput, ModelLoadFailed, ResourceExhausted, ShoalError
from engine.metrics import LOAD_SECONDS, MODEL_LOADS
from engine.model.allocator import freeze_heap
from engine.model.loaded import LoadedModel, LoadSpec
from engine.model.precision import device_profile
from engine.residency import footprint
from engine.residency.autotune import Outcome, Tunable, tunable
from engine.residency.eviction import Eviction
from engine.residency.ledger import DEVICE, DISK, HOST, Entry, Key, LoadRecord, key_name

log = logging.getLogger("shoal.residency")
P = ParamSpec("P")
R = TypeVar("R")


class Loading(Eviction):
    """Single-flight loads: the one task bringing each key in, and the background tune a first load starts."""

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

    def _load_done(self, key: Key, task: asyncio.Task[LoadedModel]) -> None:
        if self._loading.get(key) is task:
            del self._loading[key]
        if not task.cancelled():
            task.exception()  # retrieved here; every waiter still gets it through its shield

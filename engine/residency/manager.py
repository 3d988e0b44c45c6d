"""Tiered residency of one worker's models: device, host RAM, disk; byte budgets, LRU demotion, single-flight loads.

The jobs are split by file: state.py (budgets, entries, queries), eviction.py (making room, idle TTL), loading.py
(bringing a model in); this one holds a model on the device for a batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from engine.errors import ModelLoading
from engine.model.loaded import LoadedModel
from engine.residency.ledger import DEVICE, DISK, HOST, Entry, Key, key_name
from engine.residency.loading import Loading

__all__ = ["DEVICE", "DISK", "HOST", "ResidencyManager"]


class ResidencyManager(Loading):
    """(model, precision a request asked for) -> LoadedModel on this worker's device, within device and host byte
    budgets. A request asking for a precision the model's own entry does not run in (say float32, where the model
    is tuned to int8) is served by an entry of its own.

    Collaborators come in through the constructor: `loader` (how a resolved model loads), `clock` (idle TTL),
    `faults` (out-of-memory injection for tests), `tuner` (the background precision tune of a first load).
    """

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

    async def aclose(self) -> None:
        await self.tuner.aclose()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

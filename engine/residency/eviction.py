"""Making room on the device: LRU demotion to host RAM (or a drop to disk), out-of-memory recovery, idle TTL."""

from __future__ import annotations

import asyncio
import time

from engine.errors import ModelLoadFailed, ResourceExhausted
from engine.model.memory import free_cuda_cache
from engine.residency.ledger import DEVICE, DISK, HOST, Entry, Key, key_name
from engine.residency.state import ResidencyState


class Eviction(ResidencyState):
    """Demote least recently used idle models, drop host copies when host RAM is full, sweep idle ones."""

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

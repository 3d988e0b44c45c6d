"""Out-of-memory recovery around a batch: evict and retry, then split, then RESOURCE_EXHAUSTED for what still fails."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import torch

from engine.errors import ResourceExhausted, ShoalError
from engine.metrics import OOM_RECOVERIES

T = TypeVar("T")
Outcome = Any  # a task's result dict or its ShoalError


class FaultInjector:
    """Test hook: make the next n checks at a site ("forward" or "load") raise torch.OutOfMemoryError."""

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


FAULTS = FaultInjector()


def free_cuda_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


async def run_resilient(
    run: Callable[[list[T], int], list[Outcome]],
    tasks: list[T],
    budget: int,
    floor: int,
    make_room: Callable[[], Awaitable[int]],
) -> list[Outcome]:
    """Outcomes of `run(tasks, token_budget)` (run in a thread), surviving out-of-memory errors.

    On the first OOM, `make_room()` evicts other models and the batch runs again. After that the token
    budget halves down to `floor` (smaller forward batches), then the tasks split in halves; a single task
    that fails at the floor gets RESOURCE_EXHAUSTED, and every other task still gets its own answer.
    """
    evicted = False

    async def attempt(part: list[T], tokens: int) -> list[Outcome]:
        nonlocal evicted
        try:
            return await asyncio.to_thread(_forward, run, part, tokens)
        except torch.OutOfMemoryError as e:
            free_cuda_cache()
            if not evicted:
                evicted = True
                freed = await make_room()
                OOM_RECOVERIES.labels("evict").inc()
                if freed:
                    return await attempt(part, tokens)
            if tokens // 2 >= floor:
                OOM_RECOVERIES.labels("smaller_batches").inc()
                return await attempt(part, tokens // 2)
            if len(part) > 1:
                OOM_RECOVERIES.labels("split").inc()
                half = len(part) // 2
                return await attempt(part[:half], tokens) + await attempt(part[half:], tokens)
            OOM_RECOVERIES.labels("exhausted").inc()
            err: ShoalError = ResourceExhausted(f"out of memory even alone at {tokens} tokens a batch: {e}")
            return [err]

    return await attempt(tasks, budget)


def _forward(run: Callable[[list[T], int], list[Outcome]], part: list[T], tokens: int) -> list[Outcome]:
    FAULTS.check("forward")
    return run(part, tokens)

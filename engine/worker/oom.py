"""Out-of-memory recovery around a batch: evict and retry, then split, then RESOURCE_EXHAUSTED for what still fails."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import torch

from engine.errors import ResourceExhausted, ShoalError
from engine.metrics import OOM_RECOVERIES
from engine.model.memory import FaultInjector, free_cuda_cache

T = TypeVar("T")
Outcome = Any  # a task's result dict or its ShoalError


async def run_resilient(
    run: Callable[[list[T], int], list[Outcome]],
    tasks: list[T],
    budget: int,
    floor: int,
    make_room: Callable[[], Awaitable[int]],
    faults: FaultInjector | None = None,
) -> list[Outcome]:
    """Outcomes of `run(tasks, token_budget)` (run in a thread), surviving out-of-memory errors.

    On the first OOM, `make_room()` evicts other models and the batch runs again. After that the token
    budget halves down to `floor` (smaller forward batches), then the tasks split in halves; a single task
    that fails at the floor gets RESOURCE_EXHAUSTED, and every other task still gets its own answer.
    """
    evicted = False

    def forward(part: list[T], tokens: int) -> list[Outcome]:
        if faults is not None:
            faults.check("forward")
        return run(part, tokens)

    async def attempt(part: list[T], tokens: int) -> list[Outcome]:
        nonlocal evicted
        try:
            return await asyncio.to_thread(forward, part, tokens)
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

"""The worker's one recovery policy for a shared batch: out of memory is survived (evict, smaller batches,
split, then RESOURCE_EXHAUSTED alone), and a batch that fails otherwise is halved until only the culprit fails."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import torch

from engine.errors import InternalError, ResourceExhausted, ShoalError
from engine.metrics import ISOLATED, OOM_RECOVERIES
from engine.model.memory import FaultInjector, free_cuda_cache
from engine.model.threads import in_compute_thread

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("shoal.worker")


class BatchRunner(Protocol[T, R]):
    """What the policy runs: a batch of tasks under a token budget (blocking: it runs in a thread), and the
    one remedy it cannot apply itself, making room on the device (bytes freed; 0 when nothing could go)."""

    def run(self, tasks: list[T], tokens: int) -> list[R]: ...

    async def make_room(self) -> int: ...


@dataclass
class _Tried:
    """The remedies one run of the policy has used so far."""

    evicted: bool = False


@dataclass
class Recovery(Generic[T, R]):
    """Runs a batch through `runner` so that every task gets its own answer or its own error.

    Out of memory: the first time, `make_room()` evicts other models and the batch runs again; after that
    the token budget halves down to `floor` (smaller forward batches), then the tasks split in halves; a
    single task that fails at the floor gets RESOURCE_EXHAUSTED. Another failure of the whole batch: each
    half runs apart, recursively, until a task that fails alone gets the error (a ShoalError as raised,
    anything else as INTERNAL); k culprits among n tasks cost about k * log2(n) extra runs, none when
    nothing fails. Each half starts with every out-of-memory remedy available again.
    """

    runner: BatchRunner[T, R]
    budget: int  # tokens a forward batch may take at first
    floor: int  # the smallest budget tried (the model's max_len: one sequence must still fit)
    model: str = ""  # for the metrics and the log
    faults: FaultInjector | None = field(default=None)

    async def run(self, tasks: list[T]) -> list[R | ShoalError]:
        """Outcomes of `tasks`, in order."""
        try:
            return await self._attempt(tasks, self.budget, _Tried())
        except Exception as e:  # noqa: BLE001 - any failure of a shared batch is narrowed down, never spread
            if len(tasks) == 1:
                if isinstance(e, ShoalError):
                    return [e]
                log.exception("a task of %s failed on its own", self.model)
                return [InternalError(f"{type(e).__name__}: {e}")]
            ISOLATED.labels(self.model).inc()
            half = len(tasks) // 2
            return await self.run(tasks[:half]) + await self.run(tasks[half:])

    async def _attempt(self, part: list[T], tokens: int, tried: _Tried) -> list[R | ShoalError]:
        try:
            return list(await in_compute_thread(self._forward, part, tokens))
        except torch.OutOfMemoryError as e:
            free_cuda_cache()
            if not tried.evicted:
                tried.evicted = True
                freed = await self.runner.make_room()
                OOM_RECOVERIES.labels("evict").inc()
                if freed:
                    return await self._attempt(part, tokens, tried)
            if tokens // 2 >= self.floor:
                OOM_RECOVERIES.labels("smaller_batches").inc()
                return await self._attempt(part, tokens // 2, tried)
            if len(part) > 1:
                OOM_RECOVERIES.labels("split").inc()
                half = len(part) // 2
                return await self._attempt(part[:half], tokens, tried) + await self._attempt(part[half:], tokens, tried)
            OOM_RECOVERIES.labels("exhausted").inc()
            return [ResourceExhausted(f"out of memory even alone at {tokens} tokens a batch: {e}")]

    def _forward(self, part: list[T], tokens: int) -> list[R]:
        if self.faults is not None:
            self.faults.check("forward")
        return self.runner.run(part, tokens)

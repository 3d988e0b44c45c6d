"""Batch isolation: when a shared batch fails as a whole, its tasks are re-run apart (halving) until each
failure is pinned on the task that causes it; every other task still gets its answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from engine.errors import InternalError, ShoalError
from engine.metrics import ISOLATED

T = TypeVar("T")
Outcome = Any  # a task's result dict or its ShoalError
log = logging.getLogger("shoal.worker")


async def run_isolated(
    run: Callable[[list[T]], Awaitable[list[Outcome]]], tasks: list[T], model: str = ""
) -> list[Outcome]:
    """Outcomes of `run(tasks)`, in order. If it raises, each half runs apart, recursively: a task that
    fails alone gets the error (a ShoalError as raised, anything else as INTERNAL), the others their
    results. k culprits among n tasks cost about k * log2(n) extra runs, and none when nothing fails."""
    try:
        return await run(tasks)
    except Exception as e:  # noqa: BLE001 - any failure of a shared batch is narrowed down, never spread
        if len(tasks) == 1:
            if isinstance(e, ShoalError):
                return [e]
            log.exception("a task of %s failed on its own", model)
            return [InternalError(f"{type(e).__name__}: {e}")]
        ISOLATED.labels(model).inc()
        half = len(tasks) // 2
        return await run_isolated(run, tasks[:half], model) + await run_isolated(run, tasks[half:], model)

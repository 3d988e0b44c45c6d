"""The task-handler table and the one place a batch of tasks is dispatched, timed and counted.

Tasks of one model are grouped by kind; each group goes to its handler, which must accept the loaded
model's kind. Timing (queue, tokenisation, inference) is filled here for every task and nowhere else on
the worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from engine.errors import InternalError, InvalidInput, ShoalError
from engine.metrics import STAGE_SECONDS
from engine.model.loaded import LoadedModel
from engine.queue.protocol import Result
from engine.tasks.task import Task
from engine.worker.batching import BatchLimits
from engine.worker.handlers.base import TaskHandler
from engine.worker.handlers.encode import EncodeHandler
from engine.worker.handlers.extract import ExtractHandler
from engine.worker.handlers.score import ScoreHandler

Outcome = Result | ShoalError
KindHook = Callable[[str, int, int], None]  # (task kind, items, tokens) of each forward batch

HANDLERS: dict[str, TaskHandler[Any, Any]] = {h.kind: h for h in (EncodeHandler(), ScoreHandler(), ExtractHandler())}


def run_tasks(
    model: LoadedModel,
    tasks: list[Task],
    limits: BatchLimits,
    on_batch: KindHook,
    pulled_at: float | None = None,
    handlers: dict[str, TaskHandler[Any, Any]] = HANDLERS,
) -> list[Outcome]:
    """Outcomes of a mixed list of one model's tasks, in the tasks' order."""
    outcomes: list[Outcome] = [InvalidInput(f"task kind {t.kind!r} is not served by this worker") for t in tasks]
    for kind in dict.fromkeys(t.kind for t in tasks):
        handler = handlers.get(kind)
        if handler is None:
            continue
        idx = [i for i, t in enumerate(tasks) if t.kind == kind]
        if not isinstance(model, handler.model_type):
            for i in idx:
                outcomes[i] = InvalidInput(f"model {model.card.id!r} cannot run {kind!r} tasks")
            continue
        started = time.perf_counter()
        ready: list[tuple[int, Any]] = []
        for i in idx:
            try:
                ready.append((i, handler.prepare(model, tasks[i])))
            except ShoalError as e:
                outcomes[i] = e
            except Exception as e:  # noqa: BLE001 - a task its handler cannot even prepare fails alone
                outcomes[i] = InternalError(f"{kind} task could not be prepared: {type(e).__name__}: {e}")
        prepared = time.perf_counter()
        STAGE_SECONDS.labels("tokenize").inc(prepared - started)
        results = handler.run(
            model,
            [(tasks[i], p) for i, p in ready],
            limits,
            partial(on_batch, kind),
        )
        done = time.perf_counter()
        for (i, _), result in zip(ready, results, strict=True):
            result["timing"] = {
                "queue_ms": max(0.0, (pulled_at or tasks[i].enqueued_at) - tasks[i].enqueued_at) * 1000,
                "tokenization_ms": (prepared - started) * 1000,
                "inference_ms": (done - prepared) * 1000,
            }
            outcomes[i] = result
    return outcomes

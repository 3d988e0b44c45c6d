"""The task-handler table and the one place a batch of one model's tasks is split by kind.

Tasks of one model are grouped by kind; each group goes to its handler's `serve` (prepare, run, finish,
timed there), which refuses a loaded model of a kind it cannot run.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from engine.errors import InvalidInput
from engine.model.loaded import LoadedModel
from engine.tasks.task import Task
from engine.worker.batching import BatchLimits
from engine.worker.handlers.base import Handler, Outcome
from engine.worker.handlers.encode import EncodeHandler
from engine.worker.handlers.extract import ExtractHandler
from engine.worker.handlers.score import ScoreHandler

__all__ = ["HANDLERS", "KindHook", "Outcome", "run_tasks"]

KindHook = Callable[[str, int, int], None]  # (task kind, items, tokens) of each forward batch

HANDLERS: dict[str, Handler] = {h.kind: h for h in (EncodeHandler(), ScoreHandler(), ExtractHandler())}


def run_tasks(
    model: LoadedModel,
    tasks: list[Task],
    limits: BatchLimits,
    on_batch: KindHook,
    pulled_at: float | None = None,
    handlers: dict[str, Handler] = HANDLERS,
) -> list[Outcome]:
    """Outcomes of a mixed list of one model's tasks, in the tasks' order: one handler call per kind."""
    outcomes: list[Outcome] = [InvalidInput(f"task kind {t.kind!r} is not served by this worker") for t in tasks]
    for kind in dict.fromkeys(t.kind for t in tasks):
        handler = handlers.get(kind)
        if handler is None:
            continue
        idx = [i for i, t in enumerate(tasks) if t.kind == kind]
        served = handler.serve(model, [tasks[i] for i in idx], limits, partial(on_batch, kind), pulled_at)
        for i, outcome in zip(idx, served, strict=True):
            outcomes[i] = outcome
    return outcomes

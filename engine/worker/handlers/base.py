"""The task-handler contract: prepare each task (tokenise; its own errors fail only it), then run them together."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from engine.catalogue.cards import TaskKind
from engine.errors import InternalError
from engine.model.loaded import LoadedModel
from engine.queue.protocol import Result
from engine.tasks.task import Task
from engine.worker.batching import BatchHook, BatchLimits

M = TypeVar("M", bound=LoadedModel)  # the loaded-model kind a handler needs
P = TypeVar("P")  # what preparing one task gives
Params = TypeVar("Params")


class TaskHandler(ABC, Generic[M, P]):
    """One task kind. The worker dispatches through a table of these (engine.worker.dispatch); a new kind is
    a new handler and one table entry, with no change to the worker loop."""

    kind: ClassVar[TaskKind]
    model_type: ClassVar[type | tuple[type, ...]]  # the LoadedModel class(es) it runs on (ours, or another package's)

    @abstractmethod
    def prepare(self, model: M, task: Task) -> P:
        """Tokenise (or otherwise ready) one task; a ShoalError here fails that task only."""

    @abstractmethod
    def run(self, model: M, work: list[tuple[Task, P]], limits: BatchLimits, on_batch: BatchHook) -> list[Result]:
        """The results of every prepared task, in order; the tasks share forward batches."""


def params_of(task: Task, kind: type[Params]) -> Params:
    """The task's params as the handler's params type (the dispatch table guarantees the kind)."""
    if not isinstance(task.params, kind):
        raise InternalError(f"task {task.id} of kind {task.kind!r} reached the handler for {kind.__name__}")
    return task.params


def usage(tokens: int) -> dict[str, Any]:
    return {"input_tokens": tokens}

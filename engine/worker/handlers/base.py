"""The task-handler contract: prepare each task (tokenise; its own errors fail only it), run them together,
finish each task's typed result; `serve` runs those three steps and is the one place tasks are timed."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import ClassVar, Generic, Protocol, TypeGuard, TypeVar

from engine.catalogue.cards import TaskKind
from engine.errors import InternalError, InvalidInput, ShoalError
from engine.metrics import STAGE_SECONDS
from engine.model.loaded import LoadedModel
from engine.tasks.results import EncodeReply, ExtractReply, ScoreReply, Timing, Usage
from engine.tasks.task import Task
from engine.worker.batching import BatchHook, BatchLimits

TaskResult = EncodeReply | ScoreReply | ExtractReply
Outcome = TaskResult | ShoalError  # what a task settles with: its result, or the error that fails it alone

M = TypeVar("M", bound=LoadedModel)  # the loaded-model kind a handler needs
P = TypeVar("P")  # what preparing one task gives
Out = TypeVar("Out")  # what running gives one task, before it is shaped
R = TypeVar("R", EncodeReply, ScoreReply, ExtractReply)  # the task kind's typed result
Params = TypeVar("Params")


class Handler(Protocol):
    """What the dispatch table holds: a task kind and the call that serves a group of its tasks."""

    @property
    def kind(self) -> TaskKind: ...

    def serve(
        self, model: LoadedModel, tasks: list[Task], limits: BatchLimits, on_batch: BatchHook, pulled_at: float | None
    ) -> list[Outcome]: ...


class TaskHandler(ABC, Generic[M, P, Out, R]):
    """One task kind. The worker dispatches through a table of these (engine.worker.dispatch); a new kind is
    a new handler and one table entry, with no change to the worker loop."""

    kind: ClassVar[TaskKind]
    model_type: ClassVar[type | tuple[type, ...]]  # the LoadedModel class(es) it runs on (ours, or another package's)

    def accepts(self, model: LoadedModel) -> TypeGuard[M]:
        return isinstance(model, self.model_type)

    @abstractmethod
    def prepare(self, model: M, task: Task) -> P:
        """Tokenise (or otherwise ready) one task; a ShoalError here fails that task only."""

    @abstractmethod
    def run(self, model: M, work: list[tuple[Task, P]], limits: BatchLimits, on_batch: BatchHook) -> list[Out]:
        """What every prepared task gets from the model, in order; the tasks share forward batches."""

    @abstractmethod
    def finish(self, model: M, task: Task, prepared: P, out: Out) -> R:
        """One task's typed result, shaped from what running gave it."""

    def serve(
        self, model: LoadedModel, tasks: list[Task], limits: BatchLimits, on_batch: BatchHook, pulled_at: float | None
    ) -> list[Outcome]:
        """Outcomes of a group of this kind's tasks, in order: prepare each, run them together, finish each,
        with the timing (queue, tokenisation, inference) of every task filled here and nowhere else."""
        if not self.accepts(model):
            return [InvalidInput(f"model {model.card.id!r} cannot run {self.kind!r} tasks") for _ in tasks]
        outcomes: dict[int, Outcome] = {}
        started = time.perf_counter()
        ready: list[tuple[int, P]] = []
        for i, task in enumerate(tasks):
            try:
                ready.append((i, self.prepare(model, task)))
            except ShoalError as e:
                outcomes[i] = e
            except Exception as e:  # noqa: BLE001 - a task its handler cannot even prepare fails alone
                outcomes[i] = InternalError(f"{self.kind} task could not be prepared: {type(e).__name__}: {e}")
        prepared = time.perf_counter()
        STAGE_SECONDS.labels("tokenize").inc(prepared - started)
        work = [(tasks[i], p) for i, p in ready]
        ran = self.run(model, work, limits, on_batch)
        finished = [self.finish(model, task, p, out) for (task, p), out in zip(work, ran, strict=True)]
        done = time.perf_counter()
        for (i, _), result in zip(ready, finished, strict=True):
            enqueued = tasks[i].enqueued_at
            result["timing"] = Timing(
                queue_ms=max(0.0, (pulled_at or enqueued) - enqueued) * 1000,
                tokenization_ms=(prepared - started) * 1000,
                inference_ms=(done - prepared) * 1000,
            )
            outcomes[i] = result
        return [outcomes[i] for i in range(len(tasks))]


def params_of(task: Task, kind: type[Params]) -> Params:
    """The task's params as the handler's params type (the dispatch table guarantees the kind)."""
    if not isinstance(task.params, kind):
        raise InternalError(f"task {task.id} of kind {task.kind!r} reached the handler for {kind.__name__}")
    return task.params


def usage(tokens: int) -> Usage:
    return {"input_tokens": tokens}

"""The queue protocol between gateway and workers, the annotated task envelope, and the in-process queue."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from engine.errors import InternalError, QueueFull, ShoalError


@dataclass
class Task:
    """One request as the gateway annotated it; plain data so any queue can carry it."""

    model: str
    kind: str  # "encode" | "score" | "extract"
    items: list[dict[str, Any]]
    params: dict[str, Any]
    est_tokens: int
    deadline: float  # time.time() after which nobody waits for the answer
    tenant: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    enqueued_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(**d)


class Delivery(Protocol):
    """A task handed to a worker; exactly one of ack / term settles it (nak gives it back)."""

    task: Task

    async def ack(self, result: dict[str, Any]) -> None: ...
    async def nak(self, delay: float = 0.0) -> None: ...
    async def term(self, error: ShoalError) -> None: ...


class WorkQueue(Protocol):
    """submit (gateway side), pull (worker side) and depth; implementations are interchangeable."""

    async def submit(self, task: Task) -> dict[str, Any]: ...
    async def pull(self, prefer: Sequence[str], max_tasks: int, max_tokens: int, wait: float) -> list[Delivery]: ...
    async def depth(self) -> int: ...
    async def close(self) -> None: ...


@dataclass
class _LocalDelivery:
    task: Task
    future: asyncio.Future[dict[str, Any]]
    queue: InProcessQueue

    async def ack(self, result: dict[str, Any]) -> None:
        if not self.future.done():
            self.future.set_result(result)

    async def nak(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        self.queue._put(self)

    async def term(self, error: ShoalError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class InProcessQueue:
    """asyncio queue for the embedded engine: submit returns when a worker acks or terms the task."""

    def __init__(self, max_depth: int = 100_000) -> None:
        self._pending: list[_LocalDelivery] = []
        self._ready = asyncio.Event()
        self.max_depth = max_depth

    def _put(self, d: _LocalDelivery) -> None:
        self._pending.append(d)
        self._ready.set()

    async def submit(self, task: Task) -> dict[str, Any]:
        if len(self._pending) >= self.max_depth:
            raise QueueFull(f"{len(self._pending)} tasks are waiting; retry later")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._put(_LocalDelivery(task, future, self))
        return await future

    async def pull(self, prefer: Sequence[str], max_tasks: int, max_tokens: int, wait: float) -> list[Delivery]:
        """Wait for work, then linger up to `wait` seconds to fill the batch; preferred models first."""
        while not self._pending:
            self._ready.clear()
            await self._ready.wait()
        deadline = time.monotonic() + wait
        while sum(d.task.est_tokens for d in self._pending) < max_tokens and len(self._pending) < max_tasks:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), left)
            except TimeoutError:
                break
        order = sorted(range(len(self._pending)), key=lambda i: (self._pending[i].task.model not in prefer, i))
        taken: list[int] = []
        tokens = 0
        for i in order:
            if taken and (len(taken) >= max_tasks or tokens + self._pending[i].task.est_tokens > max_tokens):
                break
            taken.append(i)
            tokens += self._pending[i].task.est_tokens
        chosen = set(taken)
        out = [self._pending[i] for i in sorted(taken)]
        self._pending = [d for i, d in enumerate(self._pending) if i not in chosen]
        return list(out)

    async def depth(self) -> int:
        return len(self._pending)

    async def close(self) -> None:
        for d in self._pending:
            await d.term(InternalError("the engine shut down before this request ran"))
        self._pending.clear()

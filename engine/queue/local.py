"""The in-process queue: an asyncio list of deliveries that the embedded engine's worker pulls from."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import InternalError, QueueFull, ShoalError
from engine.queue.protocol import Delivery, Reply
from engine.tasks.task import Task


@dataclass
class _LocalDelivery:
    task: Task
    future: asyncio.Future[Reply]
    queue: InProcessQueue

    async def ack(self, result: Reply) -> None:
        if not self.future.done():
            self.future.set_result(result)
        # one turn of the event loop per answer: a batch of hundreds settles as a stream of replies, with the
        # loop reading sockets (a /healthz probe among them) between them, not as one burst that holds it
        await asyncio.sleep(0)

    async def nak(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        self.queue._put(self)

    async def term(self, error: ShoalError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class InProcessQueue:
    """asyncio queue for the embedded engine: submit returns when a worker acks or terms the task."""

    shared = False  # one worker pulls from it

    def __init__(self, max_depth: int = 100_000) -> None:
        self._pending: list[_LocalDelivery] = []
        self._ready = asyncio.Event()
        self.max_depth = max_depth

    def _put(self, d: _LocalDelivery) -> None:
        self._pending.append(d)
        self._ready.set()

    async def submit(self, task: Task) -> Reply:
        if len(self._pending) >= self.max_depth:
            raise QueueFull(f"{len(self._pending)} tasks are waiting; retry later")
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._put(_LocalDelivery(task, future, self))
        return await future

    async def pull(self, prefer: Sequence[str], max_tasks: int, max_tokens: int, wait: float) -> list[Delivery]:
        """Wait for work, then linger up to `wait` seconds to fill the batch; preferred models first. Tasks are
        taken until their estimated tokens reach `max_tokens` (the last one may pass it, as a NATS pull does)."""
        while True:
            self._pending = [d for d in self._pending if not d.future.done()]  # callers that gave up: not run
            if self._pending:
                break
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
        self._pending = [d for d in self._pending if not d.future.done()]  # and those that left meanwhile
        order = sorted(range(len(self._pending)), key=lambda i: (self._pending[i].task.model not in prefer, i))
        taken: list[int] = []
        tokens = 0
        for i in order:
            if taken and (len(taken) >= max_tasks or tokens >= max_tokens):
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

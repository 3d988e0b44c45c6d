"""The queue protocol between gateway and workers: submit, pull, depth; a pulled task is a Delivery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engine.errors import ShoalError
from engine.tasks.results import Reply
from engine.tasks.task import Task

__all__ = ["Delivery", "Reply", "WorkQueue"]  # Reply: what a task settles with (engine.tasks.results)


class Delivery(Protocol):
    """A task handed to a worker; exactly one of ack / term settles it (nak gives it back)."""

    @property
    def task(self) -> Task: ...

    async def ack(self, result: Reply) -> None: ...
    async def nak(self, delay: float = 0.0) -> None: ...
    async def term(self, error: ShoalError) -> None: ...


class WorkQueue(Protocol):
    """submit (gateway side), pull (worker side) and depth; implementations are interchangeable. `shared`: other
    workers pull from it too (a worker then takes about one batch a pull and leaves the rest to idle ones)."""

    shared: bool

    async def submit(self, task: Task) -> Reply: ...
    async def pull(self, prefer: Sequence[str], max_tasks: int, max_tokens: int, wait: float) -> list[Delivery]: ...
    async def depth(self) -> int: ...
    async def close(self) -> None: ...

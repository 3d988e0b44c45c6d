"""One pulled JetStream message as a queue Delivery: answer the requester's inbox, then ack, nak or term."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Protocol

from nats.aio.msg import Msg

from engine.errors import (
    DeadlineExceeded,
    InternalError,
    ModelLoadFailed,
    ModelLoading,
    ModelUnavailable,
    PayloadTooLarge,
    ResourceExhausted,
    ShoalError,
)
from engine.metrics import QUEUE_EXPIRED
from engine.queue.nats.connection import NATS_ERRORS
from engine.queue.nats.messages import Answer, error_answer
from engine.queue.protocol import Reply
from engine.tasks.task import Task
from engine.wire import packb

log = logging.getLogger("shoal.nats")
# errors another attempt (maybe on another worker) can cure; the rest are answered at once
RETRYABLE = (InternalError, ResourceExhausted, ModelLoadFailed, ModelUnavailable, ModelLoading)


class Holder(Protocol):
    """What a delivery needs from the worker side that pulled it."""

    @property
    def max_payload(self) -> int: ...
    @property
    def max_deliver(self) -> int: ...

    async def reply(self, subject: str, data: bytes) -> None: ...
    def release(self, d: NatsDelivery) -> None: ...
    async def dead_letter(self, msg: Msg, task: Task | None, error: ShoalError, attempts: int) -> None: ...


@dataclass(eq=False)
class NatsDelivery:
    """A pulled JetStream message; settling it answers the requester's inbox, then acks (at-least-once)."""

    task: Task
    msg: Msg
    reply: str
    holder: Holder

    @property
    def attempt(self) -> int:
        return int(self.msg.metadata.num_delivered or 1)

    async def _answer(self, answer: Answer) -> None:
        data = packb(answer)
        limit = self.holder.max_payload
        if len(data) > limit:
            err = PayloadTooLarge(f"the result is {len(data)} bytes, over the queue's limit of {limit}")
            data = packb(Answer(id=self.task.id, error=error_answer(err)))
        await self.holder.reply(self.reply, data)

    async def _settle(self, how: str) -> None:
        self.holder.release(self)
        with contextlib.suppress(*NATS_ERRORS):  # a lost ack means a redelivery, and the gateway drops duplicates
            await (self.msg.ack() if how == "ack" else self.msg.term())

    async def ack(self, result: Reply) -> None:
        with contextlib.suppress(*NATS_ERRORS):
            await self._answer({"id": self.task.id, "kind": self.task.kind, "result": result})
        await self._settle("ack")

    async def nak(self, delay: float = 0.0) -> None:
        self.holder.release(self)
        with contextlib.suppress(*NATS_ERRORS):
            await self.msg.nak(delay=delay or None)

    async def term(self, error: ShoalError) -> None:
        """Retry what another attempt may cure; dead-letter it after the last attempt; answer the rest now."""
        max_deliver = self.holder.max_deliver
        if isinstance(error, RETRYABLE) and self.attempt < max_deliver:
            log.warning(
                "task %s attempt %d/%d failed (%s); redelivering", self.task.id, self.attempt, max_deliver, error
            )
            await self.nak(delay=min(0.1 * 2**self.attempt, 5.0))
            return
        if isinstance(error, DeadlineExceeded):
            QUEUE_EXPIRED.labels(self.task.model).inc()
        elif isinstance(error, RETRYABLE):
            error = type(error)(f"{error.message} (failed {self.attempt} times; moved to the dead-letter stream)")
            with contextlib.suppress(*NATS_ERRORS):
                await self.holder.dead_letter(self.msg, self.task, error, self.attempt)
        with contextlib.suppress(*NATS_ERRORS):
            await self._answer({"id": self.task.id, "error": error_answer(error)})
        await self._settle("term" if isinstance(error, RETRYABLE) else "ack")

"""One pulled JetStream message as a queue Delivery: answer the requester's inbox, then ack, nak or term."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from engine.errors import (
    DeadlineExceeded,
    InternalError,
    ModelLoadFailed,
    ModelLoading,
    PayloadTooLarge,
    ResourceExhausted,
    ShoalError,
)
from engine.metrics import QUEUE_EXPIRED
from engine.queue import Task
from engine.wire import packb

if TYPE_CHECKING:
    from engine.nats_queue import NatsQueue

log = logging.getLogger("shoal.nats")
BELL = "shoal.bell"
# errors another attempt (maybe on another worker) can cure; the rest are answered at once
RETRYABLE = (InternalError, ResourceExhausted, ModelLoadFailed, ModelLoading)
NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError, OSError)


def subject_token(model: str) -> str:
    """A subject- and consumer-name-safe token for a model id: readable tail plus a short hash."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", model).strip("_")[-40:] or "model"
    return f"{readable}-{hashlib.sha1(model.encode()).hexdigest()[:10]}"


@dataclass
class NatsDelivery:
    """A pulled JetStream message; settling it answers the requester's inbox, then acks (at-least-once)."""

    task: Task
    msg: Msg
    reply: str
    queue: NatsQueue

    @property
    def attempt(self) -> int:
        return self.msg.metadata.num_delivered

    async def _answer(self, body: dict[str, Any]) -> None:
        data = packb({"id": self.task.id, **body})
        if len(data) > self.queue.max_payload:
            err = PayloadTooLarge(
                f"the result is {len(data)} bytes, over the queue's limit of {self.queue.max_payload}"
            )
            data = packb({"id": self.task.id, "error": err.to_dict()})
        await self.queue.nc.publish(self.reply, data)

    async def _settle(self, how: str) -> None:
        self.queue.release(self)
        with contextlib.suppress(*NATS_ERRORS):  # a lost ack means a redelivery, and the gateway drops duplicates
            await (self.msg.ack() if how == "ack" else self.msg.term())

    async def ack(self, result: dict[str, Any]) -> None:
        with contextlib.suppress(*NATS_ERRORS):
            await self._answer({"result": result})
        await self._settle("ack")

    async def nak(self, delay: float = 0.0) -> None:
        self.queue.release(self)
        with contextlib.suppress(*NATS_ERRORS):
            await self.msg.nak(delay=delay or None)

    async def term(self, error: ShoalError) -> None:
        """Retry what another attempt may cure; dead-letter it after the last attempt; answer the rest now."""
        max_deliver = self.queue.settings.queue_max_deliver
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
                await self.queue.dead_letter(self.msg, self.task, error, self.attempt)
        err = error.to_dict() | ({"retry_after": error.retry_after} if error.retry_after is not None else {})
        with contextlib.suppress(*NATS_ERRORS):
            await self._answer({"error": err})
        await self._settle("term" if isinstance(error, RETRYABLE) else "ack")

"""NatsQueue: the WorkQueue protocol over NATS JetStream, one connection carrying a gateway and/or worker side."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from engine.config import EngineSettings
from engine.errors import InternalError
from engine.queue.nats.connection import NATS_ERRORS, connect
from engine.queue.nats.gateway import GatewaySide
from engine.queue.nats.worker import WorkerSide
from engine.queue.protocol import Delivery, Reply
from engine.tasks.task import Task


class NatsQueue:
    """WorkQueue over JetStream. Gateway side: submit, depth. Worker side: pull (locality first, allow-list)."""

    shared = True  # every worker of the cluster pulls from the one stream

    def __init__(
        self, nc: NATS, js: JetStreamContext, settings: EngineSettings, gateway: bool = True, worker: bool = True
    ) -> None:
        self.nc, self.js, self.settings = nc, js, settings
        self.gateway = GatewaySide(nc, js, settings) if gateway else None
        self.worker = WorkerSide(nc, js, settings) if worker else None

    @classmethod
    async def connect(cls, settings: EngineSettings, *, gateway: bool, worker: bool) -> NatsQueue:
        nc, js = await connect(settings, "shoal-gateway" if gateway else "shoal-worker")
        q = cls(nc, js, settings, gateway, worker)
        for side in (q.gateway, q.worker):
            if side is not None:
                await side.start()
        return q

    @property
    def max_payload(self) -> int:
        return self.nc.max_payload

    async def submit(self, task: Task) -> Reply:
        if self.gateway is None:
            raise InternalError("this queue was opened without a gateway side")
        return await self.gateway.submit(task)

    async def pull(self, prefer: Sequence[str], max_tasks: int, max_tokens: int, wait: float) -> list[Delivery]:
        if self.worker is None:
            raise InternalError("this queue was opened without a worker side")
        return await self.worker.pull(prefer, max_tasks, max_tokens, wait)

    async def depth(self) -> int:
        return await self.gateway.depth() if self.gateway is not None else 0

    async def workers(self) -> int | None:
        """How many workers answer the roll call now (None: this side has no gateway)."""
        if self.gateway is None:
            return None
        try:
            return await self.gateway.roll.call()
        except NATS_ERRORS:
            return 0

    async def close(self) -> None:
        for side in (self.gateway, self.worker):
            if side is not None:
                await side.close()
        with contextlib.suppress(*NATS_ERRORS):
            await self.nc.drain()

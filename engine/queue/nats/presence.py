"""Which workers are there: each worker answers a roll call on `shoal.presence` with the models it pulls
(None: any), and the gateway calls the roll when it knows no worker for a model, so a request no worker will
take is answered 503 NO_WORKER within a fraction of a second instead of waiting out its deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from engine.aio import cancel_and_wait
from engine.queue.nats.connection import NATS_ERRORS

PRESENCE = "shoal.presence"  # a roll call; each worker replies {"tokens": [...] or null}
ROLL_S = 1.0  # how long a roll call collects answers at most (it ends at the first that covers the model asked)
KEPT_S = 5.0  # how long a roll call's answer is trusted for a model it covers
RETRY_S = 1.0  # at most one roll call this often for a model none covered


async def answer_roll(nc: NATS, allow: set[str] | None) -> Subscription:
    """Subscribe a worker to the roll call: it answers with its allow-list of model tokens."""
    body = json.dumps({"tokens": sorted(allow) if allow is not None else None}).encode()

    async def reply(msg: Msg) -> None:
        if msg.reply:
            with contextlib.suppress(*NATS_ERRORS):
                await nc.publish(msg.reply, body)

    sub = await nc.subscribe(PRESENCE, cb=reply)
    await nc.flush()  # the server knows of it before start() returns: a roll call right after finds it
    return sub


class Roll:
    """The gateway's view of the workers: the pools that answered the last roll call."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.pools: list[frozenset[str] | None] = []  # each worker's tokens (None: every model)
        self._at = -math.inf
        self._lock = asyncio.Lock()
        self._refresh: asyncio.Task[None] | None = None

    def covers(self, token: str) -> bool:
        return self._covered(self.pools, token)

    async def serves(self, token: str) -> bool:
        """Whether some worker pulls this model's subject. A model the last roll call covered: yes at once (a
        stale answer is refreshed in the background, never on the request's time). One it did not cover: a
        new roll call, at most one per RETRY_S. True when the roll cannot be called (the queue decides then)."""
        loop = asyncio.get_running_loop()
        age = loop.time() - self._at
        if self.covers(token):
            if age >= KEPT_S and (self._refresh is None or self._refresh.done()):
                self._refresh = asyncio.create_task(self._quietly(), name="shoal-nats-roll")
            return True
        if age < RETRY_S:
            return False
        async with self._lock:
            if loop.time() - self._at >= RETRY_S:  # not called by another request meanwhile
                try:
                    await self.call(token)
                except NATS_ERRORS:
                    return True
        return self.covers(token)

    async def _quietly(self) -> None:
        with contextlib.suppress(*NATS_ERRORS):
            await self.call()

    async def close(self) -> None:
        if self._refresh is not None:
            await cancel_and_wait([self._refresh])

    async def call(self, want: str | None = None) -> int:
        """Call the roll now; the number of workers that answered (by ROLL_S, or until one covers `want`)."""
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        pools: list[frozenset[str] | None] = []
        complete = True
        try:
            await self.nc.publish(PRESENCE, b"", reply=inbox)
            loop = asyncio.get_running_loop()
            until = loop.time() + ROLL_S
            while (left := until - loop.time()) > 0:
                try:
                    msg = await sub.next_msg(timeout=left)
                except (TimeoutError, *NATS_ERRORS):
                    break
                with contextlib.suppress(ValueError, TypeError):
                    tokens = json.loads(msg.data)["tokens"]
                    pools.append(None if tokens is None else frozenset(str(t) for t in tokens))
                if want is not None and self._covered(pools, want):
                    complete = False  # the model asked about is served: the rest of the roll is not awaited
                    break
        finally:
            with contextlib.suppress(*NATS_ERRORS):
                await sub.unsubscribe()
        if complete:
            self.pools, self._at = pools, asyncio.get_running_loop().time()
        else:  # a partial roll only adds (another model's workers may not have answered yet); not timed
            self.pools = [*self.pools, *pools]
        return len(pools)

    @staticmethod
    def _covered(pools: list[frozenset[str] | None], token: str) -> bool:
        return any(p is None or token in p for p in pools)

"""The gateway side of the NATS queue: publish tasks, collect answers on a reply inbox, watch the backlog.

The gateway knows what it has in flight (each waiting task's subject and message). When its connection to
NATS comes back after a loss (a server restart: a reply sent meanwhile on core NATS is gone, and a memory
store loses the task itself), every task still waiting is published again under a fresh message id; the
first answer wins and a second is counted as a duplicate. A task that cannot be re-sent within
REPUBLISH_S is answered 503 QUEUE_FULL (retryable) rather than left to wait for its deadline. A task for a
model no worker pulls (engine/queue/nats/presence.py) is answered 503 NO_WORKER before it is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engine.aio import cancel_and_wait
from engine.config import EngineSettings
from engine.errors import InternalError, NoWorker, PayloadTooLarge, QueueFull
from engine.metrics import MODEL_PENDING, QUEUE_DUPLICATES, QUEUE_PENDING, QUEUE_REPUBLISHED
from engine.queue.nats.connection import NATS_ERRORS
from engine.queue.nats.dead import on_max_deliveries
from engine.queue.nats.messages import answer_error, pack_work, read_answer
from engine.queue.nats.presence import RETRY_S, Roll
from engine.queue.nats.subjects import BELL, MAX_DELIVERIES, WORK, subject_token
from engine.queue.protocol import Reply
from engine.tasks.task import Task

log = logging.getLogger("shoal.nats")
REPUBLISH_S = 10.0  # how long a task may take to be re-sent after a reconnect before it is answered 503
RECONNECT_POLL_S = 0.2  # how often the gateway looks for a reconnect


class GatewaySide:
    """Publishes each task to `shoal.work.<model>` and waits for its one answer on this gateway's inbox."""

    def __init__(self, nc: NATS, js: JetStreamContext, settings: EngineSettings) -> None:
        self.nc, self.js, self.settings = nc, js, settings
        self.refreshes = 0  # pending-count refreshes completed so far (tests wait on it)
        self._waiting: dict[str, asyncio.Future[Reply]] = {}
        self._pending = 0
        self._published = 0  # publishes so far; tells a pending-count refresh that raced one
        self._models: dict[str, str] = {}  # subject token -> model id of every model submitted (catalogue-bounded)
        self._inbox = ""
        self._bg: list[asyncio.Task[None]] = []
        self._sent: dict[str, tuple[str, bytes]] = {}  # waiting task id -> (subject, message) as published
        self._reconnects = 0
        self.republished = 0  # tasks published again after a reconnect (tests read it)
        self.roll = Roll(nc)  # which workers are there (engine/queue/nats/presence.py)

    async def start(self) -> None:
        self._inbox = self.nc.new_inbox()
        await self.nc.subscribe(f"{self._inbox}.*", cb=self._on_reply)
        self._bg.append(asyncio.create_task(self._watch_pending(), name="shoal-nats-pending"))
        self._reconnects = int(self.nc.stats.get("reconnects", 0))
        self._bg.append(asyncio.create_task(self._watch_reconnects(), name="shoal-nats-reconnects"))
        advisories = f"{MAX_DELIVERIES}.{self.settings.queue_stream}.*"
        await self.nc.subscribe(advisories, cb=self._on_max_deliveries)

    async def submit(self, task: Task) -> Reply:
        if not self.nc.is_connected:  # reconnecting: a publish would wait out its 5 s timeout for the same 503
            raise QueueFull("the queue is unreachable (reconnecting to NATS); retry later", retry_after=1.0)
        limit = self.settings.queue_pending_limit
        if self._pending >= limit:
            raise QueueFull(f"{self._pending} tasks are pending (limit {limit}); retry later", retry_after=1.0)
        token = subject_token(task.model)
        data = pack_work(task, f"{self._inbox}.{task.id}")
        if len(data) > self.nc.max_payload:
            raise PayloadTooLarge(f"the request is {len(data)} bytes, over the queue's limit of {self.nc.max_payload}")
        served = await self.roll.serves(token)
        if not served and self.settings.queue_worker_wait_s == 0:
            raise self._no_worker(task.model)
        self._models.setdefault(token, task.model)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting[task.id] = future
        try:
            try:
                await self.js.publish(
                    f"{WORK}.{token}", data, stream=self.settings.queue_stream, headers={"Nats-Msg-Id": task.id}
                )
            except nats.js.errors.APIError as e:
                raise QueueFull(f"the queue refused the task: {e.description}", retry_after=1.0) from None
            except NATS_ERRORS as e:
                raise QueueFull(
                    f"the queue is unreachable ({type(e).__name__}); retry later", retry_after=1.0
                ) from None
            self._sent[task.id] = (f"{WORK}.{token}", data)
            self._pending += 1
            self._published += 1
            with contextlib.suppress(*NATS_ERRORS):
                await self.nc.publish(f"{BELL}.{token}", b"")
            if served:
                return await future
            watch = asyncio.create_task(self._await_worker(task.model, token, future))
            try:
                return await future
            finally:
                watch.cancel()
        finally:
            self._waiting.pop(task.id, None)
            self._sent.pop(task.id, None)

    def _no_worker(self, model: str) -> NoWorker:
        return NoWorker(
            f"no worker is pulling model {model!r} from the queue; start one (`shoal worker`) that serves it"
        )

    async def _await_worker(self, model: str, token: str, future: asyncio.Future[Reply]) -> None:
        """A published task no worker pulls yet: 503 NO_WORKER unless one appears within queue_worker_wait_s
        (an autoscaler waking a pool on the backlog this task adds)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.settings.queue_worker_wait_s
        while loop.time() < until:
            await asyncio.sleep(min(RETRY_S, max(0.0, until - loop.time())))
            if await self.roll.serves(token):
                return
        if not future.done():
            future.set_exception(self._no_worker(model))

    async def _watch_reconnects(self) -> None:
        """After each reconnect, publish again every task still waiting (its answer may be lost)."""
        while True:
            await asyncio.sleep(RECONNECT_POLL_S)
            count = int(self.nc.stats.get("reconnects", 0))
            if count > self._reconnects and self.nc.is_connected:
                self._reconnects = count
                waiting = list(self._sent.items())
                if waiting:
                    log.warning("reconnected to NATS: publishing %d waiting tasks again", len(waiting))
                    self._bg.append(asyncio.create_task(self._republish(waiting, count)))

    async def _republish(self, waiting: list[tuple[str, tuple[str, bytes]]], epoch: int) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + REPUBLISH_S
        for task_id, (subject, data) in waiting:
            while True:
                future = self._waiting.get(task_id)
                if future is None or future.done():
                    break
                try:
                    headers = {"Nats-Msg-Id": f"{task_id}.r{epoch}"}  # not the original id: it may be in the window
                    await self.js.publish(subject, data, stream=self.settings.queue_stream, headers=headers)
                    self.republished += 1
                    QUEUE_REPUBLISHED.inc()
                    break
                except (nats.js.errors.APIError, *NATS_ERRORS):
                    if loop.time() >= give_up:
                        future.set_exception(
                            QueueFull(
                                "the queue restarted and this request could not be sent again; retry", retry_after=1.0
                            )
                        )
                        break
                    await asyncio.sleep(0.5)

    async def _on_max_deliveries(self, msg: Msg) -> None:
        try:
            await on_max_deliveries(self.nc, self.js, self.settings, msg)
        except Exception as e:  # noqa: BLE001 - a subscription callback must never die
            log.warning("dead-letter handling failed: %s: %s", type(e).__name__, e)

    async def _on_reply(self, msg: Msg) -> None:
        answer = read_answer(msg.data)
        future = self._waiting.get(answer["id"])
        if future is None or future.done():
            QUEUE_DUPLICATES.inc()
            return
        if "error" in answer:
            future.set_exception(answer_error(answer["error"]))
        else:
            future.set_result(answer["result"])

    async def _watch_pending(self) -> None:
        """Refresh the cached pending count that submit checks, and the per-model counts (one stream-info call
        with per-subject counts per period)."""
        stream = self.settings.queue_stream
        while True:
            with contextlib.suppress(*NATS_ERRORS):
                published = self._published
                info = await self.js.stream_info(stream, subjects_filter=f"{WORK}.>")
                # a publish that landed while we asked is not in this answer: never count it out
                stale = self._published != published
                self._pending = max(self._pending, info.state.messages) if stale else info.state.messages
                QUEUE_PENDING.labels(stream).set(self._pending)
                per_subject = info.state.subjects or {}
                for token, model in self._models.items():
                    MODEL_PENDING.labels(model).set(per_subject.get(f"{WORK}.{token}", 0))
                self.refreshes += 1
            await asyncio.sleep(self.settings.queue_pending_refresh_s)

    async def depth(self) -> int:
        return self._pending

    async def close(self) -> None:
        await cancel_and_wait(self._bg)
        self._bg.clear()
        await self.roll.close()
        for f in self._waiting.values():
            if not f.done():
                f.set_exception(InternalError("the gateway shut down before this request was answered"))

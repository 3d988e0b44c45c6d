"""The queue protocol on NATS JetStream: a work-queue stream, per-model durable pull consumers, reply inboxes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from engine.aio import cancel_and_wait
from engine.config import EngineSettings
from engine.errors import (
    InternalError,
    PayloadTooLarge,
    QueueFull,
    ShoalError,
    error_from_code,
)
from engine.metrics import (
    QUEUE_DUPLICATES,
    QUEUE_HELD,
    QUEUE_PENDING,
    QUEUE_PULL_BATCH,
    QUEUE_PULLED,
    QUEUE_REDELIVERED,
)
from engine.nats_dead import DEAD, MAX_DELIVERIES, WORK, dead_letter, on_max_deliveries
from engine.nats_delivery import BELL, NATS_ERRORS, NatsDelivery, subject_token
from engine.queue import Delivery, Task
from engine.wire import packb, unpackb

log = logging.getLogger("shoal.nats")


class NatsQueue:
    """WorkQueue over JetStream. Gateway side: submit, depth. Worker side: pull (locality first, allow-list)."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.nc: NATS = NATS()
        self.js: JetStreamContext
        self.allow = {subject_token(m) for m in settings.worker_models} if settings.worker_models else None
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._subs: dict[str, tuple[Subscription, str]] = {}
        self._held: dict[int, NatsDelivery] = {}
        self._bell = asyncio.Event()
        self._avg_task_tokens = 256.0  # running mean of pulled tasks' estimated tokens (sizes each pull)
        self._pending = 0
        self._published = 0  # publishes so far; tells a pending-count refresh that raced one
        self._inbox = ""
        self._bg: list[asyncio.Task[None]] = []

    @classmethod
    async def connect(cls, settings: EngineSettings, *, gateway: bool, worker: bool) -> NatsQueue:
        q = cls(settings)
        await q._connect(gateway=gateway, worker=worker)
        return q

    @property
    def max_payload(self) -> int:
        return self.nc.max_payload

    async def _connect(self, *, gateway: bool, worker: bool) -> None:
        url = self.settings.queue_url or "nats://127.0.0.1:4222"

        async def on_error(e: Exception) -> None:
            log.warning("nats: %s: %s", type(e).__name__, e)

        await self.nc.connect(
            url,
            name="shoal-gateway" if gateway else "shoal-worker",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=5,
            error_cb=on_error,
        )
        self.js = self.nc.jetstream(timeout=5)
        await self._ensure_streams()
        if gateway:
            self._inbox = self.nc.new_inbox()
            await self.nc.subscribe(f"{self._inbox}.*", cb=self._on_reply)
            self._bg.append(asyncio.create_task(self._watch_pending(), name="shoal-nats-pending"))
            advisories = f"{MAX_DELIVERIES}.{self.settings.queue_stream}.*"
            await self.nc.subscribe(advisories, cb=self._on_max_deliveries)
        if worker:
            await self.nc.subscribe(f"{BELL}.>", cb=self._on_bell)
            self._bg.append(asyncio.create_task(self._keep_alive(), name="shoal-nats-keepalive"))

    async def _ensure_streams(self) -> None:
        s = self.settings
        work = StreamConfig(
            name=s.queue_stream,
            subjects=[f"{WORK}.>"],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            max_msgs=max(s.queue_pending_limit * 2, 1000),  # the hard cap; the gateway's cached check comes first
            discard=DiscardPolicy.NEW,
            duplicate_window=60,
        )
        dead = StreamConfig(
            name=s.queue_dead_stream,
            subjects=[f"{DEAD}.>"],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            max_age=7 * 24 * 3600,
            duplicate_window=120,
        )
        for cfg in (work, dead):
            try:
                await self.js.add_stream(cfg)
            except nats.js.errors.BadRequestError:  # exists with another configuration: adopt ours
                await self.js.update_stream(cfg)

    # -- gateway side ------------------------------------------------------------------------------

    async def submit(self, task: Task) -> dict[str, Any]:
        limit = self.settings.queue_pending_limit
        if self._pending >= limit:
            raise QueueFull(f"{self._pending} tasks are pending (limit {limit}); retry later", retry_after=1.0)
        token = subject_token(task.model)
        data = packb({"task": task.to_dict(), "reply": f"{self._inbox}.{task.id}"})
        if len(data) > self.max_payload:
            raise PayloadTooLarge(f"the request is {len(data)} bytes, over the queue's limit of {self.max_payload}")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
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
            self._pending += 1
            self._published += 1
            with contextlib.suppress(*NATS_ERRORS):
                await self.nc.publish(f"{BELL}.{token}", b"")
            return await future
        finally:
            self._waiting.pop(task.id, None)

    async def _on_max_deliveries(self, msg: Msg) -> None:
        try:
            await on_max_deliveries(self, msg)
        except Exception as e:  # noqa: BLE001 - a subscription callback must never die
            log.warning("dead-letter handling failed: %s: %s", type(e).__name__, e)

    async def _on_reply(self, msg: Msg) -> None:
        body = unpackb(msg.data)
        future = self._waiting.get(body.get("id", ""))
        if future is None or future.done():
            QUEUE_DUPLICATES.inc()
            return
        if "error" in body:
            e = body["error"]
            future.set_exception(error_from_code(e["code"], e["message"], e.get("retry_after")))
        else:
            future.set_result(body["result"])

    async def _watch_pending(self) -> None:
        """Refresh the cached pending count that submit checks (one cheap stream-info call per period)."""
        stream = self.settings.queue_stream
        while True:
            with contextlib.suppress(*NATS_ERRORS):
                published = self._published
                info = await self.js.stream_info(stream)
                # a publish that landed while we asked is not in this answer: never count it out
                stale = self._published != published
                self._pending = max(self._pending, info.state.messages) if stale else info.state.messages
                QUEUE_PENDING.labels(stream).set(self._pending)
            await asyncio.sleep(self.settings.queue_pending_refresh_s)

    async def depth(self) -> int:
        return self._pending

    # -- worker side -------------------------------------------------------------------------------

    async def _on_bell(self, msg: Msg) -> None:
        self._bell.set()

    async def _consumer(self, token: str) -> tuple[Subscription, str]:
        """The durable pull consumer of one model's subject, shared by every worker, and our inbox for it."""
        if token not in self._subs:
            s = self.settings
            config = ConsumerConfig(
                name=f"work-{token}",
                durable_name=f"work-{token}",
                filter_subject=f"{WORK}.{token}",
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=s.queue_ack_wait_s,
                max_deliver=s.queue_max_deliver,
                max_ack_pending=100_000,
                max_waiting=4096,
            )
            await self.js.add_consumer(s.queue_stream, config=config)
            sub = await self.nc.subscribe(self.nc.new_inbox())
            self._subs[token] = (sub, f"$JS.API.CONSUMER.MSG.NEXT.{s.queue_stream}.work-{token}")
        return self._subs[token]

    async def _pending_tokens(self) -> dict[str, int]:
        """Subject token -> messages in the stream (delivered-but-unacked included), for allowed models."""
        info = await self.js.stream_info(self.settings.queue_stream, subjects_filter=f"{WORK}.>")
        subjects = info.state.subjects or {}
        counts = {subj[len(WORK) + 1 :]: n for subj, n in subjects.items() if n > 0}
        return {t: n for t, n in counts.items() if self.allow is None or t in self.allow}

    async def _fetch(self, token: str, n: int) -> list[NatsDelivery]:
        """A no-wait pull of up to n messages: what the consumer has now, without lingering server-side."""
        sub, next_subject = await self._consumer(token)
        await self.nc.publish(next_subject, json.dumps({"batch": n, "no_wait": True}).encode(), reply=sub.subject)
        msgs: list[Msg] = []
        while len(msgs) < n:
            try:
                msg = await sub.next_msg(timeout=2.0)
            except nats.errors.TimeoutError:
                break
            status = (msg.headers or {}).get("Status")
            if status == "100":  # idle heartbeat
                continue
            if status:  # 404 no messages, 408 request expired, 409 limits: this pull is over
                break
            msgs.append(msg)
        out: list[NatsDelivery] = []
        for msg in msgs:
            try:
                env = unpackb(msg.data)
                d = NatsDelivery(Task.from_dict(env["task"]), msg, env["reply"], self)
            except Exception as e:  # noqa: BLE001 - an undecodable message can never succeed: dead-letter it
                log.error("undecodable message on %s: %s", msg.subject, e)
                with contextlib.suppress(*NATS_ERRORS):
                    await self.dead_letter(msg, None, InternalError(f"undecodable message: {e}"), 0)
                    await msg.term()
                continue
            QUEUE_PULLED.labels(d.task.model).inc()
            if d.attempt > 1:
                QUEUE_REDELIVERED.labels(d.task.model).inc()
            self._held[id(d)] = d
            QUEUE_HELD.set(len(self._held))
            out.append(d)
        return out

    async def pull(self, prefer: Sequence[str], max_tasks: int, max_tokens: int, wait: float) -> list[Delivery]:
        """Block until work exists; resident models first, others only with spare capacity; never raises."""
        while True:
            self._bell.clear()
            try:
                got = await self._try_pull(prefer, max_tasks, max_tokens, wait)
            except NATS_ERRORS as e:
                log.warning("pull failed (%s: %s); retrying", type(e).__name__, e)
                got = []
                await asyncio.sleep(0.5)
            if got:
                QUEUE_PULL_BATCH.observe(len(got))
                return list(got)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._bell.wait(), self.settings.queue_idle_poll_s)

    async def _try_pull(self, prefer: Sequence[str], max_tasks: int, max_tokens: int, wait: float) -> list[Delivery]:
        pending = await self._pending_tokens()
        if not pending:
            return []
        resident = [t for t in dict.fromkeys(subject_token(m) for m in prefer) if t in pending]
        others = sorted((t for t in pending if t not in resident), key=lambda t: -pending[t])
        got: list[NatsDelivery] = []
        tokens = 0
        for phase, order in enumerate((resident, others)):
            if phase == 1 and tokens >= max_tokens // 2:  # busy with resident models: leave loads to idle workers
                break
            for token in order:
                left = pending[token]
                while left > 0 and len(got) < max_tasks and tokens < max_tokens:
                    # take about what fits the budget, not all that is pending: other workers want some too
                    fits = max(1, int((max_tokens - tokens) / self._avg_task_tokens))
                    batch = await self._fetch(token, min(left, max_tasks - len(got), fits))
                    if not batch:
                        break
                    got += batch
                    left -= len(batch)
                    tokens += sum(d.task.est_tokens for d in batch)
                    mean = sum(d.task.est_tokens for d in batch) / len(batch)
                    self._avg_task_tokens = 0.8 * self._avg_task_tokens + 0.2 * mean
        if got and wait > 0 and len(got) < max_tasks and tokens < max_tokens:
            await asyncio.sleep(wait)  # linger to fill the batch, as the in-process queue does
            for token in dict.fromkeys(subject_token(d.task.model) for d in got):
                fits = max(1, int((max_tokens - tokens) / self._avg_task_tokens))
                with contextlib.suppress(nats.js.errors.Error):
                    batch = await self._fetch(token, min(max_tasks - len(got), fits))
                    got += batch
                    tokens += sum(d.task.est_tokens for d in batch)
        return list(got)

    def release(self, d: NatsDelivery) -> None:
        """A delivery was settled (or given back): it is no longer this worker's to keep alive."""
        self._held.pop(id(d), None)
        QUEUE_HELD.set(len(self._held))

    async def _keep_alive(self) -> None:
        """In-progress acks for every held task, so long batches are not redelivered under a live worker."""
        period = max(self.settings.queue_ack_wait_s / 3, 0.05)
        while True:
            await asyncio.sleep(period)
            for d in list(self._held.values()):
                with contextlib.suppress(*NATS_ERRORS):
                    await d.msg.in_progress()

    async def dead_letter(self, msg: Msg, task: Task | None, error: ShoalError, attempts: int) -> None:
        await dead_letter(self, msg.subject, msg.data, task, error, attempts)

    async def close(self) -> None:
        await cancel_and_wait(self._bg)
        self._bg.clear()
        for d in list(self._held.values()):  # give unfinished work back at once instead of after ack_wait
            await d.nak()
        for f in self._waiting.values():
            if not f.done():
                f.set_exception(InternalError("the gateway shut down before this request was answered"))
        with contextlib.suppress(*NATS_ERRORS):
            await self.nc.drain()

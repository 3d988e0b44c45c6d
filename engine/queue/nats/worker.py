"""The worker side of the NATS queue: pull (locality first, allow-list), hold, keep alive, settle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from engine.aio import cancel_and_wait
from engine.config import EngineSettings
from engine.errors import InternalError, ShoalError
from engine.metrics import QUEUE_HELD, QUEUE_PULL_BATCH, QUEUE_PULLED, QUEUE_REDELIVERED
from engine.queue.nats.connection import NATS_ERRORS
from engine.queue.nats.dead import dead_letter
from engine.queue.nats.delivery import NatsDelivery
from engine.queue.nats.messages import read_work
from engine.queue.nats.presence import answer_roll
from engine.queue.nats.subjects import BELL, WORK, consumer_name, subject_token
from engine.queue.protocol import Delivery
from engine.tasks.task import Task

log = logging.getLogger("shoal.nats")


class WorkerSide:
    """Pulls tasks from the per-model durable consumers and keeps the ones it holds alive until settled."""

    def __init__(self, nc: NATS, js: JetStreamContext, settings: EngineSettings) -> None:
        self.nc, self.js, self.settings = nc, js, settings
        self.allow = {subject_token(m) for m in settings.worker_models} if settings.worker_models else None
        self.max_deliver = settings.queue_max_deliver
        self.keepalive_rounds = 0  # in-progress rounds sent so far (tests wait on it)
        self._subs: dict[str, tuple[Subscription, str]] = {}
        self._held: dict[int, NatsDelivery] = {}
        self._bell = asyncio.Event()
        self._avg_task_tokens = 256.0  # running mean of pulled tasks' estimated tokens (sizes each pull)
        self._bg: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Listen for the bell, and create the durable consumers of the allow-listed models now, so that an
        autoscaler reading consumer lag (KEDA) sees their backlog before this pool has ever pulled."""
        await self.nc.subscribe(f"{BELL}.>", cb=self._on_bell)
        await answer_roll(self.nc, self.allow)  # gateways ask which models have a worker
        for model in self.settings.worker_models or []:
            await self._consumer(subject_token(model))
        self._bg.append(asyncio.create_task(self._keep_alive(), name="shoal-nats-keepalive"))

    @property
    def max_payload(self) -> int:
        return self.nc.max_payload

    @property
    def held(self) -> int:
        """Tasks pulled and not settled yet."""
        return len(self._held)

    async def _on_bell(self, msg: Msg) -> None:
        self._bell.set()

    async def _consumer(self, token: str) -> tuple[Subscription, str]:
        """The durable pull consumer of one model's subject, shared by every worker, and our inbox for it."""
        if token not in self._subs:
            s = self.settings
            name = consumer_name(token)
            config = ConsumerConfig(
                name=name,
                durable_name=name,
                filter_subject=f"{WORK}.{token}",
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=s.queue_ack_wait_s,
                max_deliver=s.queue_max_deliver,
                max_ack_pending=100_000,
                max_waiting=4096,
            )
            await self.js.add_consumer(s.queue_stream, config=config)
            sub = await self.nc.subscribe(self.nc.new_inbox())
            self._subs[token] = (sub, f"$JS.API.CONSUMER.MSG.NEXT.{s.queue_stream}.{name}")
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
                work = read_work(msg.data)
                d = NatsDelivery(work["task"], msg, work["reply"], self)
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
        local = self.settings.queue_locality  # off (for comparison): a plain shared queue, fullest subject first
        resident = [t for t in dict.fromkeys(subject_token(m) for m in prefer) if t in pending] if local else []
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

    # -- what a delivery needs (delivery.Holder) ------------------------------------------------------

    async def reply(self, subject: str, data: bytes) -> None:
        await self.nc.publish(subject, data)

    def release(self, d: NatsDelivery) -> None:
        """A delivery was settled (or given back): it is no longer this worker's to keep alive."""
        self._held.pop(id(d), None)
        QUEUE_HELD.set(len(self._held))

    async def dead_letter(self, msg: Msg, task: Task | None, error: ShoalError, attempts: int) -> None:
        await dead_letter(self.js, self.settings, msg.subject, msg.data, task, error, attempts)

    async def _keep_alive(self) -> None:
        """In-progress acks for every held task, so long batches are not redelivered under a live worker."""
        period = max(self.settings.queue_ack_wait_s / 3, 0.05)
        while True:
            await asyncio.sleep(period)
            for d in list(self._held.values()):
                with contextlib.suppress(*NATS_ERRORS):
                    await d.msg.in_progress()
            self.keepalive_rounds += 1

    async def close(self) -> None:
        await cancel_and_wait(self._bg)
        self._bg.clear()
        for d in list(self._held.values()):  # give unfinished work back at once instead of after ack_wait
            await d.nak()

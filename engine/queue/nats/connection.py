"""The NATS connection and the two JetStream streams (work queue, dead letters), shared by both sides."""

from __future__ import annotations

import asyncio
import logging

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from engine.config import EngineSettings
from engine.queue.nats.subjects import DEAD, WORK

log = logging.getLogger("shoal.nats")
# what a lost connection or a slow server raises; callers retry, answer 503, or let a redelivery cure it
NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError, OSError)


async def connect(settings: EngineSettings, name: str) -> tuple[NATS, JetStreamContext]:
    """A connection that reconnects forever on its own, and its JetStream context with the streams ensured."""
    nc = NATS()

    async def on_error(e: Exception) -> None:
        log.warning("nats: %s: %s", type(e).__name__, e)

    servers = [u.strip() for u in (settings.queue_url or "nats://127.0.0.1:4222").split(",") if u.strip()]
    await nc.connect(
        servers,  # a cluster's nodes: one down at start is skipped, a lost one is replaced by the next
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,  # type: ignore[arg-type]  # nats-py annotates int; it sleeps any float
        connect_timeout=5,
        # nats-py pings every 120 s by default: a node cut off by a partition (no FIN, no RST) would hold the
        # connection for minutes; two missed pongs at this interval and it reconnects to the next node
        ping_interval=settings.queue_ping_interval_s,  # type: ignore[arg-type]  # annotated int; any float works
        max_outstanding_pings=2,
        error_cb=on_error,
    )
    js = nc.jetstream(timeout=5)
    await ensure_streams(js, settings)
    return nc, js


async def ensure_streams(js: JetStreamContext, settings: EngineSettings) -> None:
    """The work-queue stream (shoal.work.>) and the dead-letter stream (shoal.dead.>), created or adopted."""
    work = StreamConfig(
        name=settings.queue_stream,
        subjects=[f"{WORK}.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        max_msgs=max(settings.queue_pending_limit * 2, 1000),  # the hard cap; the gateway's cached check comes first
        discard=DiscardPolicy.NEW,
        duplicate_window=60,
        num_replicas=settings.queue_replicas,
    )
    dead = StreamConfig(
        name=settings.queue_dead_stream,
        subjects=[f"{DEAD}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=7 * 24 * 3600,
        duplicate_window=120,
        num_replicas=settings.queue_replicas,
    )
    for cfg in (work, dead):
        try:
            await js.add_stream(cfg)
        except nats.js.errors.BadRequestError:  # exists with another configuration: adopt ours
            await js.update_stream(cfg)

"""Dead letters of the NATS queue: copy a failed task to the dead-letter stream with its reason, answer it."""

from __future__ import annotations

import contextlib
import json
import logging

import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engine.config import EngineSettings
from engine.errors import InternalError, ShoalError
from engine.metrics import QUEUE_DEAD
from engine.queue.nats.messages import Answer, error_answer, read_work
from engine.queue.nats.subjects import DEAD, WORK, token_of
from engine.tasks.task import Task
from engine.wire import packb

log = logging.getLogger("shoal.nats")


async def dead_letter(
    js: JetStreamContext,
    settings: EngineSettings,
    subject: str,
    data: bytes,
    task: Task | None,
    error: ShoalError,
    n: int,
) -> None:
    """Publish the message to `shoal.dead.<token>` with its reason in headers (deduplicated by task id)."""
    model = task.model if task else "unknown"
    headers = {
        "Shoal-Error-Code": error.code,
        "Shoal-Error": error.message[:1000],
        "Shoal-Deliveries": str(n),
        "Shoal-Model": model,
        "Shoal-Source-Subject": subject,
    }
    if task:
        headers |= {"Shoal-Task-Id": task.id, "Nats-Msg-Id": f"dead-{task.id}"}
    ack = await js.publish(f"{DEAD}.{token_of(subject)}", data, stream=settings.queue_dead_stream, headers=headers)
    if not ack.duplicate:
        QUEUE_DEAD.labels(model).inc()
        log.error("task %s dead-lettered after %d deliveries: %s", task.id if task else "?", n, error.message)


async def on_max_deliveries(nc: NATS, js: JetStreamContext, settings: EngineSettings, advisory: Msg) -> None:
    """A task no worker settled in max_deliver tries (each died or timed out): dead-letter it, answer the client."""
    info = json.loads(advisory.data)
    stream, seq = settings.queue_stream, info["stream_seq"]
    try:
        raw = await js.get_msg(stream, seq)
    except nats.js.errors.NotFoundError:
        return  # already handled (another gateway, or a worker's last attempt)
    work = read_work(raw.data or b"")
    task = work["task"]
    n = info.get("deliveries", settings.queue_max_deliver)
    error = InternalError(
        f"no worker finished this task in {n} deliveries (each died or timed out); moved to the dead-letter stream"
    )
    await dead_letter(js, settings, raw.subject or f"{WORK}.unknown", raw.data or b"", task, error, n)
    with contextlib.suppress(nats.js.errors.Error):
        await js.delete_msg(stream, seq)
    await nc.publish(work["reply"], packb(Answer(id=task.id, error=error_answer(error))))

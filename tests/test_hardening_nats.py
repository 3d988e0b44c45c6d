"""Distributed mode across a NATS restart: nats-server SIGKILLed and started again (same port, same store).
In one process: a task whose answer was lost while NATS was down (taken and acked, its reply gone) is
published again after the reconnect and answered, not left to its deadline. End to end: a gateway and a
worker under load; every request is answered (200 with the right vector, or a retryable 503), and none
waits past 30 s after the restart."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from engine.config import EngineSettings
from engine.errors import NoWorker
from engine.runtime import AsyncEngine
from engine.wire import packb, unpackb
from tests.helpers import WORDS
from tests.nats_support import NatsServer, WorkerProc, gateway, scrape

pytestmark = [pytest.mark.nats, pytest.mark.slow]
MP = {"Content-Type": "application/msgpack"}
LOCAL = {"SHOAL_LOCAL_MODELS": "1"}
TEXTS = [" ".join(WORDS[(i * 5 + k) % len(WORDS)] for k in range(1 + i % 9)) for i in range(32)]
TIMEOUT_S = 120  # each request's own deadline: a lost answer would wait this long


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "js").start()
    yield server
    server.stop()


def sigkill(ns: NatsServer) -> None:
    assert ns.proc is not None
    os.kill(ns.proc.pid, signal.SIGKILL)
    ns.proc.wait()


async def test_a_task_whose_answer_was_lost_is_sent_again_after_the_reconnect(ns: NatsServer) -> None:
    from engine.queue.nats.queue import NatsQueue
    from engine.tasks.task import EncodeParams, Task, TaskItem

    # the task is published even before the gateway's roll call has seen the worker that just connected
    settings = EngineSettings(queue_url=ns.url, queue_worker_wait_s=30)
    gw = await NatsQueue.connect(settings, gateway=True, worker=False)
    wq = await NatsQueue.connect(settings, gateway=False, worker=True)
    try:
        task = Task(
            model="m", items=[TaskItem(text="x")], params=EncodeParams(), est_tokens=1, deadline=time.time() + 60
        )
        answer = asyncio.create_task(gw.submit(task))
        (d,) = await asyncio.wait_for(wq.pull(prefer=[], max_tasks=1, max_tokens=100, wait=0), 20)
        await d.msg.ack()  # type: ignore[attr-defined]  # taken and settled, but its reply never sent: lost
        await asyncio.to_thread(sigkill, ns)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(ns.start)
        (again,) = await asyncio.wait_for(wq.pull(prefer=[], max_tasks=1, max_tokens=100, wait=0), 30)
        assert again.task.id == task.id
        await again.ack({"items": [{"id": "resent"}]})
        assert await asyncio.wait_for(answer, 10) == {"items": [{"id": "resent"}]}
    finally:
        for q in (gw, wq):
            await q.close()


def kill_and_restart(ns: NatsServer, after: float, restarted: list[float]) -> None:
    time.sleep(after)
    assert ns.proc is not None
    os.kill(ns.proc.pid, signal.SIGKILL)
    ns.proc.wait()
    time.sleep(0.5)
    ns.start()
    restarted.append(time.monotonic())


async def load(url: str, model: str, seconds: float, clients: int) -> list[tuple[str, int, object, float]]:
    """Closed-loop single-text requests for `seconds`: (text, status, vector or body, finish time)."""
    out: list[tuple[str, int, object, float]] = []
    stop = time.monotonic() + seconds

    async def client(c: int) -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT_S + 30) as http:
            i = c
            while time.monotonic() < stop:
                text = TEXTS[i % len(TEXTS)]
                i += clients
                try:
                    r = await http.post(
                        f"{url}/v1/encode/{model}", content=packb({"items": [{"text": text}]}), headers=MP
                    )
                except httpx.HTTPError as e:
                    out.append((text, 0, repr(e), time.monotonic()))
                    continue
                body = unpackb(r.content)["items"][0]["dense"]["values"] if r.status_code == 200 else r.text
                out.append((text, r.status_code, body, time.monotonic()))
                if r.status_code == 503:
                    await asyncio.sleep(0.2)

    await asyncio.gather(*(client(c) for c in range(clients)))
    return out


def test_nats_sigkill_and_restart_under_load_loses_no_answer(ns: NatsServer, tiny_bert: Path) -> None:
    async def ref() -> list[dict]:
        async with AsyncEngine(EngineSettings()) as eng:
            return await eng.encode(str(tiny_bert), TEXTS)

    reference = {t: r["dense"] for t, r in zip(TEXTS, asyncio.run(ref()), strict=True)}
    env = {**LOCAL, "SHOAL_REQUEST_TIMEOUT_S": str(TIMEOUT_S)}
    worker = WorkerProc(ns.url, env=env)
    gw = None
    try:
        worker.wait_ready()
        gw = gateway(ns.url, env=env)
        restarted: list[float] = []
        killer = threading.Thread(target=kill_and_restart, args=(ns, 4.0, restarted))
        killer.start()
        results = asyncio.run(load(gw.url, str(tiny_bert), 16.0, 16))
        killer.join()
        assert restarted, "nats-server was not restarted"
        statuses = [s for _, s, _, _ in results]
        assert set(statuses) <= {200, 503}, [(s, b) for _, s, b, _ in results if s not in (200, 503)][:3]
        late = [f - restarted[0] for _, _, _, f in results if f - restarted[0] > 30]
        assert not late, f"{len(late)} answers came more than 30 s after the restart: {late[:3]}"
        for text, status, vec, _ in results:
            if status == 200:
                np.testing.assert_allclose(vec, reference[text], atol=1e-5)
        ok = statuses.count(200)
        republished = scrape(f"{gw.url}/metrics", "shoal_queue_republished_total")
        print(
            f"\n{len(results)} requests across the restart: {ok} answered 200, {statuses.count(503)} 503; "
            f"{republished:.0f} re-sent after the reconnect"
        )
        assert ok > len(results) // 2
    finally:
        for p in (gw, worker):
            if p is not None:
                p.stop()


async def test_while_nats_is_down_a_new_request_is_refused_at_once(ns: NatsServer) -> None:
    """Not after a publish timeout: the gateway knows it is reconnecting and says so. Once NATS is back, with
    no worker a request is NO_WORKER at once (not a 504 after its deadline); with one, it is published."""
    from engine.errors import QueueFull
    from engine.queue.nats.queue import NatsQueue
    from engine.tasks.task import EncodeParams, Task, TaskItem

    gw = await NatsQueue.connect(EngineSettings(queue_url=ns.url), gateway=True, worker=False)
    try:
        await asyncio.to_thread(sigkill, ns)
        for _ in range(200):  # the connection's loss is seen when its socket closes
            if not gw.nc.is_connected:
                break
            await asyncio.sleep(0.05)
        task = Task(
            model="m", items=[TaskItem(text="x")], params=EncodeParams(), est_tokens=1, deadline=time.time() + 60
        )
        with pytest.raises(QueueFull, match="reconnecting") as refused:
            await gw.submit(task)
        assert refused.value.retry_after == 1.0
        await asyncio.to_thread(ns.start)
        for _ in range(400):
            if gw.nc.is_connected:
                break
            await asyncio.sleep(0.05)
        with pytest.raises(NoWorker, match="no worker is pulling model 'm'"):  # at once, not after 300 s
            await gw.submit(task)
        assert await gw.workers() == 0
        wq = await NatsQueue.connect(EngineSettings(queue_url=ns.url), gateway=False, worker=True)
        try:
            await asyncio.sleep(1.1)  # past the roll call's retry interval
            assert await gw.workers() == 1
            pending = asyncio.create_task(gw.submit(task))  # a worker answers the roll: published, pulled
            (d,) = await asyncio.wait_for(wq.pull(prefer=[], max_tasks=1, max_tokens=100, wait=0), 20)
            assert d.task.id == task.id
            pending.cancel()
        finally:
            await wq.close()
    finally:
        await gw.close()


async def test_with_a_worker_wait_a_request_is_published_then_no_worker(ns: NatsServer) -> None:
    """SHOAL_QUEUE_WORKER_WAIT_S (a pool scaled to zero): the task goes into the stream, where an autoscaler
    sees it, and the caller gets NO_WORKER when no worker appeared in time."""
    from engine.queue.nats.queue import NatsQueue
    from engine.tasks.task import EncodeParams, Task, TaskItem

    gw = await NatsQueue.connect(EngineSettings(queue_url=ns.url, queue_worker_wait_s=1.5), gateway=True, worker=False)
    try:
        task = Task(
            model="m", items=[TaskItem(text="x")], params=EncodeParams(), est_tokens=1, deadline=time.time() + 60
        )
        with pytest.raises(NoWorker):
            await gw.submit(task)
        info = await gw.js.stream_info(gw.settings.queue_stream)
        assert info.state.messages == 1  # published: the backlog an autoscaler scales on
    finally:
        await gw.close()

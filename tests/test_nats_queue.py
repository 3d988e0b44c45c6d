"""The NATS queue in one process: the same Worker serves both queues alike; allow-lists, locality, limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.config import EngineSettings
from engine.errors import DeadlineExceeded, InternalError, PayloadTooLarge, QueueFull
from engine.queue.nats.delivery import NatsDelivery
from engine.queue.nats.queue import NatsQueue
from engine.queue.nats.subjects import subject_token
from engine.runtime import AsyncEngine
from engine.tasks.task import EncodeParams, ScoreParams, Task, TaskItem
from tests.nats_support import NatsServer
from tests.waiting import until

pytestmark = pytest.mark.nats
TEXTS = ["the cat sat", "a dog and a bird", "paris is in france " * 5, "hello"]


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    server = NatsServer(tmp_path / "js").start()
    yield server.url
    server.stop()


def settings_for(queue: str, url: str, **kw: object) -> EngineSettings:
    return EngineSettings(queue_url=url if queue == "nats" else None, **kw)


def test_subject_token_is_safe_and_distinct() -> None:
    a, b = subject_token("org/model.v1 *>"), subject_token("org/model_v1 *>")
    assert a != b
    for t in (a, b, subject_token("/tmp/x/tiny-bert")):
        assert all(c.isalnum() or c in "_-" for c in t) and len(t) <= 51


@pytest.mark.parametrize("queue", ["inprocess", "nats"])
async def test_same_worker_same_vectors_on_both_queues(queue: str, nats_url: str, tiny_bert: Path) -> None:
    async with AsyncEngine(EngineSettings()) as ref:
        want = await ref.encode(str(tiny_bert), TEXTS)
    async with AsyncEngine(settings_for(queue, nats_url)) as eng:
        results = await asyncio.gather(*(eng.encode(str(tiny_bert), [t]) for t in TEXTS * 5))
        for got, expected in zip(results, want * 5, strict=True):
            np.testing.assert_allclose(got[0]["dense"], expected["dense"], atol=1e-6)
        assert eng.worker is not None and eng.worker.stats.items == len(TEXTS) * 5
        assert max(b.items for b in eng.worker.stats.recent) > 1  # requests shared batches


@pytest.mark.parametrize("queue", ["inprocess", "nats"])
async def test_expired_task_is_dropped_unrun(queue: str, nats_url: str, tiny_bert: Path) -> None:
    async with AsyncEngine(settings_for(queue, nats_url)) as eng:
        task = eng.annotate_encode(str(tiny_bert), {"items": [{"text": "late"}]})
        task.deadline = time.time() - 1
        with pytest.raises(DeadlineExceeded):
            await asyncio.wait_for(eng.queue.submit(task), 30)
        assert eng.worker is not None and eng.worker.stats.items == 0


async def wait_published(q: NatsQueue, n: int) -> None:
    """Until the work stream holds n messages (publishes are slow on a busy machine); bounded."""

    async def held() -> bool:
        return (await q.js.stream_info(q.settings.queue_stream)).state.messages >= n

    await until(held, what=f"the work stream holding {n} messages")


def _task(model: str, tokens: int = 10, text: str = "x") -> Task:
    return Task(
        model=model,
        items=[TaskItem(text=text)],
        params=EncodeParams(),
        est_tokens=tokens,
        deadline=time.time() + 60,
    )


def test_task_round_trips_through_the_nats_wire(tiny_bert: Path) -> None:
    """What the gateway publishes (msgpack) decodes on the worker into an equal, typed Task."""
    from engine.wire import packb, unpackb

    engine = AsyncEngine(EngineSettings())
    body = {
        "items": [{"id": "a", "text": "hello"}, {"text": "world", "metadata": {"k": 1}}],
        "params": {"output_types": ["dense"], "instruction": "q: ", "output_dtype": "int8"},
    }
    task = engine.annotate_encode(str(tiny_bert), body, tenant="t1")
    back = Task.from_wire(unpackb(packb({"task": task.to_wire(), "reply": "inbox"}))["task"])
    assert back == task and isinstance(back.params, EncodeParams)
    assert back.params.prefix == "q: " and back.params.output_dtype == "int8" and back.params.truncate is True
    params = ScoreParams(query="i: x", query_id="q", instruction="i", truncate=False, adapter="legal")
    score = Task(model="m", items=[TaskItem(id="d0", text="y")], params=params, est_tokens=3, deadline=time.time())
    back = Task.from_wire(unpackb(packb(score.to_wire())))
    assert back == score and isinstance(back.params, ScoreParams) and back.kind == "score"


def test_answers_decode_to_the_typed_result_and_error_the_worker_packed() -> None:
    """A worker's answer (msgpack, arrays in it) decodes on the gateway to the same result dict, numpy arrays
    and all; an error answer gives back the typed error with its retry hint; a work message its Task."""
    from engine.queue.nats.messages import Answer, answer_error, error_answer, pack_work, read_answer, read_work
    from engine.tasks.results import EncodeReply
    from engine.wire import packb

    values = np.arange(4, dtype=np.float32)
    result: EncodeReply = {
        "items": [{"id": "a", "dense": {"dims": 4, "dtype": "float32", "values": values}}],
        "usage": {"input_tokens": 3},
        "timing": {"queue_ms": 1.5, "inference_ms": 2.0},
    }
    answer = read_answer(packb(Answer(id="t1", kind="encode", result=result)))
    assert answer["id"] == "t1" and "error" not in answer
    got = answer["result"]
    assert isinstance(got, dict) and set(got) == set(result) and got["usage"] == result["usage"]
    assert got["timing"] == result["timing"]
    [item] = got["items"]
    assert item["id"] == "a" and item["dense"]["dims"] == 4 and item["dense"]["dtype"] == "float32"
    dense = item["dense"]["values"]
    assert isinstance(dense, np.ndarray) and dense.dtype == np.float32 and np.array_equal(dense, values)

    failed = read_answer(packb(Answer(id="t2", error=error_answer(QueueFull("busy", retry_after=2.0)))))
    err = answer_error(failed["error"])
    assert isinstance(err, QueueFull) and err.message == "busy" and err.retry_after == 2.0
    assert "result" not in failed

    task = Task(model="m", items=[TaskItem(text="x")], params=EncodeParams(), est_tokens=1, deadline=time.time())
    work = read_work(pack_work(task, "inbox.t3"))
    assert work["task"] == task and work["reply"] == "inbox.t3"
    with pytest.raises(InternalError):
        read_work(packb({"task": task.to_wire()}))  # no reply inbox: never a half-message


async def test_allow_list_and_locality(nats_url: str) -> None:
    gw = await NatsQueue.connect(EngineSettings(queue_url=nats_url), gateway=True, worker=False)
    only_a = await NatsQueue.connect(
        EngineSettings(queue_url=nats_url, worker_models=["a"]), gateway=False, worker=True
    )
    anyone = await NatsQueue.connect(EngineSettings(queue_url=nats_url), gateway=False, worker=True)
    try:
        waiting = [asyncio.create_task(gw.submit(_task("b"))) for _ in range(3)]
        await wait_published(gw, 3)
        # a worker that may not serve "b" never takes its messages, however idle it is
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(only_a.pull(prefer=[], max_tasks=10, max_tokens=1000, wait=0), 1.5)
        waiting += [asyncio.create_task(gw.submit(_task("a", 600))) for _ in range(2)]
        await wait_published(gw, 5)
        # resident "a" fills the batch past half the budget: no load of "b" is taken on
        got = await anyone.pull(prefer=["a"], max_tasks=10, max_tokens=1000, wait=0)
        assert [d.task.model for d in got] == ["a", "a"]
        # with spare capacity it takes any model
        got2 = await anyone.pull(prefer=["a"], max_tasks=10, max_tokens=1000, wait=0)
        assert [d.task.model for d in got2] == ["b", "b", "b"]
        for d in got + got2:
            await d.ack({"items": [], "usage": {"input_tokens": 0}, "model": d.task.model})
        assert len(await asyncio.gather(*waiting)) == 5
    finally:
        for q in (gw, only_a, anyone):
            await q.close()


async def test_allow_listed_consumers_exist_at_start_and_show_the_backlog(nats_url: str) -> None:
    """A worker with an allow-list creates its models' durable consumers at start-up, so an autoscaler reading
    consumer lag (KEDA) sees a model's backlog before any worker of its pool has pulled; the gateway's
    per-model pending gauge counts the same backlog."""
    from prometheus_client import REGISTRY

    from engine.queue.nats.subjects import consumer_name

    models = ["a", "org/b"]
    worker = await NatsQueue.connect(
        EngineSettings(queue_url=nats_url, worker_models=models), gateway=False, worker=True
    )
    gw = await NatsQueue.connect(EngineSettings(queue_url=nats_url), gateway=True, worker=False)
    stream = worker.settings.queue_stream
    try:
        names = {c.name for c in await worker.js.consumers_info(stream)}
        assert names == {consumer_name(subject_token(m)) for m in models}
        waiting = [asyncio.create_task(gw.submit(_task("org/b"))) for _ in range(3)]
        await wait_published(gw, 3)
        info = await worker.js.consumer_info(stream, consumer_name(subject_token("org/b")))
        assert info.num_pending == 3 and info.num_ack_pending == 0  # lag, and nobody has pulled

        def gauge() -> float | None:
            return REGISTRY.get_sample_value("shoal_queue_model_pending", {"model": "org/b"})

        await until(lambda: gauge() == 3, what="the gateway's per-model pending gauge reading 3")
        for d in await worker.pull(prefer=[], max_tasks=10, max_tokens=1000, wait=0):
            await d.ack({"items": [], "usage": {"input_tokens": 0}, "model": d.task.model})
        await asyncio.gather(*waiting)
        await until(lambda: gauge() == 0, what="the per-model pending gauge going back to 0")
    finally:
        for q in (gw, worker):
            await q.close()


async def test_payload_over_server_limit_is_413_and_pending_limit_503(nats_url: str) -> None:
    settings = EngineSettings(queue_url=nats_url, queue_pending_limit=2, queue_worker_wait_s=60)  # tasks wait
    gw = await NatsQueue.connect(settings, gateway=True, worker=False)  # in the stream with no worker, published
    assert gw.gateway is not None
    try:
        with pytest.raises(PayloadTooLarge):
            await gw.submit(_task("m", 1, text="x" * (gw.max_payload + 10)))
        waiting = [asyncio.create_task(gw.submit(_task("m"))) for _ in range(2)]
        await wait_published(gw, 2)
        # a count the gateway asked for before the publishes landed may still arrive and be stale: wait for two
        # more refreshes, so a later one has read the stream as it is now, and for the count to show them
        seen = gw.gateway.refreshes
        await until(lambda: gw.gateway.refreshes >= seen + 2, what="two pending-count refreshes")  # type: ignore[union-attr]

        async def counted() -> bool:
            return await gw.depth() >= 2

        await until(counted, what="the gateway counting the two pending tasks")
        with pytest.raises(QueueFull) as info:
            await asyncio.wait_for(gw.submit(_task("m")), 30)  # bounded: a regression fails, never hangs
        assert info.value.retry_after and info.value.status == 503
        for w in waiting:
            w.cancel()
    finally:
        await gw.close()


async def test_long_batch_is_kept_alive_by_in_progress_acks(nats_url: str, tmp_path: Path) -> None:
    settings = EngineSettings(queue_url=nats_url, queue_ack_wait_s=0.6)
    gw = await NatsQueue.connect(settings, gateway=True, worker=False)
    wq = await NatsQueue.connect(settings, gateway=False, worker=True)
    other = await NatsQueue.connect(settings, gateway=False, worker=True)
    assert wq.worker is not None
    try:
        pending = asyncio.create_task(gw.submit(_task("m")))
        (d,) = await wq.pull(prefer=[], max_tasks=10, max_tokens=1000, wait=0)
        # nine in-progress rounds (one every ack_wait / 3) span three ack_waits: without them the server would
        # have redelivered the task to the other worker by now
        start = wq.worker.keepalive_rounds
        await until(lambda: wq.worker.keepalive_rounds >= start + 9, what="nine keep-alive rounds")  # type: ignore[union-attr]
        assert isinstance(d, NatsDelivery) and d.attempt == 1
        with pytest.raises(TimeoutError):  # nothing to take: the task is still this worker's
            await asyncio.wait_for(other.pull(prefer=[], max_tasks=5, max_tokens=1000, wait=0), 1.0)
        await d.ack({"items": [], "usage": {"input_tokens": 0}})
        assert await pending == {"items": [], "usage": {"input_tokens": 0}}
    finally:
        for q in (gw, wq, other):
            await q.close()


async def test_task_whose_workers_all_die_is_dead_lettered_by_the_gateway(nats_url: str) -> None:
    """No worker ever settles it (each 'dies' holding it): after max_deliver the client still gets an error."""
    # submitted before any worker runs: published all the same (a pool scaled to zero)
    settings = EngineSettings(queue_url=nats_url, queue_ack_wait_s=0.5, queue_max_deliver=2, queue_worker_wait_s=60)
    gw = await NatsQueue.connect(settings, gateway=True, worker=False)
    workers: list[NatsQueue] = []
    try:
        answer = asyncio.create_task(gw.submit(_task("m")))
        for attempt in (1, 2):
            wq = await NatsQueue.connect(settings, gateway=False, worker=True)
            workers.append(wq)
            (d,) = await asyncio.wait_for(wq.pull(prefer=[], max_tasks=10, max_tokens=1000, wait=0), 10)
            assert isinstance(d, NatsDelivery) and d.attempt == attempt
            await wq.nc.close()  # the worker dies holding it: no ack, no in-progress, its connection gone
        # a live worker keeps asking; the server then gives up on the task and says so in an advisory
        wq = await NatsQueue.connect(settings, gateway=False, worker=True)
        workers.append(wq)
        asking = asyncio.create_task(wq.pull(prefer=[], max_tasks=10, max_tokens=1000, wait=0))
        with pytest.raises(InternalError, match="dead-letter"):
            await asyncio.wait_for(answer, 10)
        asking.cancel()
        dead = await gw.js.get_msg("SHOAL_DEAD", seq=1)
        assert dead.headers and dead.headers["Shoal-Deliveries"] == "2"
        assert (await gw.js.stream_info("SHOAL_WORK")).state.messages == 0
    finally:
        await gw.close()
        for w in workers:
            await w.close()

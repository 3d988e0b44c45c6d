"""Distributed mode end to end: a gateway and `shoal worker` processes on a real nats-server."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import nats
import numpy as np
import pytest

from engine.wire import packb, unpackb
from tests.helpers import WORDS, LiveServer
from tests.nats_support import NatsServer, WorkerProc, gateway, reference_vectors, scrape

pytestmark = [pytest.mark.nats, pytest.mark.slow]
MP = {"Content-Type": "application/msgpack"}
# these tests serve a tiny checkpoint folder by its path: gateway and workers opt in to local model folders
LOCAL = {"SHOAL_LOCAL_MODELS": "1"}
TEXTS = [" ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(1 + i % 12)) for i in range(64)]


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "js").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def reference(tiny_bert: Path) -> dict[str, np.ndarray]:
    return reference_vectors(str(tiny_bert), TEXTS)


async def _load(url: str, model: str, n: int, clients: int) -> list[tuple[str, int, object]]:
    """n single-text requests from `clients` concurrent clients: (text, status, vector or error body)."""
    out: list[tuple[str, int, object]] = []

    async def client(c: int) -> None:
        async with httpx.AsyncClient(timeout=120) as http:
            for i in range(c, n, clients):
                text = TEXTS[i % len(TEXTS)]
                r = await http.post(f"{url}/v1/encode/{model}", content=packb({"items": [{"text": text}]}), headers=MP)
                body = unpackb(r.content)["items"][0]["dense"]["values"] if r.status_code == 200 else r.text
                out.append((text, r.status_code, body))

    await asyncio.gather(*(client(c) for c in range(clients)))
    return out


def _check(results: list[tuple[str, int, object]], reference: dict[str, np.ndarray], n: int) -> None:
    assert len(results) == n
    bad = [(t, s, b) for t, s, b in results if s != 200]
    assert not bad, bad[:3]
    for text, _, vec in results:
        np.testing.assert_allclose(vec, reference[text], atol=1e-5)


def _stop_all(*procs: LiveServer | WorkerProc | None) -> None:
    for p in procs:
        if p is not None:
            p.stop()


def test_two_workers_serve_2000_requests_from_16_clients(ns: NatsServer, tiny_bert: Path, reference: dict) -> None:
    workers = [WorkerProc(ns.url, env=LOCAL) for _ in range(2)]
    gw = None
    try:
        for w in workers:
            w.wait_ready()
        gw = gateway(ns.url, env=LOCAL)
        results = asyncio.run(_load(gw.url, str(tiny_bert), 2000, 16))
        _check(results, reference, 2000)
        pulled = [w.metric("shoal_queue_pulled_total") for w in workers]
        assert all(p > 0 for p in pulled), pulled  # both workers did work, with no coordinator
        assert sum(pulled) >= 2000
        assert scrape(f"{gw.url}/metrics", "shoal_queue_pending") >= 0
    finally:
        _stop_all(gw, *workers)


def test_sigkill_a_worker_mid_flight_every_request_answered_once(
    ns: NatsServer, tiny_bert: Path, reference: dict
) -> None:
    # both workers linger 300 ms on every pull: the victim almost always holds unacked tasks when it dies,
    # and the two share the stream evenly (a faster survivor could otherwise take nearly all of it)
    env = {"SHOAL_QUEUE_ACK_WAIT_S": "2", "SHOAL_BATCH_WAIT_MS": "300"}
    victim = WorkerProc(ns.url, env={**LOCAL, **env})
    survivor = WorkerProc(ns.url, env={**LOCAL, **env})
    gw = None
    try:
        victim.wait_ready()
        survivor.wait_ready()
        gw = gateway(ns.url, env=LOCAL)
        results: list = []
        runner = threading.Thread(target=lambda: results.extend(asyncio.run(_load(gw.url, str(tiny_bert), 600, 16))))
        runner.start()
        deadline = time.monotonic() + 120
        while victim.metric("shoal_queue_pulled_total") < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        while victim.metric("shoal_queue_held") == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # kill it while it holds pulled, unanswered tasks
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        runner.join(timeout=300)
        assert not runner.is_alive()
        _check(results, reference, 600)
        assert survivor.metric("shoal_queue_redeliveries_total") > 0  # the dead worker's tasks came back
    finally:
        _stop_all(gw, survivor, victim)


def test_poison_task_is_dead_lettered_and_the_client_gets_a_clear_error(ns: NatsServer, tiny_bert: Path) -> None:
    broken = ns.store.parent / "broken-model"
    shutil.copytree(tiny_bert, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    worker = WorkerProc(ns.url, env={**LOCAL, "SHOAL_QUEUE_MAX_DELIVER": "3", "SHOAL_QUEUE_ACK_WAIT_S": "2"})
    gw = None
    try:
        worker.wait_ready()
        gw = gateway(ns.url, env=LOCAL)
        r = httpx.post(
            f"{gw.url}/v1/encode/{broken}", content=packb({"items": [{"text": "x"}]}), headers=MP, timeout=120
        )
        assert r.status_code == 502, r.text
        detail = r.json()["detail"]
        assert detail["code"] == "MODEL_LOAD_FAILED" and "dead-letter" in detail["message"]
        assert worker.metric("shoal_queue_dead_letters_total") == 1

        async def inspect() -> tuple[dict, int]:
            nc = await nats.connect(ns.url)
            js = nc.jetstream()
            dead = await js.get_msg("SHOAL_DEAD", seq=1)
            work = await js.stream_info("SHOAL_WORK")
            await nc.close()
            return dict(dead.headers or {}), work.state.messages

        headers, left = asyncio.run(inspect())
        assert headers["Shoal-Error-Code"] == "MODEL_LOAD_FAILED" and headers["Shoal-Deliveries"] == "3"
        assert "safetensors" in headers["Shoal-Error"] or "load" in headers["Shoal-Error"]
        assert left == 0  # gone from the work queue
        # a good model still works on the same worker
        ok = httpx.post(f"{gw.url}/v1/encode/{tiny_bert}", content=packb({"items": [{"text": "x"}]}), headers=MP)
        assert ok.status_code == 200
    finally:
        _stop_all(gw, worker)


def test_nats_server_restart_gateway_and_workers_reconnect(ns: NatsServer, tiny_bert: Path, reference: dict) -> None:
    worker = WorkerProc(ns.url, env=LOCAL)
    gw = None
    try:
        worker.wait_ready()
        gw = gateway(ns.url, env=LOCAL)
        _check(asyncio.run(_load(gw.url, str(tiny_bert), 40, 4)), reference, 40)
        ns.stop()
        ns.start()
        deadline = time.monotonic() + 90
        status = 0
        while time.monotonic() < deadline:
            body = packb({"items": [{"text": TEXTS[0]}]})
            status = httpx.post(f"{gw.url}/v1/encode/{tiny_bert}", content=body, headers=MP, timeout=30).status_code
            if status == 200:
                break
            assert status == 503  # while reconnecting: a transient, retryable answer, never a hang
            time.sleep(0.5)
        assert status == 200
        _check(asyncio.run(_load(gw.url, str(tiny_bert), 40, 4)), reference, 40)
        assert worker.proc.poll() is None
    finally:
        _stop_all(gw, worker)


def test_backpressure_503_then_expired_tasks_dropped_unrun(ns: NatsServer, tiny_bert: Path) -> None:
    env = {"SHOAL_QUEUE_PENDING_LIMIT": "3", "SHOAL_QUEUE_PENDING_REFRESH_S": "0.1", "SHOAL_REQUEST_TIMEOUT_S": "3"}
    env["SHOAL_QUEUE_WORKER_WAIT_S"] = "60"  # a pool scaled to zero: tasks wait for a worker instead of NO_WORKER
    gw = gateway(ns.url, env={**LOCAL, **env})
    worker = None
    try:
        url = f"{gw.url}/v1/encode/{tiny_bert}"
        body = packb({"items": [{"text": "waiting"}]})
        statuses: list[int] = []
        fill = [
            threading.Thread(
                target=lambda: statuses.append(httpx.post(url, content=body, headers=MP, timeout=60).status_code)
            )
            for _ in range(3)
        ]
        for t in fill:
            t.start()
        until = time.monotonic() + 2.5  # the three are published and the gateway's cached count has seen them
        while scrape(f"{gw.url}/metrics", "shoal_queue_pending") < 3 and time.monotonic() < until:
            time.sleep(0.05)
        r = httpx.post(url, content=body, headers=MP, timeout=60)
        assert r.status_code == 503 and r.json()["detail"]["code"] == "QUEUE_FULL"
        assert int(r.headers["Retry-After"]) >= 1
        for t in fill:
            t.join()
        assert statuses == [504, 504, 504]  # nobody served them within their deadline
        worker = WorkerProc(ns.url, env=LOCAL).wait_ready()
        deadline = time.monotonic() + 60
        while worker.metric("shoal_queue_expired_total") < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert worker.metric("shoal_queue_expired_total") == 3  # acked and dropped, never run
        assert worker.metric("shoal_items_total") == 0
        # once the gateway's cached pending count has caught up with the drained stream, requests go through
        deadline = time.monotonic() + 30
        while scrape(f"{gw.url}/metrics", "shoal_queue_pending") > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.post(url, content=body, headers=MP, timeout=60).status_code == 200
    finally:
        _stop_all(gw, worker)

"""Distributed mode on a three-node NATS JetStream cluster (work stream with 3 replicas): under steady load one
node is SIGKILLed and restarted, then the stream's leader is SIGKILLed. Every request is answered once with the
in-process engine's vectors; what clients see in between is only retryable (503 / 504 with a code); throughput
comes back. Gateway and workers are given all three URLs; a URL list with a node down at start fails over."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import nats
import numpy as np
import pytest

from engine.wire import packb, unpackb
from tests.helpers import WORDS, free_port
from tests.nats_support import NatsCluster, NetnsCluster, WorkerProc, gateway, reference_vectors, scrape

pytestmark = [pytest.mark.nats, pytest.mark.slow]
MP = {"Content-Type": "application/msgpack"}
TEXTS = [" ".join(WORDS[(i * 5 + k) % len(WORDS)] for k in range(1 + i % 10)) for i in range(48)]
RETRYABLE = {503, 504}
ENV = {
    "SHOAL_LOCAL_MODELS": "1",
    "SHOAL_QUEUE_REPLICAS": "3",
    "SHOAL_QUEUE_ACK_WAIT_S": "3",  # a task pulled by a worker whose node died comes back within seconds
    "SHOAL_REQUEST_TIMEOUT_S": "8",  # an answer lost with a node is a 504 the client retries, not a long hang
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    c = NatsCluster(tmp_path / "nats").start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def reference(tiny_bert: Path) -> dict[str, np.ndarray]:
    return reference_vectors(str(tiny_bert), TEXTS)


@dataclass
class Ledger:
    """Every logical request: sent, answered (and when), the codes of the errors seen on the way, wrong answers."""

    sent: int = 0
    answered: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    fatal: list[str] = field(default_factory=list)


async def _client(url: str, model: str, c: int, stop: threading.Event, led: Ledger, ref: dict) -> None:
    i = c
    async with httpx.AsyncClient(timeout=30) as http:
        while not stop.is_set():
            text = TEXTS[i % len(TEXTS)]
            i += 7
            led.sent += 1
            body = packb({"items": [{"text": text}]})
            give_up = time.monotonic() + 90  # retry a retryable answer for this long before counting it lost
            while True:
                try:
                    r = await http.post(f"{url}/v1/encode/{model}", content=body, headers=MP)
                except httpx.HTTPError as e:
                    led.fatal.append(f"transport {type(e).__name__}")
                    break
                if r.status_code == 200:
                    vec = unpackb(r.content)["items"][0]["dense"]["values"]
                    if not np.allclose(vec, ref[text], atol=1e-5):
                        led.wrong.append(text)
                    led.answered.append(time.monotonic())
                    break
                code = (
                    r.json().get("detail", {}).get("code", "?")
                    if r.headers.get("content-type", "").startswith("application/json")
                    else "?"
                )  # noqa: E501
                key = f"{r.status_code} {code}"
                led.errors[key] = led.errors.get(key, 0) + 1
                if r.status_code not in RETRYABLE:
                    led.fatal.append(key)
                    break
                if time.monotonic() > give_up:
                    led.lost.append(text)
                    break
                await asyncio.sleep(min(float(r.headers.get("Retry-After", 0.5)), 2.0))


def _load(url: str, model: str, clients: int, stop: threading.Event, led: Ledger, ref: dict) -> None:
    async def run() -> None:
        await asyncio.gather(*(_client(url, model, c, stop, led, ref) for c in range(clients)))

    asyncio.run(run())


def _stream_leader(url: str) -> str:
    async def ask() -> str:
        nc = await nats.connect(url.split(","), connect_timeout=2)
        try:
            info = await nc.jetstream(timeout=5).stream_info("SHOAL_WORK")
            assert info.cluster is not None and info.config.num_replicas == 3
            return str(info.cluster.leader)
        finally:
            await nc.close()

    return asyncio.run(ask())


def _rate(times: list[float], start: float, end: float) -> float:
    return sum(start <= t < end for t in times) / max(end - start, 1e-9)


def _recovery_s(times: list[float], event: float, baseline: float, horizon: float = 60) -> float:
    """Seconds after an event until a one-second window again completes half the pre-event rate."""
    t = event
    while t < event + horizon:
        if _rate(times, t, t + 1) >= 0.5 * baseline:
            return t - event
        t += 0.25
    return float("inf")


def _under_load(
    cluster: NatsCluster, model: str, reference: dict, chaos: Callable[[], list[tuple[str, float]]]
) -> tuple[Ledger, float, list[tuple[str, float]], float]:
    """Two workers and a gateway on the cluster, six clients sending until `chaos` has run and 20 s more."""
    workers = [WorkerProc(cluster.url, env=ENV) for _ in range(2)]
    gw = None
    stop, led = threading.Event(), Ledger()
    runner = None
    try:
        for w in workers:
            w.wait_ready()
        gw = gateway(cluster.url, env=ENV)
        runner = threading.Thread(target=_load, args=(gw.url, model, 6, stop, led, reference))
        runner.start()
        deadline = time.monotonic() + 180
        while len(led.answered) < 60 and time.monotonic() < deadline:
            time.sleep(0.1)
        t0 = time.monotonic()
        time.sleep(3)
        baseline = _rate(led.answered, t0, time.monotonic())
        events = chaos()
        time.sleep(20)
        stop.set()
        runner.join(timeout=200)
        assert not runner.is_alive()
        return led, baseline, events, scrape(f"{gw.url}/metrics", "shoal_queue_duplicate_results_total")
    finally:
        stop.set()
        if runner is not None:
            runner.join(timeout=200)
        for p in (gw, *workers):
            if p is not None:
                p.stop()


def _report_and_check(
    led: Ledger, baseline: float, events: list[tuple[str, float]], dups: float, bound_s: float = 30
) -> None:
    recovery = {name: _recovery_s(led.answered, t, baseline) for name, t in events}
    print(
        f"\nsent {led.sent}, answered {len(led.answered)}, wrong {len(led.wrong)}, lost {len(led.lost)}, "
        f"non-retryable {led.fatal}, errors seen {led.errors}, late duplicate replies dropped by the gateway "
        f"{dups:.0f}; baseline {baseline:.1f} req/s; back to half of it after: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in recovery.items())
    )
    assert not led.fatal, led.fatal  # every error a client saw was retryable
    assert not led.lost and not led.wrong
    assert len(led.answered) == led.sent  # each request answered exactly once
    assert all(v < bound_s for v in recovery.values()), recovery


def test_node_kill_then_leader_kill_under_load_loses_nothing(
    cluster: NatsCluster, tiny_bert: Path, reference: dict
) -> None:
    def chaos() -> list[tuple[str, float]]:
        leader = _stream_leader(cluster.url)
        victim = next(n for n in cluster.nodes if n.name != leader)
        kill1 = time.monotonic()
        victim.kill()
        time.sleep(6)
        victim.start()
        time.sleep(6)
        leader = _stream_leader(cluster.url)
        kill2 = time.monotonic()
        cluster.node(leader).kill()
        return [("node kill", kill1), (f"leader kill ({leader})", kill2)]

    _report_and_check(*_under_load(cluster, str(tiny_bert), reference, chaos))


@pytest.mark.skipif(not NetnsCluster.available(), reason="needs root and `ip netns` (iproute2) to cut a node off")
def test_leader_cut_off_for_20_s_then_rejoining_loses_nothing(tmp_path: Path, tiny_bert: Path, reference: dict) -> None:
    cluster = NetnsCluster(tmp_path / "nats").start()
    try:

        def chaos() -> list[tuple[str, float]]:
            leader = _stream_leader(cluster.url)
            cut = time.monotonic()
            cluster.cut(leader)
            time.sleep(20)
            cluster.heal(leader)
            return [(f"leader cut off ({leader})", cut), ("rejoin", time.monotonic())]

        # Throughput must be back within 30 s of the cut, while the leader is still cut off: connections to it
        # notice the silence by their pings (SHOAL_QUEUE_PING_INTERVAL_S) and move to another node (back
        # 6-13 s after the cut in 4 runs on 2026-12-02; with nats-py's 120 s default ping the stall lasted
        # until the partition healed in 5 of 7 runs). Nothing may be lost.
        _report_and_check(*_under_load(cluster, str(tiny_bert), reference, chaos))
        assert all(n.proc is not None and n.proc.poll() is None for n in cluster.nodes)
    finally:
        cluster.stop()


def test_a_url_list_with_a_node_down_at_start_fails_over(
    cluster: NatsCluster, tiny_bert: Path, reference: dict
) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"  # nothing listens here
    urls = ",".join([dead, *(n.url for n in cluster.nodes)])
    worker = WorkerProc(urls, env=ENV)
    gw = None
    try:
        worker.wait_ready()
        gw = gateway(urls, env=ENV)
        r = httpx.post(
            f"{gw.url}/v1/encode/{tiny_bert}", content=packb({"items": [{"text": TEXTS[0]}]}), headers=MP, timeout=60
        )
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(unpackb(r.content)["items"][0]["dense"]["values"], reference[TEXTS[0]], atol=1e-5)
    finally:
        for p in (gw, worker):
            if p is not None:
                p.stop()

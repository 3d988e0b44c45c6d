"""Overload: a bounded number of requests in flight per model, sized from its measured rate; past it a 503
QUEUE_FULL with Retry-After at once (network requests only: the SDK's own calls wait their turn); and a
liveness probe answered in the connection layer, never behind the app. The throughput figures are in
bench/overload.py, not here."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from engine.errors import QueueFull
from engine.queue.admission import Admission
from tests.hardening_support import MINILM, connect, read_reply
from tests.helpers import LiveServer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_past_the_floor_a_model_with_no_rate_sheds_at_once() -> None:
    a = Admission(0.5, min_in_flight=2, max_in_flight=100, clock=Clock())
    a.enter("m")
    a.enter("m")
    with pytest.raises(QueueFull) as e:
        a.enter("m")
    assert e.value.status == 503 and e.value.retry_after is not None and e.value.retry_after >= 1
    a.enter("other")  # per model
    a.leave("m")
    a.enter("m")
    assert a.shed == 1


def test_the_bound_follows_the_measured_rate() -> None:
    clock = Clock()
    a = Admission(0.5, min_in_flight=2, max_in_flight=40, clock=clock)
    for _ in range(100):  # 100 answers in one second: 100/s
        a.enter("m")
        a.leave("m")
        clock.now += 0.01
    assert a.limit("m") == 40  # 100/s x 0.5 s = 50, capped at 40
    clock.now += 10  # the window has passed: back to the floor
    assert a.limit("m") == 2


def test_the_sdk_engine_is_not_admission_controlled() -> None:
    from engine.config import EngineSettings
    from engine.runtime import AsyncEngine

    engine = AsyncEngine(EngineSettings(admission_wait_s=0.5))
    assert engine.admission is None  # until the HTTP app asks for it
    engine.control_admission()
    assert engine.admission is not None
    on = AsyncEngine()
    on.control_admission()
    assert on.admission is not None and on.admission.target_wait_s == 0.1  # on by default for network requests
    off = AsyncEngine(EngineSettings(admission_wait_s=0))
    off.control_admission()
    assert off.admission is None  # 0 turns it off


@pytest.fixture(scope="module")
def tight() -> Iterator[LiveServer]:
    env = {"SHOAL_ADMISSION_WAIT_S": "0.5", "SHOAL_ADMISSION_MIN_IN_FLIGHT": "2", "SHOAL_ADMISSION_MAX_IN_FLIGHT": "2"}
    srv = LiveServer(env=env).wait_ready()
    yield srv
    srv.stop()


@pytest.mark.slow
def test_overload_is_shed_with_503_and_retry_after(tight: LiveServer) -> None:
    text = "a long passage about pumps and valves " * 40

    async def main() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=tight.url, timeout=120) as c:
            calls = [c.post(f"/v1/encode/{MINILM}", json={"items": [{"text": text}] * 16}) for _ in range(12)]
            calls += [c.post("/v1/embeddings", json={"model": MINILM, "input": [text] * 16}) for _ in range(4)]
            return list(await asyncio.gather(*calls))

    replies = asyncio.run(main())
    shed = [r for r in replies if r.status_code == 503]
    assert {r.status_code for r in replies} <= {200, 503} and shed, [r.status_code for r in replies]
    assert sum(r.status_code == 200 for r in replies) >= 2
    for r in shed:
        body = r.json()
        code = body["detail"]["code"] if "detail" in body else body["error"]["code"]
        assert code == "QUEUE_FULL" and int(r.headers["retry-after"]) >= 1, r.text
    assert httpx.post(f"{tight.url}/v1/encode/{MINILM}", json={"items": [{"text": "x"}]}).status_code == 200


@pytest.mark.slow
def test_liveness_probes_are_answered_in_the_connection_layer(tight: LiveServer) -> None:
    s = connect(tight.port)
    try:  # two pipelined probes, then one that asks to close
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        reply = read_reply(s, timeout=10)
    finally:
        s.close()
    assert reply.count(b"HTTP/1.1 200 OK") == 3 and reply.count(b'{"status":"ok"}') == 3, reply
    assert reply.endswith(b'{"status":"ok"}') and b"connection: close" in reply  # and the server closed

"""/metrics stays bounded and closed: random model ids and malformed bodies add no label values, client
hang-ups are their own outcome (code 499, never 500), and /metrics sits behind its own key or its own port."""

from __future__ import annotations

import asyncio
import random
import string
import time
from collections.abc import Iterator

import httpx
import pytest

from engine.http.edge import endpoint_label
from engine.wire import packb
from tests.hardening_support import MINILM, connect, head, label_values, samples
from tests.helpers import LiveServer, free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    srv = LiveServer().wait_ready()
    yield srv
    srv.stop()


def random_id(rng: random.Random) -> str:
    shapes = [
        lambda: "".join(rng.choices(string.ascii_letters, k=rng.randint(1, 40))),
        lambda: "/" + "/".join(rng.choice(["tmp", "etc", "root", "home", ".ssh"]) for _ in range(rng.randint(1, 4))),
        lambda: f"org-{rng.randint(0, 10**9)}/model-{rng.randint(0, 10**9)}",
        lambda: "~" + "".join(rng.choices(string.ascii_lowercase, k=8)),
    ]
    return rng.choice(shapes)()


async def flood(url: str, n: int) -> list[int]:
    """n requests: random model ids on every route, malformed bodies under a real id, random paths."""
    rng = random.Random(17)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=16)) as client:

        async def one(i: int) -> int:
            model = random_id(rng)
            kind = i % 6
            if kind == 0:
                r = await client.post(f"/v1/encode/{model}", json={"items": [{"text": "x"}]})
            elif kind == 1:
                r = await client.post("/v1/embeddings", json={"model": model, "input": "x"})
            elif kind == 2:
                r = await client.post("/v1/rerank", json={"model": model, "query": "q", "documents": ["d"]})
            elif kind == 3:
                r = await client.post(
                    f"/v1/encode/{MINILM}", content=rng.randbytes(64), headers={"Content-Type": "application/json"}
                )
            elif kind == 4:
                r = await client.post(f"/v1/{model.strip('/')}", content=b"{")
            else:
                r = await client.get(f"/v1/models/{model}")
            return r.status_code

        sem = asyncio.Semaphore(16)

        async def bounded(i: int) -> int:
            async with sem:
                return await one(i)

        return await asyncio.gather(*(bounded(i) for i in range(n)))


def test_random_ids_and_malformed_bodies_add_no_label_values(server: LiveServer) -> None:
    asyncio.run(flood(server.url, 12))  # every kind of answer has been counted once
    httpx.post(f"{server.url}/v1/encode/{MINILM}", json={"items": [{"text": "x"}]}, timeout=120)
    size = len(httpx.get(f"{server.url}/metrics").text)
    before = {m: label_values(server.url, m, lab) for m in ("shoal_requests_total",) for lab in ("model",)}
    endpoints = label_values(server.url, "shoal_requests_total", "endpoint")
    series = set(samples(server.url, "shoal_requests_total")) | set(samples(server.url, "shoal_request_seconds_count"))
    statuses = asyncio.run(flood(server.url, 1000))
    assert all(400 <= s < 500 for s in statuses), sorted(set(statuses))
    after = {m: label_values(server.url, m, lab) for m in ("shoal_requests_total",) for lab in ("model",)}
    assert after == before and before["shoal_requests_total"] <= {"unknown", MINILM}
    assert label_values(server.url, "shoal_requests_total", "endpoint") == endpoints
    grown = set(samples(server.url, "shoal_requests_total")) | set(samples(server.url, "shoal_request_seconds_count"))
    assert grown == series  # not one new series
    assert len(httpx.get(f"{server.url}/metrics").text) < size * 1.05  # the page did not grow (counts only)


def test_client_hang_ups_are_counted_as_499_not_500(server: LiveServer) -> None:
    def codes() -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, value in samples(server.url, "shoal_requests_total").items():
            code = labels.split('code="')[1].split('"')[0]
            out[code] = out.get(code, 0.0) + value
        return out

    before = codes()
    # 1. gone halfway through sending the body
    s = connect(server.port)
    s.sendall(
        head("POST", f"/v1/encode/{MINILM}", {"Content-Type": "application/json", "Content-Length": "5000"})
        + b'{"items"'
    )
    time.sleep(0.3)
    s.close()
    # 2. gone while the answer is on its way: 32 passages of 256 tokens take seconds to encode on a CPU
    body = packb({"items": [{"text": f"passage {i} " + "many words " * 200} for i in range(32)]})
    s = connect(server.port)
    s.sendall(
        head("POST", f"/v1/encode/{MINILM}", {"Content-Type": "application/msgpack", "Content-Length": str(len(body))})
        + body
    )
    time.sleep(0.3)
    s.close()
    deadline = time.monotonic() + 60
    while codes().get("499", 0.0) - before.get("499", 0.0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    after = codes()
    assert after.get("499", 0.0) - before.get("499", 0.0) == 2, (before, after)
    assert after.get("500", 0.0) == before.get("500", 0.0)
    r = httpx.post(f"{server.url}/v1/encode/{MINILM}", json={"items": [{"text": "still here"}]}, timeout=120)
    assert r.status_code == 200


def test_metrics_behind_their_own_key() -> None:
    srv = LiveServer(
        env={"SHOAL_API_KEY": "api-key-0123456789", "SHOAL_METRICS_KEY": "metrics-key-0123456789"}
    ).wait_ready()
    try:
        m = f"{srv.url}/metrics"
        assert httpx.get(m).status_code == 401
        assert httpx.get(m, headers={"Authorization": "Bearer api-key-0123456789"}).status_code == 401
        r = httpx.get(m, headers={"Authorization": "Bearer metrics-key-0123456789"})
        assert r.status_code == 200 and "shoal_requests_total" in r.text
        enc = httpx.post(
            f"{srv.url}/v1/encode/{MINILM}",
            json={"items": [{"text": "x"}]},
            headers={"Authorization": "Bearer metrics-key-0123456789"},
        )
        assert enc.status_code == 401  # the metrics key opens /metrics only
    finally:
        srv.stop()


def test_metrics_on_their_own_port_with_cors_configured() -> None:
    port = free_port()
    env = {
        "SHOAL_API_KEY": "api-key-0123456789",
        "SHOAL_METRICS_PORT": str(port),
        "SHOAL_CORS_ORIGINS": "https://app.example",
    }
    srv = LiveServer(env=env).wait_ready()
    try:
        key = {"Authorization": "Bearer api-key-0123456789"}
        r = httpx.get(f"{srv.url}/metrics", headers=key)
        assert r.status_code == 404  # not on the API port at all
        r = httpx.get(f"http://127.0.0.1:{port}/metrics")
        assert r.status_code == 401  # API keys and no metrics key: the API keys open the metrics port too
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=key)
        assert r.status_code == 200 and "shoal_requests_total" in r.text
        pre = {
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        }
        r = httpx.options(f"{srv.url}/v1/encode/{MINILM}", headers=pre)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        r = httpx.options(f"{srv.url}/v1/encode/{MINILM}", headers={**pre, "Origin": "https://evil.example"})
        assert r.headers.get("access-control-allow-origin") != "https://evil.example"
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/v1/encode/org/model", "encode"),
        ("/v2/rerank", "rerank"),
        ("/embed", "embed"),
        ("/infinity/embeddings", "embeddings"),
        ("/infinity/rerank", "rerank"),
        ("/infinity/anything", "other"),
        ("/v1/no-such-route", "other"),
        ("/", "other"),
    ],
)
def test_every_route_family_has_a_bounded_endpoint_label(path: str, label: str) -> None:
    assert endpoint_label(path) == label

"""Limits checked before the work they bound, read deadlines, and a connection cap that always leaves room for
health probes; against real `shoal serve` processes and real sockets (idle, slow and trickling clients)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from engine.http.connections import FRESH_S
from tests.hardening_support import (
    MINILM,
    closed_by_server,
    connect,
    head,
    healthy,
    peak_rss,
    read_reply,
    reset_peak,
    trickle,
)
from tests.helpers import LiveServer

pytestmark = pytest.mark.slow
MP = {"Content-Type": "application/msgpack"}
TIGHT = {
    "SHOAL_MAX_CONNECTIONS": "8",
    "SHOAL_HEALTH_CONNECTIONS": "4",
    "SHOAL_HEAD_TIMEOUT_S": "3",
    "SHOAL_BODY_TIMEOUT_S": "3",
    "SHOAL_KEEP_ALIVE_S": "2",
    "SHOAL_MAX_BODY_BYTES": str(1024 * 1024),
    "SHOAL_MAX_REQUEST_TOKENS": "5000",
}


@pytest.fixture(scope="module")
def tight() -> Iterator[LiveServer]:
    """Small cap, short deadlines, a 1 MiB body limit: every limit is cheap to reach."""
    srv = LiveServer(env=TIGHT).wait_ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def default() -> Iterator[LiveServer]:
    """`shoal serve` with every default."""
    srv = LiveServer().wait_ready()
    yield srv
    srv.stop()


def poll_health(url: str, stop: threading.Event, results: list[tuple[int, float]]) -> None:
    """GET /healthz on a fresh connection every 50 ms until stopped: (status or 0, seconds) each."""
    while not stop.is_set():
        started = time.perf_counter()
        try:
            status = httpx.get(f"{url}/healthz", timeout=30).status_code
        except httpx.HTTPError:
            status = 0
        results.append((status, time.perf_counter() - started))
        time.sleep(0.05)


def idle_sockets(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]


def test_health_answers_throughout_while_1000_idle_connections_are_held(default: LiveServer) -> None:
    results: list[tuple[int, float]] = []
    stop = threading.Event()
    poller = threading.Thread(target=poll_health, args=(default.url, stop, results))
    poller.start()
    socks = idle_sockets(default.port, 1000)
    try:
        time.sleep(2)  # held open, idle, while the probes go on
        r = httpx.post(f"{default.url}/v1/encode/{MINILM}", json={"items": [{"text": "x"}]}, timeout=120)
        assert r.status_code == 200
    finally:
        stop.set()
        poller.join()
        for s in socks:
            s.close()
    assert len(results) >= 5 and all(status == 200 for status, _ in results), results
    print(f"\n/healthz under 1,000 idle connections: {len(results)} probes, worst {max(t for _, t in results):.3f}s")


def test_past_the_cap_the_longest_idle_connection_makes_room(tight: LiveServer) -> None:
    socks = idle_sockets(tight.port, 1000)
    try:
        time.sleep(FRESH_S + 0.5)  # a connection younger than FRESH_S that sent nothing is not yet evictable
        assert httpx.get(f"{tight.url}/healthz", timeout=30).status_code == 200
        closed = sum(closed_by_server(s) for s in socks)
        # at most the cap and its health reserve stay open: during the burst every open connection is younger
        # than FRESH_S, so a few newcomers take reserve slots rather than evict one whose bytes are unread
        cap = int(TIGHT["SHOAL_MAX_CONNECTIONS"]) + int(TIGHT["SHOAL_HEALTH_CONNECTIONS"])
        assert closed >= 1000 - cap, closed
        assert healthy(tight)
    finally:
        for s in socks:
            s.close()


def slow_body(port: int, path: str = f"/v1/encode/{MINILM}") -> socket.socket:
    """A request whose head is complete and whose 1,000-byte body never comes: a busy connection."""
    s = connect(port)
    s.sendall(head("POST", path, {"Content-Type": "application/json", "Content-Length": "1000"}) + b"{")
    return s


def test_health_probes_have_room_when_every_connection_is_busy(tight: LiveServer) -> None:
    busy = [slow_body(tight.port) for _ in range(8)]
    try:
        time.sleep(0.3)
        assert httpx.get(f"{tight.url}/healthz", timeout=30).status_code == 200
        assert httpx.get(f"{tight.url}/readyz", timeout=30).status_code == 200
        r = httpx.post(f"{tight.url}/v1/encode/{MINILM}", json={"items": [{"text": "x"}]}, timeout=30)
        assert r.status_code == 503 and r.json()["detail"]["code"] == "QUEUE_FULL" and r.headers["retry-after"]
        for s in busy:  # each slow body gets its 408 when its deadline passes
            assert b"REQUEST_TIMEOUT" in read_reply(s)
    finally:
        for s in busy:
            s.close()
    assert healthy(tight)


@pytest.mark.parametrize(
    ("path", "shape"),
    [(f"/v1/encode/{MINILM}", b'{"detail":{"code":"REQUEST_TIMEOUT"'), ("/v1/embeddings", b'"code":"REQUEST_TIMEOUT"')],
)
def test_a_slow_body_gets_408_in_the_route_shape_and_a_closed_connection(
    tight: LiveServer, path: str, shape: bytes
) -> None:
    s = slow_body(tight.port, path)
    reply = trickle(s, (b" " for _ in range(100)))  # one byte every 100 ms: alive, but never done in time
    assert reply.startswith(b"HTTP/1.1 408") and shape in reply and b"connection: close" in reply.lower(), reply[-300:]
    assert healthy(tight)


def test_a_slow_head_gets_408_and_a_closed_connection(tight: LiveServer) -> None:
    s = connect(tight.port)
    s.sendall(b"POST /v1/encode/x HTTP/1.1\r\nHost: a\r\n")
    reply = trickle(s, (f"X-Slow-{i}: y\r\n".encode() for i in range(100)))  # a header line every 100 ms
    assert reply.startswith(b"HTTP/1.1 408") or reply == b"", reply


def test_an_idle_keep_alive_connection_is_closed(tight: LiveServer) -> None:
    s = connect(tight.port)
    try:
        s.sendall(head("GET", "/healthz", {}))
        # everything until the server closes (a head and body may come in separate reads; a peek that finds
        # an unread body would never see the close), or 60 s and no close: then nothing is left to read
        reply = read_reply(s, timeout=60)
        assert reply.startswith(b"HTTP/1.1 200") and reply.count(b"HTTP/1.1 ") == 1, reply
        assert closed_by_server(s), "the idle keep-alive connection was not closed"
    finally:
        s.close()


def test_chunked_over_size_body_is_refused_with_flat_memory(tight: LiveServer) -> None:
    reset_peak(tight.proc.pid)
    before = peak_rss(tight.proc.pid)

    def chunks() -> Iterator[bytes]:
        for _ in range(200):  # 200 MiB offered, no Content-Length, against a 1 MiB limit
            yield b"x" * (1024 * 1024)

    try:
        r = httpx.post(f"{tight.url}/v1/encode/{MINILM}", content=chunks(), headers=MP, timeout=60)
        assert r.status_code == 413 and r.json()["detail"]["code"] == "PAYLOAD_TOO_LARGE"
    except httpx.HTTPError:
        pass  # closed while the client still wrote: refused all the same
    grown = peak_rss(tight.proc.pid) - before
    print(f"\npeak RSS growth for a 200 MiB chunked body: {grown / 2**20:.1f} MiB")
    assert grown < 64 * 2**20
    assert healthy(tight)


def test_total_tokens_per_request_are_limited_prefixes_included(tight: LiveServer) -> None:
    items = [{"text": "w" * 1000} for _ in range(10)]  # about 2,520 tokens: under 5,000
    url = f"{tight.url}/v1/encode/{MINILM}"
    assert httpx.post(url, json={"items": items}, timeout=120).status_code == 200
    r = httpx.post(url, json={"items": items, "params": {"instruction": "i" * 2000}}, timeout=120)
    assert r.status_code == 413 and "SHOAL_MAX_REQUEST_TOKENS" in r.json()["detail"]["message"], r.text


@pytest.mark.parametrize("shape", ["items of 4 MiB nils", "top-level array of 4 MiB nils", "60,000 nil items"])
def test_an_array_of_nils_is_a_quick_413_with_flat_memory(default: LiveServer, shape: str) -> None:
    n = 4 * 1024 * 1024 if "4 MiB" in shape else 60_000
    array = b"\xdd" + n.to_bytes(4, "big") + b"\xc0" * n  # msgpack array32 of nils
    body = array if shape.startswith("top-level") else b"\x81\xa5items" + array
    reset_peak(default.proc.pid)
    before = peak_rss(default.proc.pid)
    started = time.perf_counter()
    r = httpx.post(f"{default.url}/v1/encode/{MINILM}", content=body, headers=MP, timeout=120)
    took = time.perf_counter() - started
    grown = peak_rss(default.proc.pid) - before
    print(f"\n{shape}: 413 in {took:.3f}s, peak RSS growth {grown / 2**20:.1f} MiB")
    assert r.status_code == 413 and r.json()["detail"]["code"] == "PAYLOAD_TOO_LARGE", r.text
    assert grown < 64 * 2**20
    if n == 60_000:  # under the list guard: the item count is checked before any item is validated
        assert "SHOAL_MAX_ITEMS" in r.json()["detail"]["message"]
    assert healthy(default)


def test_json_array_of_a_million_nulls_is_413(default: LiveServer) -> None:
    body = b'{"items": [' + b",".join([b"null"] * 1_000_000) + b"]}"
    r = httpx.post(f"{default.url}/v1/embeddings", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


def test_health_never_waits_behind_big_bodies(default: LiveServer) -> None:
    """Four 30 MB JSON bodies at once (decoded, then refused for their token total) while probes go on."""
    text = "word " * 11_000
    body = json.dumps({"items": [{"text": text} for _ in range(512)]}).encode()
    assert 25e6 < len(body) < 32 * 2**20
    results: list[tuple[int, float]] = []
    stop = threading.Event()
    poller = threading.Thread(target=poll_health, args=(default.url, stop, results))
    poller.start()
    statuses: list[int] = []

    def post() -> None:
        r = httpx.post(
            f"{default.url}/v1/encode/{MINILM}", content=body, headers={"Content-Type": "application/json"}, timeout=300
        )
        statuses.append(r.status_code)

    senders = [threading.Thread(target=post) for _ in range(4)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    stop.set()
    poller.join()
    assert statuses == [413] * 4
    assert results and all(status == 200 for status, _ in results), results
    print(f"\n/healthz during 4 x 30 MB bodies: {len(results)} probes, worst {max(t for _, t in results):.3f}s")


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_client_still_writing_its_body_reads_the_413(tight: LiveServer, declared: bool) -> None:
    """The server refuses the body after its head, while the client is still writing; the client then writes
    2 MiB more and must still read the 413 (a socket closed with unread bytes resets, and the answer is lost)."""
    body = b" " * (2 * 1024 * 1024)
    extra = {"Content-Length": str(len(body))} if declared else {"Transfer-Encoding": "chunked"}
    s = connect(tight.port)
    try:
        s.sendall(head("POST", f"/v1/encode/{MINILM}", {"Content-Type": "application/json", **extra}))
        if not declared:  # one chunk over the limit: refused as it streams
            s.sendall(b"%x\r\n" % (1024 * 1024 + 1) + b" " * (1024 * 1024 + 1) + b"\r\n")
        time.sleep(0.3)  # the refusal is decided by now
        piece = 64 * 1024
        for i in range(0, len(body), piece):
            chunk = body[i : i + piece]
            s.sendall(chunk if declared else b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        if not declared:
            s.sendall(b"0\r\n\r\n")
        reply = read_reply(s, timeout=30)
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 413") and b"PAYLOAD_TOO_LARGE" in reply, reply[:200]
    assert healthy(tight)

"""Connection patterns one client can use against everyone else: a head left half-sent on a kept-alive or
pipelined connection, oversized heads, bytes that are not HTTP; every one is bounded, evictable and answered
in JSON. Against real `shoal serve` processes and raw sockets."""

from __future__ import annotations

import json
import socket
import time
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from tests.hardening_support import connect, read_reply
from tests.helpers import LiveServer

REPO = Path(__file__).resolve().parents[1]
TIGHT = {
    "SHOAL_MAX_CONNECTIONS": "8",
    "SHOAL_HEALTH_CONNECTIONS": "4",
    "SHOAL_HEAD_TIMEOUT_S": "2",
    "SHOAL_BODY_TIMEOUT_S": "3",
    "SHOAL_KEEP_ALIVE_S": "2",
    "SHOAL_MAX_HEADER_BYTES": "16384",
}
# one whole request and the start of a second on the same connection (pipelined, then kept alive)
HALF_SECOND = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHo"


def test_uvicorn_is_the_pinned_version() -> None:
    """engine/http/connections.py overrides methods of uvicorn's protocol: it is tested against one version."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("uvicorn"))
    assert "==" in pin, pin
    assert version("uvicorn") == pin.split("==", 1)[1].strip(), (pin, version("uvicorn"))


@pytest.fixture(scope="module")
def tight() -> Iterator[LiveServer]:
    srv = LiveServer(env=TIGHT).wait_ready()
    yield srv
    srv.stop()


def half_second_head(port: int) -> socket.socket:
    """The pattern: a request, the start of the next, its answer read, one more byte, then silence."""
    s = connect(port)
    s.sendall(HALF_SECOND)
    s.settimeout(10)
    assert s.recv(65536).startswith(b"HTTP/1.1 200")
    s.sendall(b"s")
    return s


def wait_closed(s: socket.socket, seconds: float) -> tuple[float | None, bytes]:
    """(seconds until the server closed `s` or None if still open after `seconds`, what it sent meanwhile)."""
    started, got = time.monotonic(), b""
    s.settimeout(0.1)
    while time.monotonic() - started < seconds:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started, got
        if not chunk:
            return time.monotonic() - started, got
        got += chunk
    return None, got


@pytest.mark.slow
def test_a_half_sent_head_after_a_kept_alive_request_has_a_deadline(tight: LiveServer) -> None:
    s = half_second_head(tight.port)
    try:
        took, got = wait_closed(s, 10)
        assert took is not None, "a head started on a kept-alive connection stayed open past its deadline"
        assert took < 2 + 2, took  # the head deadline (2 s) plus slack
        assert got.startswith(b"HTTP/1.1 408") and b'"REQUEST_TIMEOUT"' in got, got
    finally:
        s.close()


@pytest.mark.slow
def test_half_sent_heads_are_evicted_past_the_cap(tight: LiveServer) -> None:
    socks = [half_second_head(tight.port) for _ in range(40)]
    try:
        r = httpx.get(f"{tight.url}/healthz", timeout=5)
        assert r.status_code == 200
        open_ = sum(wait_closed(s, 0.2)[0] is None for s in socks)
        assert open_ <= 8, open_
    finally:
        for s in socks:
            s.close()


@pytest.mark.slow
def test_a_head_over_the_limit_is_431_in_json(tight: LiveServer) -> None:
    s = connect(tight.port)
    try:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000)
        reply = read_reply(s, timeout=10)
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
    body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    assert body["detail"]["code"] == "HEADERS_TOO_LARGE"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("raw", "shape"),
    [
        (b"GARBAGE\r\n\r\n", "native"),
        (b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n", "openai"),
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "native"),
    ],
)
def test_bytes_that_are_not_http_get_a_json_400(tight: LiveServer, raw: bytes, shape: str) -> None:
    s = connect(tight.port)
    try:
        s.sendall(raw)
        reply = read_reply(s, timeout=10)
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"content-type: application/json" in reply.lower()
    body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    code = body["detail"]["code"] if shape == "native" else body["error"]["code"]
    assert code == "INVALID_INPUT", body
    assert "Invalid HTTP request received" not in json.dumps(body)


@pytest.mark.slow
def test_health_answers_with_1000_half_sent_heads_open() -> None:
    """1,000 connections in the pattern at once on the default settings: probes still answer, every one."""
    srv = LiveServer().wait_ready()
    socks: list[socket.socket] = []
    try:
        socks = [half_second_head(srv.port) for _ in range(1000)]
        times = []
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            for _ in range(50):
                started = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                times.append(time.perf_counter() - started)
        times.sort()
        print(
            f"\n/healthz with 1,000 half-sent heads open: p50 {times[25] * 1e3:.1f} ms, worst {times[-1] * 1e3:.1f} ms"
        )
    finally:
        for s in socks:
            s.close()
        srv.stop()

"""Smaller faults of a running `shoal serve`, each against a real server on loopback, asserting the status,
the error code and that the server stays healthy: a head over the limit in one read, bodies without a
Content-Type or with a Content-Encoding, a refused CORS preflight, tool errors that name the tool's argument,
and store errors that name no server folder."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.hardening_support import MINILM, connect, healthy, read_reply
from tests.helpers import LiveServer

pytestmark = pytest.mark.slow
APP = "https://app.example"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Default limits, CORS for one origin, and a --db where nothing was ingested yet."""
    store = tmp_path_factory.mktemp("edges") / "store-not-made-yet"
    env = {"SHOAL_CORS_ORIGINS": json.dumps([APP])}
    srv = LiveServer(env=env, args=["--db", f"lancedb://{store}"]).wait_ready()
    srv.store = store  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def raw(port: int, data: bytes) -> bytes:
    s = connect(port)
    try:
        s.sendall(data)
        return read_reply(s, timeout=30)
    finally:
        s.close()


@pytest.mark.parametrize("size", [70_000, 120_000])
def test_a_header_line_over_the_limit_is_431_however_it_arrives(server: LiveServer, size: int) -> None:
    """A whole head in one write (one read on the server) over SHOAL_MAX_HEADER_BYTES (64 KiB) is 431."""
    head = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * size}\r\n\r\n".encode()
    reply = raw(server.port, head)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["detail"]["code"] == "HEADERS_TOO_LARGE"
    under = raw(
        server.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * 60_000 + b"\r\n\r\n"
    )
    assert under.startswith(b"HTTP/1.1 200"), under[:200]
    assert healthy(server)


def test_json_only_routes_read_a_body_without_content_type_as_json(server: LiveServer) -> None:
    body = json.dumps({"model": MINILM, "input": "hello"}).encode()
    r = httpx.post(f"{server.url}/v1/embeddings", content=body, timeout=120)  # no Content-Type at all
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 384
    rerank = json.dumps({"model": MINILM, "query": "q", "documents": ["a"]}).encode()
    r = httpx.post(f"{server.url}/v1/rerank", content=rerank, timeout=120)
    assert r.status_code == 400 and "msgpack" not in r.text, r.text  # read as JSON: the model's own refusal
    assert "score" in r.json()["error"]["message"]
    r = httpx.post(f"{server.url}/v1/embeddings", content=b"{not json", timeout=120)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"], r.text
    assert healthy(server)


@pytest.mark.parametrize(("path", "shape"), [("/v1/embeddings", "openai"), (f"/v1/encode/{MINILM}", "native")])
@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_a_compressed_body_is_415_naming_its_encoding(server: LiveServer, path: str, shape: str, encoding: str) -> None:
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    r = httpx.post(server.url + path, content=b"\x1f\x8b\x08\x00" + os.urandom(64), headers=headers, timeout=60)
    assert r.status_code == 415, r.text
    error = r.json()["error"] if shape == "openai" else r.json()["detail"]
    assert error["code"] == "UNSUPPORTED_MEDIA_TYPE" and repr(encoding) in error["message"], error
    assert healthy(server)


def test_a_refused_cors_preflight_is_json_in_the_route_shape(server: LiveServer) -> None:
    asked = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    r = httpx.options(f"{server.url}/v1/embeddings", headers={"Origin": "https://evil.example", **asked})
    assert r.status_code == 403 and r.headers["content-type"].startswith("application/json"), r.text
    assert r.json()["error"]["code"] == "FORBIDDEN" and "origin" in r.json()["error"]["message"]
    r = httpx.options(f"{server.url}/v1/encode/{MINILM}", headers={"Origin": "https://evil.example", **asked})
    assert r.status_code == 403 and r.json()["detail"]["code"] == "FORBIDDEN", r.text
    ok = httpx.options(f"{server.url}/v1/embeddings", headers={"Origin": APP, **asked})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == APP
    assert healthy(server)


def test_filter_context_errors_name_its_passages(server: LiveServer) -> None:
    body = json.dumps({"query": "q", "passages": ["fine text", "bad \ud800 text"]}).encode()  # a lone surrogate
    r = httpx.post(f"{server.url}/v1/tools/filter_context", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["detail"]["code"] == "INVALID_INPUT", r.text
    assert r.json()["detail"]["message"].startswith("passages.1: "), r.text
    assert healthy(server)


def test_store_errors_name_no_server_folder(server: LiveServer) -> None:
    store = str(server.store)  # type: ignore[attr-defined]
    r = httpx.post(f"{server.url}/v1/search", json={"query": "pumps"}, timeout=60)
    assert r.status_code == 404 and r.json()["detail"]["code"] == "NO_STORE", r.text
    r2 = httpx.post(f"{server.url}/v1/tools/search", json={"query": "pumps"}, timeout=60)
    assert r2.status_code == 404, r2.text
    r3 = httpx.post(f"{server.url}/v1/search", json={"query": "x", "location": "lancedb:///elsewhere"}, timeout=60)
    assert r3.status_code == 409 and r3.json()["detail"]["code"] == "STORE_MISMATCH", r3.text
    for reply in (r, r2, r3):
        text = reply.json()["detail"]["message"]
        assert store not in text and "<server path>" not in text and Path(store).name not in text, text
    assert healthy(server)

"""Clients honour backpressure: a 503 MODEL_LOADING / QUEUE_FULL / RESOURCE_EXHAUSTED with Retry-After is
sent again after that wait, within bounded attempts and total wait, then fails with a clear error; the
pipeline's ingest rides it out instead of failing the files waiting on a loading model."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from engine.client.http import AsyncClient
from engine.client.retry import RetryPolicy, retry_after_seconds
from engine.client.sync import Client
from engine.errors import ModelLoading, ModelUnavailable, QueueFull, ResourceExhausted, ShoalError
from engine.wire import decode_body
from tests.conftest import MINILM


class BusyServer:
    """A real HTTP server on a local port: the first `busy` encode requests are answered 503 `code` with
    `Retry-After: retry_after` (None: no header), then each is encoded (random unit vectors, 384 dims)."""

    def __init__(self, busy: int, code: str = "MODEL_LOADING", retry_after: str | None = "0.2") -> None:
        self.busy, self.code, self.retry_after = busy, code, retry_after
        self.posts: list[float] = []  # when each encode request arrived (monotonic)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def reply(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    from engine.catalogue.catalogue import Catalogue, model_info

                    info = {**model_info(Catalogue().get(MINILM), True), "available": True}
                    return self.reply(200, {"models": [info]})
                self.reply(200, {"max_client_batch_size": 64})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = decode_body(raw, self.headers.get("Content-Type"))  # msgpack by default, or JSON
                owner.posts.append(time.monotonic())
                if len(owner.posts) <= owner.busy:
                    headers = {"Retry-After": owner.retry_after} if owner.retry_after is not None else {}
                    detail = {"code": owner.code, "message": f"the server is busy ({owner.code})"}
                    return self.reply(503, {"detail": detail}, headers)
                rng = np.random.default_rng(len(owner.posts))
                items = []
                for i, item in enumerate(body["items"]):
                    v = rng.standard_normal(384).astype(np.float32)
                    values = (v / np.linalg.norm(v)).tolist()
                    items.append({"id": item.get("id", f"item-{i}"), "dense": {"dims": 384, "dtype": "float32", "values": values}})  # fmt: skip
                self.reply(200, {"model": MINILM, "items": items, "timing": {}})

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.posts, self.posts[1:], strict=False)]

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def busy() -> Iterator[type[BusyServer]]:
    made: list[BusyServer] = []

    class Tracked(BusyServer):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield Tracked
    for s in made:
        s.stop()


ERRORS: dict[str, type[ShoalError]] = {
    "MODEL_LOADING": ModelLoading,
    "QUEUE_FULL": QueueFull,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
}


def test_async_client_waits_the_retry_after_and_succeeds(busy: type[BusyServer]) -> None:
    srv = busy(2, "MODEL_LOADING", "0.2")

    async def go() -> list[dict[str, object]]:
        async with AsyncClient(srv.url) as c:
            return await c.encode(MINILM, ["a", "b"])

    rows = asyncio.run(go())
    assert len(rows) == 2 and np.asarray(rows[0]["dense"]).shape == (384,)
    assert len(srv.posts) == 3
    assert all(gap >= 0.19 for gap in srv.gaps()), srv.gaps()  # it waited what the server asked, each time


@pytest.mark.parametrize("code", sorted(ERRORS))
def test_sync_client_retries_each_transient_code(busy: type[BusyServer], code: str) -> None:
    srv = busy(1, code, "0")
    with Client(srv.url) as c:
        assert np.asarray(c.encode(MINILM, "x")["dense"]).shape == (384,)
    assert len(srv.posts) == 2


def test_attempts_are_bounded_and_the_final_error_says_so(busy: type[BusyServer]) -> None:
    srv = busy(100, "QUEUE_FULL", "0")
    with Client(srv.url, retry=RetryPolicy(attempts=3, max_wait_s=60)) as c, pytest.raises(QueueFull) as e:
        c.encode(MINILM, "x")
    assert len(srv.posts) == 3
    assert e.value.status == 503 and e.value.code == "QUEUE_FULL"
    assert "the server is busy" in e.value.message and "gave up after 3 attempts" in e.value.message


def test_total_wait_is_bounded(busy: type[BusyServer]) -> None:
    """Retry-After 0.3 s with 0.5 s to spend: wait 0.3, then the 0.2 left, then give up (3 requests)."""
    srv = busy(100, "MODEL_LOADING", "0.3")

    async def go() -> None:
        async with AsyncClient(srv.url, retry=RetryPolicy(attempts=50, max_wait_s=0.5)) as c:
            await c.encode(MINILM, "x")

    with pytest.raises(ModelLoading) as e:
        asyncio.run(go())
    assert len(srv.posts) == 3, srv.posts
    assert "gave up after 3 attempts and 0.5s of waiting" in e.value.message


def test_no_retry_for_what_waiting_does_not_fix_or_when_switched_off(busy: type[BusyServer]) -> None:
    srv = busy(100, "MODEL_UNAVAILABLE", None)  # no weights here: retrying will not help
    with Client(srv.url) as c, pytest.raises(ModelUnavailable) as e:
        c.encode(MINILM, "x")
    assert len(srv.posts) == 1 and "gave up" not in e.value.message
    off = busy(100, "MODEL_LOADING", "0")
    with Client(off.url, retry=RetryPolicy(attempts=1)) as c, pytest.raises(ModelLoading) as once:
        c.encode(MINILM, "x")
    assert len(off.posts) == 1 and once.value.message == "the server is busy (MODEL_LOADING)"


def test_retry_after_forms_and_policy_checks() -> None:
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds("0.25") == 0.25
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("-4") == 0.0 and retry_after_seconds("nan") is None
    later = retry_after_seconds(formatdate(time.time() + 30, usegmt=True))  # the HTTP-date form
    assert later is not None and 20 < later <= 31
    for bad in ({"attempts": 0}, {"max_wait_s": -1.0}, {"max_wait_s": float("inf")}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


def test_ingest_rides_out_a_loading_model(busy: type[BusyServer], tmp_path: Path) -> None:
    """The first encode requests of an ingest meet MODEL_LOADING; the files still get embedded and written."""
    from pipeline import PipelineConfig, ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.md").write_text(f"# Pump {i}\n\nThe impeller of pump {i} is checked every week.\n")
    srv = busy(2, "MODEL_LOADING", "0")
    cfg = PipelineConfig.model_validate({"db": f"lancedb://{tmp_path / 'db'}", "engine": {"url": srv.url}})
    s = ingest(docs, cfg)
    assert s.files_processed == 3 and not s.files_failed, s.files_failed
    assert s.chunks_written >= 3 and len(srv.posts) > 2
    strict = busy(100, "MODEL_LOADING", "0")  # the pipeline's own bound: engine.retry_attempts
    cfg = PipelineConfig.model_validate(
        {"db": f"lancedb://{tmp_path / 'db2'}", "engine": {"url": strict.url, "retry_attempts": 2}}
    )
    s = ingest(docs, cfg)
    assert len(s.files_failed) == 3 and "MODEL_LOADING" in s.files_failed[0].reason
    assert "gave up after 2 attempts" in s.files_failed[0].reason

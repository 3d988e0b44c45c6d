"""Replies decoded at a boundary are checked against their type: a server (over HTTP) or a worker (over NATS)
that answers a malformed reply gives the caller a clear INTERNAL error naming the field, never a half-read result."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import shoal
from engine.errors import InternalError, ShoalError
from engine.queue.nats.messages import read_answer
from engine.tasks.checked import checked_reply
from engine.wire import packb

GOOD_ENCODE = {
    "items": [{"dense": {"dims": 3, "dtype": "float32", "values": [0.1, 0.2, 0.3]}}],
    "usage": {"input_tokens": 2},
}
MALFORMED = {
    "encode": {
        "items": [{"dense": {"dims": "three", "dtype": "float32", "values": [0.1]}}],
        "usage": {"input_tokens": 1},
    },
    "score": {"scores": [{"item_id": "a", "score": "high", "rank": 0}], "usage": {"input_tokens": 1}},
    "extract": {"items": [{"id": "item-0", "entities": "none"}], "usage": {"input_tokens": 1}},
}


class Replies(BaseHTTPRequestHandler):
    """A real HTTP server that answers every POST with the body the test put in `answers` for its path."""

    answers: dict[str, object] = {}

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = json.dumps(self.answers.get(self.path.split("/")[2], {})).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Replies)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_http_client_reads_a_well_formed_reply(url: str) -> None:
    Replies.answers = {"encode": GOOD_ENCODE}
    with shoal.Client(url, use_json=True, max_items=8) as client:
        got = client.encode("m", "text")
    assert np.allclose(got["dense"], [0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    ("kind", "field"),
    [("encode", "items.0.dense.dims"), ("score", "scores.0.score"), ("extract", "items.0.entities")],
)
def test_http_client_refuses_a_malformed_reply_naming_the_field(url: str, kind: str, field: str) -> None:
    Replies.answers = {kind: MALFORMED[kind]}
    with shoal.Client(url, use_json=True, max_items=8) as client, pytest.raises(ShoalError) as caught:
        if kind == "encode":
            client.encode("m", "text")
        elif kind == "score":
            client.score("m", "query", ["text"])
        else:
            client.extract("m", "text", labels=["person"])
    assert caught.value.code == "INTERNAL"
    assert f"POST /v1/{kind}/m is malformed: {field}" in caught.value.message


def test_http_client_refuses_arrays_that_are_not_numbers(url: str) -> None:
    Replies.answers = {
        "encode": {**GOOD_ENCODE, "items": [{"dense": {"dims": 1, "dtype": "float32", "values": ["x"]}}]}
    }
    with shoal.Client(url, use_json=True, max_items=8) as client, pytest.raises(ShoalError) as caught:
        client.encode("m", "text")
    assert "items.0.dense.values" in caught.value.message


def test_nats_answer_is_checked_against_its_task_kind() -> None:
    good = read_answer(packb({"id": "t1", "kind": "encode", "result": GOOD_ENCODE}))
    assert good["id"] == "t1" and "error" not in good and good["result"]["usage"] == {"input_tokens": 2}
    for kind, body in MALFORMED.items():
        bad = read_answer(packb({"id": "t2", "kind": kind, "result": body}))
        assert bad["id"] == "t2" and "result" not in bad  # the waiting caller gets the error, not the body
        assert bad["error"]["code"] == "INTERNAL" and "a worker's answer is malformed" in bad["error"]["message"]
    wrong_kind = read_answer(packb({"id": "t3", "kind": "score", "result": GOOD_ENCODE}))
    assert wrong_kind["error"]["code"] == "INTERNAL" and "scores" in wrong_kind["error"]["message"]
    empty = read_answer(packb({"id": "t4"}))
    assert empty["error"]["code"] == "INTERNAL"


def test_checked_reply_keeps_msgpack_arrays_as_they_came() -> None:
    values = np.arange(3, dtype=np.float32)
    reply = {"items": [{"dense": {"dims": 3, "dtype": "float32", "values": values}}], "usage": {"input_tokens": 1}}
    assert checked_reply("encode", reply, "here")["items"][0]["dense"]["values"] is values
    with pytest.raises(InternalError, match="names no task kind"):
        checked_reply("summarise", reply, "here")

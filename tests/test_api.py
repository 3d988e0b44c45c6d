"""The HTTP API against a live `shoal serve`: round trips, output shapes, and every error in API.md's table."""

from __future__ import annotations

import httpx
import msgpack
import numpy as np
import pytest

from engine.wire import packb, unpackb
from tests.conftest import MINILM
from tests.helpers import LiveServer

MP = {"Content-Type": "application/msgpack"}
TEXTS = ["shoal serves small models", "a", "vector search over documents " * 20]


def post_mp(server: LiveServer, body: object, model: str = MINILM, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/encode/{model}", content=packb(body), headers=headers or MP, timeout=60)


def assert_healthy(server: LiveServer) -> None:
    """After any bad request the server is alive and still answers a good one."""
    assert server.alive()
    r = post_mp(server, {"items": [{"text": "still alive"}]})
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_msgpack_round_trip_matches_engine(server: LiveServer, engine: object) -> None:
    r = post_mp(server, {"items": [{"id": f"i{k}", "text": t} for k, t in enumerate(TEXTS)]})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/msgpack")
    for h in ("X-Queue-Time", "X-Tokenization-Time", "X-Inference-Time", "X-Total-Time"):
        assert float(r.headers[h]) >= 0
    body = unpackb(r.content)
    assert body["model"] == MINILM and set(body["timing"]) >= {"total_ms", "queue_ms", "inference_ms"}
    local = engine.encode(MINILM, TEXTS)
    for k, (item, want) in enumerate(zip(body["items"], local, strict=True)):
        assert item["id"] == f"i{k}"
        assert item["dense"]["dims"] == 384 and item["dense"]["dtype"] == "float32"
        assert isinstance(item["dense"]["values"], np.ndarray) and item["dense"]["values"].dtype == np.float32
        np.testing.assert_allclose(item["dense"]["values"], want["dense"], atol=1e-6)
    # the arrays travel in the msgpack-numpy convention: a map with nd/type/kind/shape/data, bytes keys
    raw = msgpack.unpackb(r.content, raw=False)
    vec = raw["items"][0]["dense"]["values"]
    assert set(vec) == {b"nd", b"type", b"kind", b"shape", b"data"} and vec[b"type"] == "<f4"


@pytest.mark.slow
def test_json_round_trip(server: LiveServer, engine: object) -> None:
    r = httpx.post(f"{server.url}/v1/encode/{MINILM}", json={"items": [{"text": TEXTS[0]}]}, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    values = r.json()["items"][0]["dense"]["values"]
    np.testing.assert_allclose(values, engine.encode(MINILM, TEXTS[0])["dense"], atol=1e-6)
    # msgpack in, JSON out when the client accepts only JSON
    r = post_mp(server, {"items": [{"text": "x"}]}, headers={**MP, "Accept": "application/json"})
    assert r.headers["content-type"].startswith("application/json") and len(r.json()["items"]) == 1


@pytest.mark.parametrize(
    ("dtype", "np_dtype", "length"),
    [
        ("float16", np.float16, 384),
        ("int8", np.int8, 384),
        ("uint8", np.uint8, 384),
        ("binary", np.uint8, 48),
        ("ubinary", np.uint8, 48),
    ],
)
def test_output_dtypes(server: LiveServer, engine: object, dtype: str, np_dtype: type, length: int) -> None:
    r = post_mp(server, {"items": [{"text": TEXTS[0]}], "params": {"output_dtype": dtype}})
    dense = unpackb(r.content)["items"][0]["dense"]
    assert dense["dtype"] == dtype and dense["dims"] == 384
    assert dense["values"].dtype == np_dtype and dense["values"].shape == (length,)
    ref = engine.encode(MINILM, TEXTS[0])["dense"]
    if dtype in ("binary", "ubinary"):
        assert np.array_equal(np.unpackbits(dense["values"]).astype(bool), ref > 0)
    elif dtype == "uint8":  # the vector's [min, max] mapped to [0, 255]
        low, high = ref.min(), ref.max()
        assert dense["values"].min() == 0 and dense["values"].max() == 255
        np.testing.assert_allclose(dense["values"] / 255 * (high - low) + low, ref, atol=(high - low) / 255)
    elif dtype == "int8":
        assert np.abs(dense["values"].astype(np.float32) / 127 - ref).max() <= 1 / 127
    else:
        np.testing.assert_allclose(dense["values"].astype(np.float32), ref, atol=1e-3)


def test_matryoshka_dimensions_renormalised(server: LiveServer, engine: object) -> None:
    r = post_mp(server, {"items": [{"text": TEXTS[0]}], "params": {"options": {"dimensions": 64}}})
    v = unpackb(r.content)["items"][0]["dense"]["values"]
    assert v.shape == (64,) and abs(np.linalg.norm(v) - 1) < 1e-5
    full = engine.encode(MINILM, TEXTS[0])["dense"]
    np.testing.assert_allclose(v, full[:64] / np.linalg.norm(full[:64]), atol=1e-5)


def test_query_instruction_and_normalize_off(server: LiveServer, engine: object) -> None:
    body = {"items": [{"text": "x"}], "params": {"instruction": "query: ", "options": {"normalize": False}}}
    v = unpackb(post_mp(server, body).content)["items"][0]["dense"]["values"]
    assert abs(np.linalg.norm(v) - 1) > 1e-3
    want = engine.encode(MINILM, "query: x", options={"normalize": False})["dense"]
    np.testing.assert_allclose(v, want, atol=1e-5)


BAD_REQUESTS = [
    # (name, model, raw body, content-type, status, code)
    (
        "unknown model",
        "no/such-model",
        packb({"items": [{"text": "x"}]}),
        "application/msgpack",
        404,
        "MODEL_NOT_FOUND",
    ),
    ("empty items", MINILM, packb({"items": []}), "application/msgpack", 400, "INVALID_INPUT"),
    ("no items key", MINILM, packb({"texts": ["x"]}), "application/msgpack", 400, "INVALID_INPUT"),
    ("body not a map", MINILM, packb(["x"]), "application/msgpack", 400, "INVALID_INPUT"),
    ("item without text", MINILM, packb({"items": [{"id": "1"}]}), "application/msgpack", 400, "INVALID_INPUT"),
    ("item text not a string", MINILM, packb({"items": [{"text": 5}]}), "application/msgpack", 400, "INVALID_INPUT"),
    ("image item", MINILM, packb({"items": [{"images": [b"\x89PNG"]}]}), "application/msgpack", 400, "INVALID_INPUT"),
    ("wrong content type", MINILM, b"items=x", "text/plain", 400, "INVALID_INPUT"),
    ("malformed msgpack", MINILM, b"\xc1\xff\x00garbage", "application/msgpack", 400, "INVALID_INPUT"),
    (
        "truncated msgpack",
        MINILM,
        packb({"items": [{"text": "x" * 50}]})[:20],
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    ("malformed json", MINILM, b'{"items": [', "application/json", 400, "INVALID_INPUT"),
    (
        "object numpy in msgpack",
        MINILM,
        packb(
            {"items": [{"text": "x"}], "p": {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [1], b"data": b"x"}}
        ),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "unknown output dtype",
        MINILM,
        packb({"items": [{"text": "x"}], "params": {"output_dtype": "int4"}}),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "output the model lacks",
        MINILM,
        packb({"items": [{"text": "x"}], "params": {"output_types": ["sparse"]}}),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "dimensions over model",
        MINILM,
        packb({"items": [{"text": "x"}], "params": {"options": {"dimensions": 999}}}),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "dimensions zero",
        MINILM,
        packb({"items": [{"text": "x"}], "params": {"options": {"dimensions": 0}}}),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "unknown option",
        MINILM,
        packb({"items": [{"text": "x"}], "params": {"options": {"turbo": True}}}),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "unknown profile",
        MINILM,
        packb({"items": [{"text": "x"}], "params": {"options": {"profile": "tpu"}}}),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "unknown lora",
        MINILM,
        packb({"items": [{"text": "x"}], "params": {"options": {"lora": "legal"}}}),
        "application/msgpack",
        400,
        "INVALID_INPUT",
    ),
    (
        "over-long, truncation off",
        MINILM,
        packb({"items": [{"text": "ok"}, {"text": "word " * 400}], "params": {"options": {"truncate": False}}}),
        "application/msgpack",
        400,
        "INPUT_TOO_LONG",
    ),
    ("too many items", MINILM, packb({"items": [{"text": "x"}] * 65}), "application/msgpack", 413, "PAYLOAD_TOO_LARGE"),
    (
        "body too large",
        MINILM,
        packb({"items": [{"text": "y" * (3 * 1024 * 1024)}]}),
        "application/msgpack",
        413,
        "PAYLOAD_TOO_LARGE",
    ),
]


@pytest.mark.parametrize(
    ("name", "model", "body", "ctype", "status", "code"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
def test_bad_requests_get_clear_errors(
    server: LiveServer, name: str, model: str, body: bytes, ctype: str, status: int, code: str
) -> None:
    r = httpx.post(f"{server.url}/v1/encode/{model}", content=body, headers={"Content-Type": ctype}, timeout=60)
    assert r.status_code == status, (name, r.text)
    detail = r.json()["detail"]
    assert detail["code"] == code and len(detail["message"]) > 10, detail
    assert_healthy(server)


def test_truncation_on_by_default_for_the_card(server: LiveServer) -> None:
    r = post_mp(server, {"items": [{"text": "word " * 400}]})
    assert r.status_code == 200


@pytest.mark.slow
def test_models_health_and_metrics(server: LiveServer) -> None:
    models = httpx.get(f"{server.url}/v1/models").json()["models"]
    card = next(m for m in models if m["name"] == MINILM)
    assert card["dims"] == {"dense": 384} and card["max_sequence_length"] == 256 and "dense" in card["outputs"]
    assert httpx.get(f"{server.url}/v1/models/{MINILM}").json()["name"] == MINILM
    missing = httpx.get(f"{server.url}/v1/models/nope/nothing")
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "MODEL_NOT_FOUND"
    assert httpx.get(f"{server.url}/healthz").status_code == 200
    assert httpx.get(f"{server.url}/readyz").status_code == 200
    post_mp(server, {"items": [{"text": "count me"}]})
    assert post_mp(server, {"items": [{"text": "x"}]}, model="no/such-model").status_code == 404
    metrics = httpx.get(f"{server.url}/metrics").text
    for name in (
        "shoal_requests_total",
        "shoal_request_seconds_bucket",
        "shoal_batch_tokens_bucket",
        "shoal_queue_depth",
    ):
        assert name in metrics
    assert f'shoal_requests_total{{code="200",endpoint="encode",model="{MINILM}"}}' in metrics
    assert 'code="404",endpoint="encode",model="unknown"' in metrics  # bounded labels
    assert "no/such-model" not in metrics


@pytest.mark.slow
def test_api_key_required_when_configured() -> None:
    srv = LiveServer(env={"SHOAL_API_KEY": "s3cret"}).wait_ready()
    try:
        body = packb({"items": [{"text": "x"}]})
        r = httpx.post(f"{srv.url}/v1/encode/{MINILM}", content=body, headers=MP)
        assert r.status_code == 401 and r.json()["detail"]["code"] == "UNAUTHORIZED"
        r = httpx.post(f"{srv.url}/v1/encode/{MINILM}", content=body, headers={**MP, "Authorization": "Bearer nope"})
        assert r.status_code == 401
        r = httpx.post(
            f"{srv.url}/v1/encode/{MINILM}", content=body, headers={**MP, "Authorization": "Bearer s3cret"}, timeout=60
        )
        assert r.status_code == 200
        assert httpx.get(f"{srv.url}/healthz").status_code == 200  # probes stay open
    finally:
        srv.stop()


def test_extract_unknown_routes_and_methods_get_typed_errors(server: LiveServer) -> None:
    body = packb({"items": [{"text": "Ada Lovelace met Babbage in London"}], "params": {"labels": ["person"]}})
    r = httpx.post(f"{server.url}/v1/extract/{MINILM}", content=body, headers=MP)  # an embedder classifies
    assert r.status_code == 200, r.text
    assert [c["label"] for c in unpackb(r.content)["items"][0]["classifications"]] == ["person"]
    r = httpx.post(f"{server.url}/v1/extract/cross-encoder/ms-marco-MiniLM-L-6-v2", content=body, headers=MP)
    assert r.status_code == 400 and r.json()["detail"]["code"] == "INVALID_INPUT"
    assert "cannot extract" in r.json()["detail"]["message"]
    r = httpx.post(f"{server.url}/v1/extract/nobody/nothing", content=body, headers=MP)
    assert r.status_code == 404 and r.json()["detail"]["code"] == "MODEL_NOT_FOUND"
    r = httpx.post(f"{server.url}/v1/nothing-here", content=body, headers=MP)
    assert r.status_code == 404 and r.json()["detail"]["code"] == "NOT_FOUND"
    r = httpx.get(f"{server.url}/v1/encode/{MINILM}")
    assert r.status_code == 405 and r.json()["detail"]["code"] == "METHOD_NOT_ALLOWED"
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'endpoint="other"' in metrics and "nothing-here" not in metrics
    assert_healthy(server)
